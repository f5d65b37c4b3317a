package exec

import (
	"errors"
	"fmt"
	"sync"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/device"
)

// budgetHint says what to do about an allocation the embedded runtime
// refused.
const budgetHint = "nothing was allocated and the queue goes on; use smaller buffers, release or close buffers you are done with, or give the queue a larger budget (acpp.WithMemoryLimit; acpp-submit run --max-bytes)"

// budgets admit the runtime's allocations against the budget of their
// memory before they are made: Go cannot recover from a failed
// allocation, so a buffer larger than the machine would otherwise crash
// the program.
type budgets struct {
	limit    device.MemoryLimit
	hostSize uint64                             // host memory's size (0: unknown)
	byMem    map[coherence.MemID]*device.Budget // read-only after New

	mu    sync.Mutex               // guards owned
	owned map[*device.Mem]ownedMem // allocations made outside a buffer's allocation entries
}

// ownedMem is the memory and size an allocation was admitted with.
type ownedMem struct {
	mem   coherence.MemID
	bytes uint64
}

// MemoryBudget is the budget of one memory of the runtime.
type MemoryBudget struct {
	// Mem is the memory (coherence.HostMem for host memory); Device the
	// device that allocates it.
	Mem    coherence.MemID
	Device device.ID
	// Size is the memory's size (0: unknown); Budget what the runtime's
	// allocations may hold in it together (0: no budget); Used what they
	// hold now; How says how the budget was chosen.
	Size, Budget, Used uint64
	How                string
}

// newBudgets sets the budget of each memory of rt: host memory of
// hostSize bytes (0: unknown) and each device memory of its reported
// size.
func (rt *Runtime) newBudgets(limit device.MemoryLimit, hostSize uint64) error {
	if err := limit.Validate(); err != nil {
		return fmt.Errorf("acpp: %w", err)
	}
	rt.budget = budgets{limit: limit, hostSize: hostSize, byMem: map[coherence.MemID]*device.Budget{}, owned: map[*device.Mem]ownedMem{}}
	for mem, d := range rt.devOf {
		size, host := uint64(max(d.Info().Caps.MemBytes, 0)), mem == coherence.HostMem
		if host {
			size = hostSize
		}
		b, how := limit.Budget(size, host)
		if b == 0 && size != 0 && !limit.Off {
			// A share so small that it rounds to no byte (Share 1e-12 of
			// 32 GiB) is a budget that admits nothing, not "no budget".
			b = 1
		}
		rt.budget.byMem[mem] = device.NewBudget(b, how)
	}
	return nil
}

// MemoryBudgets lists the budget of each memory, host memory first.
func (rt *Runtime) MemoryBudgets() []MemoryBudget {
	out := make([]MemoryBudget, 0, len(rt.budget.byMem))
	for mem := coherence.HostMem; len(out) < len(rt.budget.byMem); mem++ {
		b, d := rt.budget.byMem[mem], rt.devOf[mem]
		if b == nil {
			continue
		}
		size := rt.budget.hostSize
		if mem != coherence.HostMem {
			size = uint64(max(d.Info().Caps.MemBytes, 0))
		}
		out = append(out, MemoryBudget{Mem: mem, Device: d.Info().ID, Size: size, Budget: b.Limit(), Used: b.Used(), How: b.How()})
	}
	return out
}

func (rt *Runtime) memName(mem coherence.MemID) string {
	if mem == coherence.HostMem {
		return "host memory"
	}
	if d := rt.devOf[mem]; d != nil {
		return d.Info().ID.String() + " memory"
	}
	return fmt.Sprintf("memory %d", mem)
}

// reserve admits bytes in mem; the error matches device.ErrOverBudget and
// says what to do.
func (rt *Runtime) reserve(mem coherence.MemID, bytes uint64, what string) error {
	err := rt.budget.byMem[mem].Reserve(bytes, what, rt.memName(mem))
	var be *device.BudgetError
	if errors.As(err, &be) {
		be.Hint = budgetHint
	}
	return err
}

func (rt *Runtime) release(mem coherence.MemID, bytes uint64) {
	rt.budget.byMem[mem].Release(bytes)
}

// usmMem is the memory a USM allocation of kind on d takes: host memory
// for host USM and for every kind on a host-unified device, else the
// device's own.
func (rt *Runtime) usmMem(d device.Device, kind device.MemKind) coherence.MemID {
	if kind == device.MemHost {
		return coherence.HostMem
	}
	return rt.memOf[d.Info().ID]
}

// AllocOwned allocates bytes of kind on d after admitting them against
// the budget of the memory they take, for memory the runtime hands out
// outside a buffer's allocations (USM, a buffer's copy of the user's
// data). FreeOwned frees it and returns the bytes to the budget; memory
// that becomes a buffer's allocation (AddBuffer) is returned when the
// buffer is removed.
func (rt *Runtime) AllocOwned(d device.Device, kind device.MemKind, bytes int, what string) (*device.Mem, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("%w: %s of %d bytes", device.ErrBadOp, what, bytes)
	}
	mem := rt.usmMem(d, kind)
	if err := rt.reserve(mem, uint64(bytes), what); err != nil {
		return nil, err
	}
	m, err := d.Alloc(kind, bytes)
	if err != nil {
		rt.release(mem, uint64(bytes))
		return nil, err
	}
	rt.budget.mu.Lock()
	rt.budget.owned[m] = ownedMem{mem: mem, bytes: uint64(bytes)}
	rt.budget.mu.Unlock()
	return m, nil
}

// FreeOwned frees memory from AllocOwned.
func (rt *Runtime) FreeOwned(d device.Device, m *device.Mem) error {
	rt.dropOwned(m)
	return d.Free(m)
}

// dropOwned returns m's bytes to the budget, if AllocOwned admitted it.
func (rt *Runtime) dropOwned(m *device.Mem) {
	rt.budget.mu.Lock()
	o, ok := rt.budget.owned[m]
	delete(rt.budget.owned, m)
	rt.budget.mu.Unlock()
	if ok {
		rt.release(o.mem, o.bytes)
	}
}

// returnBudget returns what a removed allocation entry held of its
// memory's budget: its admitted bytes, or, for memory handed to
// AddBuffer, what AllocOwned admitted for it.
func (rt *Runtime) returnBudget(e *allocEntry) {
	if e.user {
		if e.mem != nil {
			rt.dropOwned(e.mem)
		}
		return
	}
	if e.reserved > 0 {
		rt.release(e.at, e.reserved)
		e.reserved = 0
	}
}
