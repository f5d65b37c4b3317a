package coherence

import "testing"

// BenchmarkSubmitOneAccess: Submit then Complete of a group with one access
// to a one-page buffer on its host allocation, in batches of 256 (the core's
// share of the root package's BenchmarkSubmitEmpty). read: independent
// readers; read_write: a dependency chain.
func BenchmarkSubmitOneAccess(b *testing.B) {
	for _, mode := range []Mode{Read, ReadWrite} {
		b.Run(mode.String(), func(b *testing.B) {
			c := New(Config{})
			geo, err := NewGeometry(Dims{1, 1, 1}, 4, Dims{})
			if err != nil {
				b.Fatal(err)
			}
			host := AllocID{}
			if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: geo, HostData: &host}); err != nil {
				b.Fatal(err)
			}
			var id CGID
			const batch = 256
			b.ReportAllocs()
			for b.Loop() {
				first := id + 1
				for range batch {
					id++
					if _, err := c.Submit(CommandGroup{ID: id, Accesses: []Access{
						{Buffer: 1, Pages: geo.All(), Mode: mode, Target: host}}}); err != nil {
						b.Fatal(err)
					}
				}
				for g := first; g <= id; g++ {
					c.Complete(g)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/group")
		})
	}
}
