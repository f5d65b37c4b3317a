package node_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	ptxlib "github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// saxpySpec is the built-in saxpy's PTX and declaration shipped as a job
// kernel under name (the node's registry does not have that name).
func saxpySpec(name string) proto.KernelSpec {
	b, _ := ptxlib.Lookup("saxpy")
	k := b.Kernel()
	s := proto.KernelSpec{Name: name, PTX: k.PTX.Module, Entry: k.PTX.Entry}
	for _, p := range k.Params {
		s.Params = append(s.Params, proto.KernelParam{Name: p.Name, Kind: uint8(p.Kind), Space: uint8(p.Space), ElemSize: uint32(p.ElemSize)})
	}
	return s
}

// ptxDevice is a fake device that runs PTX kernels, for machines without
// a GPU: it records each PTX launch (the kernel, its module and entry) and
// emulates the entry "saxpy" in Go on the fake's memory, so the
// arguments' path through the node is checked too.
type ptxDevice struct {
	*devicetest.Fake
	mu       sync.Mutex
	launched []device.Kernel // guarded by mu
}

func newPTXDevice() *ptxDevice {
	return &ptxDevice{Fake: devicetest.NewFake(devicetest.FakeConfig{Forms: []device.Form{device.FormGo, device.FormPTX}})}
}

func (d *ptxDevice) Info() device.Info {
	info := d.Fake.Info()
	info.Caps.KernelForms = []device.Form{device.FormPTX}
	return info
}

func (d *ptxDevice) Enqueue(q int, op device.Op, done func(error)) error {
	l, ok := op.(device.LaunchOp)
	if !ok {
		return d.Fake.Enqueue(q, op, done)
	}
	if l.Kernel == nil || l.Kernel.PTX == nil {
		return device.ErrNoImplementation
	}
	d.mu.Lock()
	d.launched = append(d.launched, *l.Kernel)
	d.mu.Unlock()
	if l.Kernel.PTX.Entry != "saxpy" {
		return device.ErrNoImplementation
	}
	return d.Fake.Enqueue(q, device.LaunchOp{Name: l.Name, Range: l.Range, Args: l.Args, Func: func(w *device.Work) {
		a := math.Float32frombits(binary.LittleEndian.Uint32(w.Args[0].Scalar))
		x, y := w.Data[1], w.Data[2]
		for i := w.Lo[2]; i < w.Hi[2]; i++ {
			xv := math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:]))
			yv := math.Float32frombits(binary.LittleEndian.Uint32(y[4*i:]))
			binary.LittleEndian.PutUint32(y[4*i:], math.Float32bits(a*xv+yv))
		}
	}}, done)
}

func (d *ptxDevice) launches() []device.Kernel {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]device.Kernel(nil), d.launched...)
}

// saxpyJob allocates x (all 1) and y (all 2) of n float32 in mem and
// returns the launch of kernel name on dev over them with a = 3.
func saxpyJob(t *testing.T, j *nodeclient.Job, mem uint32, kernel, dev string, n uint64) proto.Instr {
	rng := [3]uint64{1, 1, n}
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Mem: mem, Range: rng, ElemSize: 4},
		proto.Instr{ID: 2, Kind: proto.InstrAlloc, Buffer: 2, Mem: mem, Range: rng, ElemSize: 4},
		proto.Instr{ID: 3, Kind: proto.InstrFill, Deps: []uint64{1}, Buffer: 1, Mem: mem, Pattern: f32(1)},
		proto.Instr{ID: 4, Kind: proto.InstrFill, Deps: []uint64{2}, Buffer: 2, Mem: mem, Pattern: f32(2)},
	)
	return proto.Instr{ID: 5, Kind: proto.InstrLaunch, Deps: []uint64{3, 4}, Launch: &proto.Launch{
		Kernel: kernel, Device: dev, Global: rng,
		Args: []proto.KArg{
			{Kind: uint8(device.ArgScalar), Scalar: f32(3)},
			{Kind: uint8(device.ArgPointer), Buffer: 1, Mem: mem, ElemSize: 4},
			{Kind: uint8(device.ArgPointer), Buffer: 2, Mem: mem, ElemSize: 4},
		},
	}}
}

func f32(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }

// launchErr submits launch and returns its failure message ("" if it ran).
func launchErr(t *testing.T, j *nodeclient.Job, launch proto.Instr) string {
	t.Helper()
	submit(t, j, launch)
	err := j.Wait(testCtx(t), launch.ID)
	if err == nil {
		return ""
	}
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || len(fe.Failed) != 1 {
		t.Fatalf("Wait = %v, want one failed instruction", err)
	}
	return fe.Failed[0].Message
}

// TestJobKernelsAreThisJobsOnly_C6: a kernel shipped by a job runs in that
// job on a device that runs PTX, with the job's module; another job of the
// same client, or of another client, cannot launch it; it is gone when the
// job closes (a job reopened under the same ID does not have it); on a CPU
// device it fails at once with an error naming the kernel and the device.
func TestJobKernelsAreThisJobsOnly_C6(t *testing.T) {
	dev := newPTXDevice()
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.ExtraDevices = []device.Device{dev} })
	alice := startClient(t, credDir, "alice", nodes...)
	bob := startClient(t, credDir, "bob", nodes...)
	mem, ok := memOf(t, alice, "n0", "fake:0")
	if !ok {
		t.Fatal("n0 has no fake:0")
	}
	const n = 1000
	spec := saxpySpec("job.saxpy")

	j1 := openJob(t, alice, "n0", 1)
	got, err := j1.RegisterKernels(testCtx(t), spec)
	if err != nil || got.Kernels != 1 || got.Bytes != uint64(len(spec.PTX)) {
		t.Fatalf("RegisterKernels = %+v, %v; want 1 kernel of %d bytes", got, err, len(spec.PTX))
	}
	if _, err := j1.RegisterKernels(testCtx(t), spec); err != nil {
		t.Fatalf("registering the same kernel again = %v, want nil (a retry)", err)
	}
	launch := saxpyJob(t, j1, mem, "job.saxpy", "fake:0", n)
	if msg := launchErr(t, j1, launch); msg != "" {
		t.Fatalf("launch of the job's kernel failed: %s", msg)
	}
	out := make([]byte, 4*n)
	if err := j1.ReadBack(testCtx(t), 6, []uint64{5}, 2, mem, [3]uint64{1, 1, n}, 4, []proto.Box{{Hi: [3]uint64{1, 1, n}}}, out); err != nil {
		t.Fatal(err)
	}
	if want := bytes.Repeat(f32(5), n); !bytes.Equal(out, want) {
		t.Fatalf("y after 3*x+y = %v…, want 5 everywhere", out[:8])
	}
	if ls := dev.launches(); len(ls) != 1 || ls[0].Name != "job.saxpy" || !bytes.Equal(ls[0].PTX.Module, spec.PTX) || ls[0].PTX.Entry != "saxpy" {
		t.Fatalf("device saw launches %v, want job.saxpy with the shipped module", ls)
	}

	// A PTX kernel on the CPU: refused before it is queued, naming both.
	cpuLaunch := launch
	cpuLaunch.ID, cpuLaunch.Deps = 7, nil
	l := *launch.Launch
	l.Device = "cpu:0"
	cpuLaunch.Launch = &l
	msg := launchErr(t, j1, cpuLaunch)
	for _, w := range []string{`"job.saxpy"`, "cpu:0", "ptx only", "n0"} {
		if !strings.Contains(msg, w) {
			t.Errorf("CPU launch failure %q lacks %q", msg, w)
		}
	}

	// Other jobs do not see it: another job of alice's, a job of bob's.
	j2 := openJob(t, alice, "n0", 2)
	if msg := launchErr(t, j2, saxpyJob(t, j2, mem, "job.saxpy", "fake:0", n)); !strings.Contains(msg, "no kernel registered") || !strings.Contains(msg, "job.saxpy") {
		t.Errorf("alice's job 2 launching job 1's kernel: %q, want an unknown-kernel error", msg)
	}
	jb := openJob(t, bob, "n0", 3)
	if msg := launchErr(t, jb, saxpyJob(t, jb, mem, "job.saxpy", "fake:0", n)); !strings.Contains(msg, "no kernel registered") {
		t.Errorf("bob's job launching alice's kernel: %q, want an unknown-kernel error", msg)
	}

	// Freed with the job: reopened under the same ID, it has no kernels.
	if err := j1.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	j1 = openJob(t, alice, "n0", 1)
	if msg := launchErr(t, j1, saxpyJob(t, j1, mem, "job.saxpy", "fake:0", n)); !strings.Contains(msg, "no kernel registered") {
		t.Errorf("job 1 reopened, launching the closed job's kernel: %q, want an unknown-kernel error", msg)
	}
	if ls := dev.launches(); len(ls) != 1 {
		t.Errorf("device saw %d launches, want only the first job's one", len(ls))
	}
}

// TestJobKernelsRefused_C6: bad kernels are refused with an error that
// says what is wrong: a name of the node's own registry, a module that
// does not parse, an entry the module lacks, parameters that do not match
// the entry, another kernel under a name the job has; bad names and sizes
// are refused before they are sent.
func TestJobKernelsRefused_C6(t *testing.T) {
	registerInc()
	nodes := startNodes(t, 1, nil)
	c := startClient(t, credDir, "alice", nodes...)
	j := openJob(t, c, "n0", 1)
	good := saxpySpec("job.saxpy")
	tests := []struct {
		name string
		mod  func(s *proto.KernelSpec)
		code proto.ErrorCode
		want string
	}{
		{"name of the node's registry", func(s *proto.KernelSpec) { s.Name = "nodetest.inc_u32" }, proto.CodeKernelExists, `kernel "nodetest.inc_u32" is in node n0's own registry`},
		{"module without entries", func(s *proto.KernelSpec) { s.PTX = []byte("this is not PTX") }, proto.CodeMalformed, "has no .entry; ship PTX text"},
		{"module does not parse", func(s *proto.KernelSpec) { s.PTX = []byte(".visible .entry (") }, proto.CodeMalformed, "does not parse"},
		{"no such entry", func(s *proto.KernelSpec) { s.Entry = "saxpy2" }, proto.CodeMalformed, `entry "saxpy2" is not in its PTX module (entries: saxpy)`},
		{"parameters differ", func(s *proto.KernelSpec) { s.Params = s.Params[:2] }, proto.CodeMalformed, "do not match entry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good
			s.Params = append([]proto.KernelParam(nil), good.Params...)
			tt.mod(&s)
			_, err := j.RegisterKernels(testCtx(t), s)
			var re *transport.RemoteError
			if !errors.As(err, &re) || re.Code != tt.code || !strings.Contains(re.Message, tt.want) {
				t.Fatalf("RegisterKernels = %v, want code %v mentioning %q", err, tt.code, tt.want)
			}
		})
	}
	// Refused before sending: bounds and names.
	for _, s := range []proto.KernelSpec{
		func() proto.KernelSpec { s := good; s.Name = "a/b"; return s }(),
		func() proto.KernelSpec { s := good; s.PTX = make([]byte, proto.MaxKernelModule+1); return s }(),
	} {
		if _, err := j.RegisterKernels(testCtx(t), s); !errors.Is(err, proto.ErrMalformed) {
			t.Errorf("RegisterKernels(%.20q, %d bytes) = %v, want ErrMalformed", s.Name, len(s.PTX), err)
		}
	}
	// A request is all or nothing: the good kernel of a refused request
	// was not registered, so it may be registered later with another
	// declaration.
	bad := good
	bad.Name, bad.Entry = "job.other", "nosuch"
	if _, err := j.RegisterKernels(testCtx(t), good, bad); err == nil {
		t.Fatal("a request with one bad kernel was accepted")
	}
	other := good
	other.Params = append([]proto.KernelParam(nil), good.Params...)
	other.Params[0].Name = "alpha"
	if _, err := j.RegisterKernels(testCtx(t), other); err != nil {
		t.Fatalf("register after a refused request: %v", err)
	}
	// Now the name is taken by that declaration: another one is refused.
	_, err := j.RegisterKernels(testCtx(t), good)
	var re *transport.RemoteError
	if !errors.As(err, &re) || re.Code != proto.CodeKernelExists || !strings.Contains(re.Message, "already has a different kernel") {
		t.Fatalf("a second declaration under the job's name = %v, want CodeKernelExists", err)
	}
}

// padded is spec's module followed by comments up to about size bytes.
func padded(spec proto.KernelSpec, size int) proto.KernelSpec {
	line := []byte("// padding padding padding padding padding padding padding padding\n")
	spec.PTX = append(append([]byte(nil), spec.PTX...), bytes.Repeat(line, size/len(line))...)
	return spec
}

// TestRegisterKernelsSplitsRequests_C6: kernels whose modules together
// exceed one request's bound travel in several requests, and all arrive.
func TestRegisterKernelsSplitsRequests_C6(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := startClient(t, credDir, "alice", nodes...)
	j := openJob(t, c, "n0", 1)
	var ks []proto.KernelSpec
	for i := range 3 {
		ks = append(ks, padded(saxpySpec(fmt.Sprintf("split.k%d", i)), 5<<20))
	}
	got, err := j.RegisterKernels(testCtx(t), ks...)
	if err != nil || got.Kernels != 3 || got.Bytes != uint64(3*len(ks[0].PTX)) {
		t.Fatalf("RegisterKernels of 3 × %d bytes = %+v, %v; want all 3 registered", len(ks[0].PTX), got, err)
	}
}

// BenchmarkJobKernels measures MsgJobKernels from client to node on
// loopback: the request, the node's checks (parsing the module's entries,
// the layout) and the reply, for saxpy's module and for one padded with
// comments to 8 MiB (the same kernel again is a retry: nothing is added).
//
//	go test -run '^$' -bench JobKernels -count 5 ./node
func BenchmarkJobKernels(b *testing.B) {
	nodes := startNodes(b, 1, nil)
	c := startClient(b, credDir, "alice", nodes...)
	j := openJob(b, c, "n0", 1)
	small := saxpySpec("bench.saxpy")
	big := padded(saxpySpec("bench.saxpy8m"), 8<<20)
	for _, s := range []proto.KernelSpec{small, big} {
		b.Run(fmt.Sprintf("module=%dKiB", len(s.PTX)>>10), func(b *testing.B) {
			b.SetBytes(int64(len(s.PTX)))
			for b.Loop() {
				if _, err := j.RegisterKernels(testCtx(b), s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// unloadDevice is a ptxDevice that implements device.ModuleUnloader: it
// records each UnloadModule call with the number of its launches still in
// flight at that moment, and can hold launches until a gate opens (a long
// kernel), so that tests see when the node unloads a job's module.
type unloadDevice struct {
	*ptxDevice
	umu      sync.Mutex
	gate     chan struct{} // guarded by umu; launches finish once it is closed (nil: at once)
	inflight int           // guarded by umu
	unloads  []unloadCall  // guarded by umu
}

type unloadCall struct {
	mod      []byte
	inflight int // launches not finished when it came
}

func newUnloadDevice(index int) *unloadDevice {
	return &unloadDevice{ptxDevice: &ptxDevice{Fake: devicetest.NewFake(devicetest.FakeConfig{Index: index, Forms: []device.Form{device.FormGo, device.FormPTX}})}}
}

// hold makes the next launches wait for open.
func (d *unloadDevice) hold() {
	d.umu.Lock()
	d.gate = make(chan struct{})
	d.umu.Unlock()
}

// open lets held launches finish.
func (d *unloadDevice) open() {
	d.umu.Lock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
	d.umu.Unlock()
}

func (d *unloadDevice) Enqueue(q int, op device.Op, done func(error)) error {
	if _, ok := op.(device.LaunchOp); !ok {
		return d.ptxDevice.Enqueue(q, op, done)
	}
	d.umu.Lock()
	gate := d.gate
	d.inflight++
	d.umu.Unlock()
	err := d.ptxDevice.Enqueue(q, op, func(err error) {
		if gate != nil {
			<-gate
		}
		d.umu.Lock()
		d.inflight--
		d.umu.Unlock()
		done(err)
	})
	if err != nil {
		d.umu.Lock()
		d.inflight--
		d.umu.Unlock()
	}
	return err
}

func (d *unloadDevice) UnloadModule(mod []byte) error {
	d.umu.Lock()
	defer d.umu.Unlock()
	d.unloads = append(d.unloads, unloadCall{mod: mod, inflight: d.inflight})
	return nil
}

func (d *unloadDevice) unloaded() []unloadCall {
	d.umu.Lock()
	defer d.umu.Unlock()
	return slices.Clone(d.unloads)
}

func (d *unloadDevice) running() int {
	d.umu.Lock()
	defer d.umu.Unlock()
	return d.inflight
}

// waitUnloads waits until each device has seen want UnloadModule calls,
// then a while longer to see that no more come.
func waitUnloads(t *testing.T, want int, devs ...*unloadDevice) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range devs {
		for len(d.unloaded()) < want {
			if time.Now().After(deadline) {
				t.Fatalf("%s saw %d UnloadModule calls after 10 s, want %d", d.Info().ID, len(d.unloaded()), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(300 * time.Millisecond) // three of the node's idle polls
	for _, d := range devs {
		if got := len(d.unloaded()); got != want {
			t.Fatalf("%s saw %d UnloadModule calls, want exactly %d", d.Info().ID, got, want)
		}
	}
}

// TestJobModulesUnloadedWithLastJob_C6_B1: a module that jobs shipped (C6)
// leaves the node's devices with the last job that holds it, so a node
// returns to its baseline after its jobs (B1). Two jobs ship the same
// module: closing the first unloads nothing and the second still launches
// from it; closing the second unloads it exactly once on every device that
// loads modules (also one that never ran it), with the slice the launches
// used. A job closed while its kernel runs has its module unloaded only
// after the kernel finished.
func TestJobModulesUnloadedWithLastJob_C6_B1(t *testing.T) {
	dev0, dev1 := newUnloadDevice(0), newUnloadDevice(1)
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.ExtraDevices = []device.Device{dev0, dev1} })
	t.Cleanup(dev0.open) // runs before the node stops: a failed test must not leave a launch held
	alice := startClient(t, credDir, "alice", nodes...)
	mem, ok := memOf(t, alice, "n0", "fake:0")
	if !ok {
		t.Fatal("n0 has no fake:0")
	}
	const n = 100
	spec := saxpySpec("job.saxpy")
	j1, j2 := openJob(t, alice, "n0", 1), openJob(t, alice, "n0", 2)
	var again proto.Instr
	for _, j := range []*nodeclient.Job{j1, j2} {
		if _, err := j.RegisterKernels(testCtx(t), spec); err != nil {
			t.Fatal(err)
		}
		again = saxpyJob(t, j, mem, "job.saxpy", "fake:0", n)
		if msg := launchErr(t, j, again); msg != "" {
			t.Fatalf("launch in job %d: %s", j.ID(), msg)
		}
	}
	if err := j1.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	again.ID += 10
	again.Deps = nil
	if msg := launchErr(t, j2, again); msg != "" {
		t.Fatalf("job 2's launch after job 1 closed: %s", msg)
	}
	for _, d := range []*unloadDevice{dev0, dev1} {
		if u := d.unloaded(); len(u) != 0 {
			t.Fatalf("%s unloaded %d modules while job 2 still holds its module, want none", d.Info().ID, len(u))
		}
	}
	if err := j2.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	waitUnloads(t, 1, dev0, dev1)
	ls := dev0.launches()
	if len(ls) != 3 {
		t.Fatalf("fake:0 saw %d launches, want 3", len(ls))
	}
	for _, d := range []*unloadDevice{dev0, dev1} {
		u := d.unloaded()[0]
		if unsafe.SliceData(u.mod) != unsafe.SliceData(ls[0].PTX.Module) || len(u.mod) != len(ls[0].PTX.Module) {
			t.Errorf("%s unloaded a module of %d bytes at %p, want the launched slice (%d bytes at %p)", d.Info().ID, len(u.mod), unsafe.SliceData(u.mod), len(ls[0].PTX.Module), unsafe.SliceData(ls[0].PTX.Module))
		}
	}

	// A job closed while its kernel runs: the unload waits for the kernel.
	j3 := openJob(t, alice, "n0", 3)
	if _, err := j3.RegisterKernels(testCtx(t), spec); err != nil {
		t.Fatal(err)
	}
	dev0.hold()
	launch := saxpyJob(t, j3, mem, "job.saxpy", "fake:0", n)
	submit(t, j3, launch)
	deadline := time.Now().Add(10 * time.Second)
	for dev0.running() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("job 3's launch did not reach fake:0 within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := j3.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // three of the node's idle polls
	for _, d := range []*unloadDevice{dev0, dev1} {
		if u := d.unloaded(); len(u) != 1 {
			t.Fatalf("%s saw %d UnloadModule calls while job 3's kernel still runs, want still 1", d.Info().ID, len(u))
		}
	}
	dev0.open()
	waitUnloads(t, 2, dev0, dev1)
	ls = dev0.launches()
	for _, u := range dev0.unloaded() {
		if u.inflight != 0 {
			t.Errorf("fake:0 was asked to unload a module with %d launches in flight, want 0", u.inflight)
		}
	}
	if u := dev0.unloaded()[1]; unsafe.SliceData(u.mod) != unsafe.SliceData(ls[len(ls)-1].PTX.Module) {
		t.Errorf("fake:0's second unload is not job 3's module")
	}
}
