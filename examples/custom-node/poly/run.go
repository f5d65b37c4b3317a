package poly

import (
	"context"
	"fmt"
	"hash/crc32"
	"unsafe"

	"github.com/acpp/acpp"
)

// Run launches custom.poly steps times over n elements on q and returns y.
// It refuses n < 1 and steps < 0.
func Run(ctx context.Context, q *acpp.Queue, n, steps int) ([]float32, error) {
	if n < 1 || steps < 0 {
		return nil, fmt.Errorf("poly.Run: need n >= 1 and steps >= 0 (got %d, %d)", n, steps)
	}
	Register() // embedded, it runs here; on a cluster, its arguments are checked here
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i%97)/97, float32(i%13)
	}
	x, err := acpp.NewBufferFrom(q, xs, acpp.R1(n))
	if err != nil {
		return nil, err
	}
	y, err := acpp.NewBufferFrom(q, ys, acpp.R1(n))
	if err != nil {
		return nil, err
	}
	for s := range steps {
		a := float32(s+1) * 0.5
		if _, err := q.Submit(func(h *acpp.Handler) error {
			h.Launch(Name, acpp.R1(n), acpp.Scalar(a), acpp.ReadRaw(h, x), acpp.ReadWriteRaw(h, y))
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if err := q.Wait(ctx); err != nil {
		return nil, err
	}
	if err := y.Close(); err != nil { // writes y back into ys
		return nil, err
	}
	return ys, x.Close()
}

// Checksum is a CRC of ys' bytes: equal runs print the same one.
func Checksum(ys []float32) uint32 {
	return crc32.ChecksumIEEE(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(ys))), len(ys)*4))
}
