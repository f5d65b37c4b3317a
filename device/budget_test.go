package device

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestMemoryLimitBudget(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		l    MemoryLimit
		size uint64
		host bool
		want uint64
		how  string
	}{
		{MemoryLimit{}, 128 * gib, true, 96 * gib, "75% of 128.00 GiB host memory"},
		{MemoryLimit{}, 80 * gib, false, 72 * gib, "90% of 80.00 GiB device memory"},
		{MemoryLimit{}, 0, false, 0, "unknown"},
		{MemoryLimit{Share: 0.5}, 128 * gib, true, 64 * gib, "50% of"},
		{MemoryLimit{Bytes: 4 * gib}, 128 * gib, true, 4 * gib, "configured"},
		{MemoryLimit{Bytes: 4 * gib}, 0, false, 4 * gib, "configured"},
		{MemoryLimit{Bytes: 512 * gib}, 128 * gib, true, 128 * gib, "all of 128.00 GiB host memory"},
		{MemoryLimit{Off: true}, 128 * gib, true, 0, "off"},
		// A share that rounds to no byte admits nothing, not everything
		// (0 would mean "no budget").
		{MemoryLimit{Share: 1e-15}, 128 * gib, true, 1, "of 128.00 GiB host memory"},
	} {
		got, how := tc.l.Budget(tc.size, tc.host)
		if got != tc.want || !strings.Contains(how, tc.how) {
			t.Errorf("%v.Budget(%d, %v) = %d, %q; want %d, %q", tc.l, tc.size, tc.host, got, how, tc.want, tc.how)
		}
	}
	for _, bad := range []MemoryLimit{{Share: 1.5}, {Share: -1}, {Bytes: 1, Share: 0.5}, {Off: true, Bytes: 1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v.Validate() = nil, want an error", bad)
		}
	}
	if err := (MemoryLimit{Share: 1}).Validate(); err != nil {
		t.Errorf("Share 1: %v", err)
	}
}

// TestBudgetReserve: admission never lets the use pass the limit, also
// under concurrent reservations, and names the request, the use and the
// limit when it refuses.
func TestBudgetReserve(t *testing.T) {
	b := NewBudget(1000, "the configured limit")
	if err := b.Reserve(600, "buffer 1", "host memory"); err != nil {
		t.Fatal(err)
	}
	err := b.Reserve(500, "buffer 2", "host memory")
	var be *BudgetError
	if !errors.As(err, &be) || !errors.Is(err, ErrOverBudget) || be.Used != 600 || be.Limit != 1000 || be.Bytes != 500 {
		t.Fatalf("Reserve over the limit = %v, want a BudgetError with used 600, limit 1000", err)
	}
	for _, want := range []string{"buffer 2 needs 500 bytes", "left of the host memory budget", "600 B of 1000 B in use", "configured limit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := b.Reserve(1<<63, "huge", "host memory"); err == nil {
		t.Error("a reservation that overflows was admitted")
	}
	b.Release(600)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.Reserve(100, "x", "host memory") == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != 10 || b.Used() != 1000 {
		t.Errorf("50 concurrent reservations of 100 against 1000: %d admitted, %d used; want 10, 1000", admitted, b.Used())
	}
	var none *Budget
	if err := none.Reserve(1<<62, "x", "host memory"); err != nil {
		t.Errorf("nil budget refused: %v", err)
	}
	if err := NewBudget(0, "none").Reserve(1<<62, "x", "host memory"); err != nil {
		t.Errorf("budget 0 (none) refused: %v", err)
	}
}

func TestParseMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want MemoryLimit
		err  string
	}{
		{"auto", MemoryLimit{}, ""}, {"", MemoryLimit{}, ""}, {"64GiB", MemoryLimit{Bytes: 64 << 30}, ""},
		{"50%", MemoryLimit{Share: 0.5}, ""}, {" 100 % ", MemoryLimit{Share: 1}, ""}, {"0", MemoryLimit{Off: true}, ""},
		{"150%", MemoryLimit{}, "percentage"}, {"lots", MemoryLimit{}, "a share like 50%"}, {"-1", MemoryLimit{}, "size"},
	} {
		got, err := ParseMemoryLimit(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseMemoryLimit(%q) = %+v, %v; want an error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want || got.Validate() != nil {
			t.Errorf("ParseMemoryLimit(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}
