package acpp

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
)

// groupErr submits a command group and returns Submit's error, or else
// the group's (its event's).
func groupErr(ctx context.Context, q *Queue, cg func(h *Handler) error, opts ...SubmitOption) error {
	ev, err := q.Submit(cg, opts...)
	if err != nil {
		return err
	}
	return ev.Wait(ctx)
}

// TestMemoryLimitRefusesCleanly_B5: with a tiny budget (WithMemoryLimit),
// the first use of a buffer larger than it fails its command group (Submit,
// where the accessor allocates on the CPU at once, or else its event) with
// ErrMemoryLimit, naming the size, the budget and
// what to do, and nothing is allocated (B5: allocation on first use is
// where admission happens); the queue goes on: a buffer that fits runs,
// and a copy of the data (CopyData) or a USM allocation beyond the budget
// is refused by NewBufferFrom and Malloc. The budget's use goes back to 0
// when the buffers are closed.
func TestMemoryLimitRefusesCleanly_B5(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, WithDevice(CPU, 0), WithMemoryLimit(MemoryLimit{Bytes: 1 << 20}))
	if b := q.MemoryBudgets(); len(b) == 0 || !b[0].Host || b[0].Budget != 1<<20 || b[0].Used != 0 {
		t.Fatalf("MemoryBudgets() = %+v, want host memory first, with a 1 MiB budget", b)
	}
	big := must(NewBuffer[float32](q, R1(1<<19), BufferName("big"))) // 2 MiB
	err := groupErr(ctx, q, func(h *Handler) error {
		w := Write(h, big, NoInit)
		h.ParallelFor(R1(1<<19), func(it Item) { w.Set(it.ID(0), 1) })
		return nil
	})
	var be *device.BudgetError
	if !errors.Is(err, ErrMemoryLimit) || !errors.As(err, &be) || be.Bytes != 2<<20 || be.Limit != 1<<20 {
		t.Fatalf("event of a group on a 2 MiB buffer under a 1 MiB budget: %v; want ErrMemoryLimit with its size and budget", err)
	}
	for _, want := range []string{"2097152 bytes", "host memory budget", "1.0 MiB", "WithMemoryLimit", `allocate buffer "big"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	q.Wait(ctx)

	small := must(NewBuffer[float32](q, R1(1024)))
	ev := must(q.Submit(func(h *Handler) error {
		w := Write(h, small, NoInit)
		h.ParallelFor(R1(1024), func(it Item) { w.Set(it.ID(0), 3) })
		return nil
	}))
	if err := ev.Wait(ctx); err != nil {
		t.Fatalf("a buffer within the budget after the refusal: %v", err)
	}
	if v := must(small.Read(ctx)); v[0] != 3 || v[1023] != 3 {
		t.Errorf("small buffer = %v…, want 3s", v[:2])
	}
	if used := q.MemoryBudgets()[0].Used; used != 4096 {
		t.Errorf("host memory used = %d, want 4096 (the small buffer only)", used)
	}

	if _, err := NewBufferFrom(q, make([]float32, 1<<19), R1(1<<19), CopyData()); !errors.Is(err, ErrMemoryLimit) {
		t.Errorf("NewBufferFrom(CopyData) of 2 MiB = %v, want ErrMemoryLimit", err)
	}
	if _, err := Malloc[float32](q, 1<<19, device.MemHost); !errors.Is(err, ErrMemoryLimit) {
		t.Errorf("Malloc of 2 MiB = %v, want ErrMemoryLimit", err)
	}
	p := must(Malloc[float32](q, 1024, device.MemHost))
	if used := q.MemoryBudgets()[0].Used; used != 8192 {
		t.Errorf("host memory used with a 4 KiB USM allocation = %d, want 8192", used)
	}
	if err := Free(q, p); err != nil {
		t.Fatal(err)
	}
	if err := big.Close(); err != nil {
		t.Fatal(err)
	}
	if err := small.Close(); err != nil {
		t.Fatal(err)
	}
	if used := q.MemoryBudgets()[0].Used; used != 0 {
		t.Errorf("host memory used after closing every buffer = %d, want 0", used)
	}
}

// TestDefaultBudgetRefusesOneTiB_B5: without WithMemoryLimit the queue
// still has a budget (75% of host memory): the 1 TiB buffer of issue 14
// fails its group (Submit or event) with ErrMemoryLimit instead of crashing the process.
func TestDefaultBudgetRefusesOneTiB_B5(t *testing.T) {
	size, _, err := cpu.HostMemory()
	if err != nil {
		t.Skipf("host memory size unknown here: %v", err)
	}
	if b, _ := (MemoryLimit{}).Budget(size, true); b >= 1<<40 {
		t.Skipf("the default host budget (%d bytes) admits 1 TiB here; the test would allocate it", b)
	}
	ctx := context.Background()
	q := newQueue(t, WithDevice(CPU, 0))
	b := must(NewBuffer[float32](q, R2(268435456, 1024)))
	err = groupErr(ctx, q, func(h *Handler) error {
		w := Write(h, b, NoInit)
		h.SingleTask(func() { w.Set(0, 1) })
		return nil
	})
	if !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), "1099511627776 bytes") || !strings.Contains(err.Error(), "75% of") {
		t.Fatalf("group on a 1 TiB buffer: %v; want ErrMemoryLimit naming the size and the default budget", err)
	}
	q.Wait(ctx)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}
