package embedded

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/acpp/acpp/device"
)

// testBackendKind is a kind no backend has: registering it replaces none.
const testBackendKind = device.Kind(250)

// TestBackendsGetTheQueuesLogger: the backends a queue opens
// (device.RegisterBackend, such as CUDA's) get the queue's logger
// (Config.Logger, acpp.WithLogger), and nil as nil, which they take as
// discard; the CUDA backend used to log to slog.Default() whatever the
// queue's logger was.
func TestBackendsGetTheQueuesLogger(t *testing.T) {
	var mu sync.Mutex
	var got []*slog.Logger
	device.RegisterBackend(device.Backend{Kind: testBackendKind, Open: func(_ context.Context, cfg device.OpenConfig) ([]device.Device, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, cfg.Logger)
		return nil, nil
	}})
	// The registry keeps backends for the process: leave one that records
	// nothing.
	t.Cleanup(func() {
		device.RegisterBackend(device.Backend{Kind: testBackendKind, Open: func(context.Context, device.OpenConfig) ([]device.Device, error) { return nil, nil }})
	})
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	for _, l := range []*slog.Logger{log, nil} {
		e, err := Open[struct{}](ctx, Config{Logger: l})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []*slog.Logger{log, nil}) {
		t.Errorf("the backend was opened with loggers %v, want the queue's (%p), then nil", got, log)
	}
}
