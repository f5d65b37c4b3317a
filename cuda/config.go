package cuda

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/acpp/acpp/cuda/nvrtc"
)

// Completion is how a device learns that its GPU work finished.
type Completion uint8

// Completion strategies. The zero value is CompletionPoll.
const (
	// CompletionPoll: the completer queries one CUDA event per stream and
	// batch; between rounds it sleeps an eighth of how long the newest
	// pending batch has waited, within [PollMin, PollMax] (nanosleep with
	// 1 µs timer slack). It never spins.
	CompletionPoll Completion = iota
	// CompletionBlockingSync: the completer waits in cuEventSynchronize on
	// blocking-sync events (the driver puts the thread to sleep), oldest
	// batch first.
	CompletionBlockingSync
	// CompletionCallback: a driver host function (cuLaunchHostFunc) after
	// each batch calls back into Go on a driver thread, which wakes the
	// completer.
	CompletionCallback
	// CompletionSpin trades host CPU for latency: the completer queries
	// pending events back to back without sleeping, and both it and the
	// device's owner goroutine look for new work for SpinIdle before they
	// block (so a launch that follows the last one's done closely needs no
	// goroutine wake-up). Each spinning goroutine keeps a core busy while
	// the device is in use.
	CompletionSpin
)

func (c Completion) String() string {
	switch c {
	case CompletionPoll:
		return "poll"
	case CompletionBlockingSync:
		return "blocking-sync"
	case CompletionCallback:
		return "callback"
	case CompletionSpin:
		return "spin"
	}
	return fmt.Sprintf("completion(%d)", uint8(c))
}

// Link overrides the linked-allocation decision (L3).
type Link uint8

// Link modes. The zero value is LinkAuto.
const (
	// LinkAuto links a GPU's buffer allocations to host memory iff the GPU
	// reports host-unified memory (integrated, or pageable memory access
	// through the host's page tables).
	LinkAuto Link = iota
	// LinkAlways links every GPU (mapped pinned host memory for
	// MemDevice): for tests of the linked path on discrete GPUs.
	LinkAlways
	// LinkNever gives every GPU separate device allocations.
	LinkNever
)

// Config configures Open. The zero value is ready to use.
type Config struct {
	// Logger receives the backend's log lines; nil discards them.
	Logger *slog.Logger
	// Library is the driver library to load; "" means libcuda.so.1.
	Library string
	// Streams is the number of streams per device, at most 64; 0 means 4.
	Streams int
	// Completion picks the completion strategy; the zero value is
	// CompletionPoll, or the strategy the environment variable
	// ACPP_CUDA_COMPLETION names (poll, blocking-sync, callback, spin):
	// the way to choose one for devices that acpp.NewQueue opens.
	Completion Completion
	// PollMin and PollMax bound the sleep between polling rounds; 0 means
	// 2 µs and 200 µs (a PollMin left 0 is lowered to a PollMax below
	// 2 µs). A PollMin above PollMax, or above the default PollMax when
	// PollMax is 0, is a configuration error. Only CompletionPoll uses
	// them: with another Completion set here they are an error, and with
	// Completion left zero and another strategy chosen by
	// ACPP_CUDA_COMPLETION they are unused.
	PollMin, PollMax time.Duration
	// SpinIdle is how long, under CompletionSpin, the owner goroutine and
	// the completer look for new work before they block; 0 means 50 µs.
	// With Completion set here to a strategy other than CompletionSpin it
	// is an error; with Completion left zero it applies when
	// ACPP_CUDA_COMPLETION=spin.
	SpinIdle time.Duration
	// ManagedReserve is device memory that MemShared allocations leave
	// free; 0 means 256 MiB.
	ManagedReserve uint64
	// Link overrides the linked-allocation decision; zero is LinkAuto.
	Link Link
	// NoPeer stages device-to-device copies between GPUs through pinned
	// host memory even where peer access works (for tests).
	NoPeer bool
	// PinMinBytes: another backend's host allocation (the CPU device's
	// memory, a user's slice) of at least this many bytes is page-locked
	// (cuMemHostRegister) on its first copy and stays so while it is in
	// use, so its copies run at pinned speed; 0 means 1 MiB, a negative
	// value never pins.
	PinMinBytes int
	// Devices limits which GPUs are opened (by ordinal); nil means all.
	Devices []int
	// NVRTC compiles kernels given as CUDA C (device.Kernel.CUDA); nil
	// means nvrtc.Default (libnvrtc from the usual places, PTX cached
	// under os.UserCacheDir()/acpp/nvrtc).
	NVRTC *nvrtc.Compiler
	// NoGraphs turns graph replay off: every launch is a cuLaunchKernel.
	// With it on (the default), a run of launches on one stream whose
	// sequence repeats (Jacobi's ping-pong) is captured once into a CUDA
	// graph and replayed (graph.go; docs/CUDA.md says when it applies).
	// The environment variable ACPP_CUDA_GRAPHS=0 turns it off too.
	NoGraphs bool

	// virtualDevices adds logical devices on the first GPU (ordinals 1000,
	// 1001, ...): tests use them for device-to-device copies on one GPU.
	virtualDevices int
}

// Default bounds of the sleep between polling rounds (Config.PollMin,
// Config.PollMax).
const (
	defaultPollMin = 2 * time.Microsecond
	defaultPollMax = 200 * time.Microsecond
)

// ErrConfig marks invalid configuration.
var ErrConfig = errors.New("cuda: invalid config")

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.Streams < 0 || c.Streams > 64 {
		errs = append(errs, fmt.Errorf("%w: Streams (%d) must be in [0, 64]", ErrConfig, c.Streams))
	}
	if c.Completion > CompletionSpin {
		errs = append(errs, fmt.Errorf("%w: Completion (%d) unknown; use CompletionPoll, CompletionBlockingSync, CompletionCallback or CompletionSpin", ErrConfig, c.Completion))
	}
	if v := os.Getenv(GraphsEnv); v != "" && v != "0" && v != "1" {
		errs = append(errs, fmt.Errorf("%w: %s=%q unknown; use 0 (no graph replay) or 1 (the default)", ErrConfig, GraphsEnv, v))
	}
	if v := os.Getenv(CompletionEnv); v != "" {
		if _, ok := parseCompletion(v); !ok {
			errs = append(errs, fmt.Errorf("%w: %s=%q unknown; use poll, blocking-sync, callback or spin", ErrConfig, CompletionEnv, v))
		}
	}
	// A bound of a strategy the Config itself rules out would be ignored.
	// (With Completion left zero the environment may still choose the
	// strategy, so both kinds of bound are accepted then.)
	if (c.PollMin != 0 || c.PollMax != 0) && c.Completion != CompletionPoll && c.Completion <= CompletionSpin {
		errs = append(errs, fmt.Errorf("%w: PollMin and PollMax apply to CompletionPoll only, and Completion is %v; leave them 0 or use CompletionPoll", ErrConfig, c.Completion))
	}
	if c.SpinIdle != 0 && c.Completion != CompletionSpin && c.Completion != CompletionPoll {
		errs = append(errs, fmt.Errorf("%w: SpinIdle applies to CompletionSpin only, and Completion is %v; leave it 0 or use CompletionSpin", ErrConfig, c.Completion))
	}
	if c.SpinIdle < 0 {
		errs = append(errs, fmt.Errorf("%w: SpinIdle (%v) must be >= 0", ErrConfig, c.SpinIdle))
	}
	switch {
	case c.PollMin < 0 || c.PollMax < 0:
		errs = append(errs, fmt.Errorf("%w: PollMin (%v) and PollMax (%v) must be >= 0", ErrConfig, c.PollMin, c.PollMax))
	case c.PollMax != 0 && c.PollMin > c.PollMax:
		errs = append(errs, fmt.Errorf("%w: PollMin (%v) must be <= PollMax (%v)", ErrConfig, c.PollMin, c.PollMax))
	case c.PollMax == 0 && c.PollMin > defaultPollMax:
		// withDefaults would otherwise lower it to the default PollMax
		// without a word.
		errs = append(errs, fmt.Errorf("%w: PollMin (%v) must be <= PollMax, which is %v when left 0; set PollMax too", ErrConfig, c.PollMin, defaultPollMax))
	}
	if c.Link > LinkNever {
		errs = append(errs, fmt.Errorf("%w: Link (%d) unknown; use LinkAuto, LinkAlways or LinkNever", ErrConfig, c.Link))
	}
	for _, o := range c.Devices {
		if o < 0 {
			errs = append(errs, fmt.Errorf("%w: Devices lists ordinal %d; ordinals are >= 0", ErrConfig, o))
		}
	}
	return errors.Join(errs...)
}

// GraphsEnv is the environment variable that turns graph replay off when
// it is "0" (Config.NoGraphs); "1" or unset leaves it on, anything else is
// a configuration error.
const GraphsEnv = "ACPP_CUDA_GRAPHS"

// CompletionEnv is the environment variable that picks the completion
// strategy when Config.Completion is the zero value: "poll",
// "blocking-sync", "callback" or "spin" (Completion.String).
const CompletionEnv = "ACPP_CUDA_COMPLETION"

// parseCompletion is the strategy whose String is s.
func parseCompletion(s string) (Completion, bool) {
	for c := CompletionPoll; c <= CompletionSpin; c++ {
		if c.String() == s {
			return c, true
		}
	}
	return 0, false
}

func (c Config) withDefaults() Config {
	if os.Getenv(GraphsEnv) == "0" {
		c.NoGraphs = true
	}
	if c.Completion == CompletionPoll {
		if m, ok := parseCompletion(os.Getenv(CompletionEnv)); ok {
			c.Completion = m
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Streams == 0 {
		c.Streams = 4
	}
	if c.PollMin == 0 {
		c.PollMin = defaultPollMin
	}
	if c.PollMax == 0 {
		c.PollMax = defaultPollMax
	}
	if c.SpinIdle == 0 {
		c.SpinIdle = 50 * time.Microsecond
	}
	if c.PollMin > c.PollMax {
		c.PollMin = c.PollMax
	}
	if c.PinMinBytes == 0 {
		c.PinMinBytes = 1 << 20
	}
	if c.ManagedReserve == 0 {
		c.ManagedReserve = 256 << 20
	}
	return c
}
