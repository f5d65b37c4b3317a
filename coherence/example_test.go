package coherence_test

import (
	"fmt"

	"github.com/acpp/acpp/coherence"
)

// The usage sketch of the package comment (doc.go), run: a discard write of
// a fresh, uninitialised 4096×4096 float32 buffer on a GPU allocates and
// copies nothing (B5, T1, T2); a read of it on the host after the write
// completed copies every page back, as few boxes (T3, T4).
func Example() {
	c := coherence.New(coherence.Config{})
	geo, _ := coherence.NewGeometry(coherence.Dims{1, 4096, 4096}, 4, coherence.Dims{})
	_ = c.AddBuffer(coherence.BufferSpec{ID: 1, Geometry: geo}) // no HostData: uninitialised
	pages, _ := geo.PageRange(coherence.Dims{0, 0, 0}, geo.Range)
	gpu := coherence.AllocID{Node: 0, Mem: 1}
	step, err := c.Submit(coherence.CommandGroup{
		ID: 1,
		Accesses: []coherence.Access{{Buffer: 1, Pages: pages, Mode: coherence.Write,
			Discard: true, Target: gpu}},
	})
	fmt.Println(geo.PageSize, geo.Pages(), err)
	fmt.Println("allocate:", step.Allocate, "copies:", len(step.Copies))
	c.Complete(1)

	step, _ = c.Submit(coherence.CommandGroup{
		ID:       2,
		Accesses: []coherence.Access{{Buffer: 1, Pages: pages, Mode: coherence.Read, Target: coherence.AllocID{}}},
	})
	fmt.Println("deps:", step.Deps, "allocate:", step.Allocate)
	for _, cp := range step.Copies {
		fmt.Println("copy:", cp.Src, "->", cp.Dst, cp.Boxes, cp.Pages, "pages")
	}
	// Output:
	// [1 4 4096] [1 1024 1] <nil>
	// allocate: [{1 n0/m1 67108864}] copies: 0
	// deps: [] allocate: [{1 n0/host 67108864}]
	// copy: n0/m1 -> n0/host [[0,1)x[0,1024)x[0,1)] 1024 pages
}
