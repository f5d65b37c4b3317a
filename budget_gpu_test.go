//go:build gpu

package acpp

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/acpp/acpp/device"
)

// TestGPUBudget_B5: on a GPU the queue's budget of its memory is 90% of
// its size by default, and a buffer of the GPU's whole memory fails its
// group with ErrMemoryLimit naming the GPU instead of reaching cuMemAlloc.
// Skipped without a GPU.
func TestGPUBudget_B5(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	var gpu *MemoryBudget
	for _, b := range q.MemoryBudgets() {
		if b.Device.Kind == CUDA {
			gpu = &b
			break
		}
	}
	if gpu == nil {
		t.Skip("no GPU on this machine")
	}
	if gpu.Size == 0 || gpu.Budget != uint64(float64(gpu.Size)*device.DefaultDeviceShare) {
		t.Fatalf("GPU budget %+v, want 90%% of its size", *gpu)
	}
	b := must(NewBuffer[byte](q, R1(int(gpu.Size))))
	err := groupErr(ctx, q, func(h *Handler) error {
		Fill(h, Write(h, b, NoInit), 1)
		return nil
	}, On(gpu.Device))
	if !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), gpu.Device.String()+" memory budget") {
		t.Fatalf("group on a buffer of the whole GPU: %v; want ErrMemoryLimit naming %s", err, gpu.Device)
	}
	q.Wait(ctx)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}
