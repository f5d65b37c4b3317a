package device

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
)

// Default shares of a memory's size that allocations may use when no limit
// is configured (the zero MemoryLimit). Host memory keeps a quarter for the
// process itself (Go's heap, the program's own slices, page staging that
// comes and goes), the operating system and other programs; a GPU keeps a
// tenth for its context, the driver and kernels' local memory.
const (
	DefaultHostShare   = 0.75
	DefaultDeviceShare = 0.90
)

// ErrOverBudget matches every *BudgetError: an allocation was refused
// before it was made because its memory's budget would be exceeded.
var ErrOverBudget = errors.New("memory budget exceeded")

// MemoryLimit chooses the budget of each memory of a machine: how many
// bytes its allocations may hold together. Allocations are admitted
// against the budget before they are made, because Go cannot recover from
// a failed allocation (a buffer larger than the machine's memory would
// crash the process with "fatal error: runtime: out of memory").
//
// The zero value is the default: DefaultHostShare of host memory and
// DefaultDeviceShare of each device memory whose size is known.
type MemoryLimit struct {
	// Bytes, when not 0, is every memory's budget, capped by the memory's
	// size where that is known.
	Bytes uint64
	// Share, when not 0 (and Bytes is 0), is every memory's budget as a
	// fraction of its size: 0 < Share <= 1.
	Share float64
	// Off turns budgets off: nothing is refused, and an allocation larger
	// than what the machine has crashes the process. Only for memory that
	// is overcommitted on purpose.
	Off bool
}

// Validate checks that at most one way of choosing the budget is set and
// that Share is a fraction.
func (l MemoryLimit) Validate() error {
	var errs []error
	if l.Share < 0 || l.Share > 1 || math.IsNaN(l.Share) {
		errs = append(errs, fmt.Errorf("memory share %v must be a fraction in (0, 1]", l.Share))
	}
	if l.Bytes != 0 && l.Share != 0 {
		errs = append(errs, fmt.Errorf("memory limit: give a size (%d bytes) or a share (%v), not both", l.Bytes, l.Share))
	}
	if l.Off && (l.Bytes != 0 || l.Share != 0) {
		errs = append(errs, errors.New("memory limit: off excludes a size or a share"))
	}
	return errors.Join(errs...)
}

// LogValue logs a limit as its string ("auto", "50%"), with JSON logs too.
func (l MemoryLimit) LogValue() slog.Value { return slog.StringValue(l.String()) }

// String is the limit as acpp-node's --max-bytes takes it: "auto", "off",
// a share ("50%") or a size in bytes.
func (l MemoryLimit) String() string {
	switch {
	case l.Off:
		return "off"
	case l.Bytes != 0:
		return FormatBytes(l.Bytes)
	case l.Share != 0:
		return fmt.Sprintf("%g%%", l.Share*100)
	}
	return "auto"
}

// ParseMemoryLimit parses a limit as acpp-node --max-bytes and acpp-submit
// --max-bytes take it: "auto" or "" (the defaults), a share of each
// memory ("50%"), a size ("64GiB", see ParseBytes), or "0" (off).
func ParseMemoryLimit(s string) (MemoryLimit, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "auto" || s == "":
		return MemoryLimit{}, nil
	case strings.HasSuffix(s, "%"):
		p, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64)
		if err != nil || !(p > 0 && p <= 100) {
			return MemoryLimit{}, fmt.Errorf("share %q: want a percentage in (0, 100], like 50%%", s)
		}
		return MemoryLimit{Share: p / 100}, nil
	}
	n, err := ParseBytes(s)
	if err != nil {
		return MemoryLimit{}, fmt.Errorf("%w, a share like 50%%, auto, or 0 for no budget", err)
	}
	return MemoryLimit{Bytes: n, Off: n == 0}, nil
}

// ParseBytes parses a size: a number of bytes with an optional unit (KiB,
// MiB, GiB, TiB, or KB, MB, GB, TB).
func ParseBytes(s string) (uint64, error) {
	in := s // as given, for the errors (s loses its unit)
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want bytes with an optional unit (KiB, MiB, GiB, TiB, KB, MB, GB, TB), like 512MiB or 64GiB", in)
	}
	if n != 0 && n*mult/mult != n {
		return 0, fmt.Errorf("size %q overflows: at most 2^64-1 bytes", in)
	}
	return n * mult, nil
}

// Budget is the budget of one memory of size bytes (0: unknown) under l,
// with how it was chosen, for logs and errors ("75% of 125.70 GiB host
// memory"). The budget is 0 when there is none: l is off, or it is a share
// and the size is unknown.
func (l MemoryLimit) Budget(size uint64, host bool) (budget uint64, how string) {
	kind := "device memory"
	if host {
		kind = "host memory"
	}
	share := l.Share
	switch {
	case l.Off:
		return 0, "no budget (memory limit off)"
	case l.Bytes != 0:
		if size != 0 && size < l.Bytes {
			return size, fmt.Sprintf("all of %s %s (the limit %s is larger)", FormatBytes(size), kind, FormatBytes(l.Bytes))
		}
		return l.Bytes, "the configured limit"
	case share == 0 && host:
		share = DefaultHostShare
	case share == 0:
		share = DefaultDeviceShare
	}
	if size == 0 {
		return 0, fmt.Sprintf("no budget (the size of the %s is unknown; set a limit in bytes)", kind)
	}
	// A share so small it rounds to no byte admits nothing (1 byte), not
	// everything: 0 means "no budget" to the caller.
	return max(uint64(float64(size)*share), 1), fmt.Sprintf("%g%% of %s %s", share*100, FormatBytes(size), kind)
}

// Budget admits allocations of one memory against its limit. It is safe
// for concurrent use. A nil *Budget, or one with limit 0, admits
// everything (and still counts what is in use).
type Budget struct {
	limit uint64
	how   string
	used  atomic.Uint64
}

// NewBudget returns a budget of limit bytes (0: none); how says how the
// limit was chosen (MemoryLimit.Budget's second result).
func NewBudget(limit uint64, how string) *Budget { return &Budget{limit: limit, how: how} }

// Limit is the budget in bytes (0: none).
func (b *Budget) Limit() uint64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// How says how the limit was chosen.
func (b *Budget) How() string {
	if b == nil {
		return "no budget"
	}
	return b.how
}

// Used is the bytes admitted and not yet released.
func (b *Budget) Used() uint64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Reserve admits n bytes if they fit what is left of the limit. It
// returns nil, or a *BudgetError with what, n, the memory's name (mem:
// "host memory", "cuda:0 memory"), the use and the limit filled in; the
// caller adds a Hint (what to do) before returning it further.
func (b *Budget) Reserve(n uint64, what, mem string) error {
	if b == nil {
		return nil
	}
	for {
		cur := b.used.Load()
		if b.limit != 0 && (n > b.limit || cur > b.limit-n) {
			return &BudgetError{What: what, Bytes: n, Memory: mem, Used: cur, Limit: b.limit, How: b.how}
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			return nil
		}
	}
}

// Release returns n bytes that Reserve admitted.
func (b *Budget) Release(n uint64) {
	if b == nil || n == 0 {
		return
	}
	b.used.Add(-n)
}

// BudgetError is an allocation refused by a Budget. It matches
// ErrOverBudget.
type BudgetError struct {
	// What was to be allocated ("buffer 3", "receive staging").
	What  string
	Bytes uint64
	// Memory names the memory ("host memory", "cuda:0 memory").
	Memory string
	// Used and Limit are the memory's use and budget when it was refused;
	// How says how the budget was chosen.
	Used, Limit uint64
	How         string
	// Hint says what to do; the runtime that refused fills it in.
	Hint string
}

func (e *BudgetError) Error() string {
	s := fmt.Sprintf("%s needs %d bytes (%s), more than is left of the %s budget (%s of %s in use; budget: %s)",
		e.What, e.Bytes, FormatBytes(e.Bytes), e.Memory, FormatBytes(e.Used), FormatBytes(e.Limit), e.How)
	if e.Hint != "" {
		s += "; " + e.Hint
	}
	return s
}

// Is makes every BudgetError match ErrOverBudget.
func (e *BudgetError) Is(target error) bool { return target == ErrOverBudget }

// FormatBytes writes a size for people: "1024.00 GiB", "3.0 MiB", "12 B".
func FormatBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
