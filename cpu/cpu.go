package cpu

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/acpp/acpp/device"
)

// chunksPerWorker is how many chunks a flat launch gets per worker, so that
// a slow chunk does not leave the other workers idle at the end.
const chunksPerWorker = 4

// minFillChunk is the least bytes a chunk of a fill covers.
const minFillChunk = 1 << 20

// minChunkItems keeps tiny launches in one chunk.
const minChunkItems = 2048

// LocalMemBytes is the local memory (A3) one work-group of a CPU device may
// have, all its local accessors together (Capabilities.LocalMemBytes). A
// device runs at most Workers work-groups at once, each worker with its
// own local memory, so local memory never takes more than Workers ×
// LocalMemBytes: a launch cannot exhaust host memory, which Go could not
// recover from. Submit (acpp.LocalAccessor, named kernels' arguments) and
// the device itself refuse more.
const LocalMemBytes = 1 << 20

// Device is one CPU device.
type Device struct {
	info    device.Info
	workers int
	pool    *pool
	once    sync.Once
}

// Open returns cfg.Devices CPU devices (default 1), each with cfg.Workers
// workers (default GOMAXPROCS). Several CPU devices are several views of the
// same hardware: they share host memory (B4).
func Open(ctx context.Context, cfg device.OpenConfig) ([]device.Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := cfg.Devices
	if n == 0 {
		n = 1
	}
	if n < 0 || cfg.Workers < 0 {
		return nil, fmt.Errorf("cpu: Devices (%d) and Workers (%d) must be >= 0", cfg.Devices, cfg.Workers)
	}
	out := make([]device.Device, n)
	for i := range out {
		out[i] = New(i, cfg.Workers)
	}
	return out, nil
}

// New starts CPU device index with the given number of workers (0, or
// less, means GOMAXPROCS; Open refuses a negative count).
func New(index, workers int) *Device {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &Device{
		info: device.Info{
			ID:   device.ID{Kind: device.KindCPU, Index: index},
			Name: fmt.Sprintf("Go CPU (%d workers)", workers),
			Caps: device.Capabilities{
				HostUnified:   true,
				Queues:        workers,
				LocalMemBytes: LocalMemBytes,
				USMKinds:      []device.MemKind{device.MemDevice, device.MemHost, device.MemShared},
				KernelForms:   []device.Form{device.FormGo},
				ZeroedAlloc:   true,
			},
		},
		workers: workers,
		pool:    newPool(workers),
	}
}

// Info implements device.Device.
func (d *Device) Info() device.Info { return d.info }

// Alloc implements device.Device: zeroed Go memory, 8-byte aligned, that
// holds no pointers (so the collector never scans it) and never moves.
func (d *Device) Alloc(kind device.MemKind, bytes int) (*device.Mem, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("%w: alloc of %d bytes", device.ErrBadOp, bytes)
	}
	if !d.info.Caps.Supports(kind) {
		return nil, fmt.Errorf("%w: %s memory", device.ErrUnsupported, kind)
	}
	b := AllocHost(bytes)
	m := &device.Mem{Device: d.info.ID, Kind: kind, Bytes: bytes, Host: b}
	if bytes > 0 {
		m.Addr = uint64(uintptr(unsafe.Pointer(&b[0])))
	}
	return m, nil
}

// AllocHost returns n zeroed bytes of 8-byte aligned Go memory.
func AllocHost(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// Free implements device.Device. Go memory is returned to the collector when
// the last reference goes.
func (d *Device) Free(m *device.Mem) error {
	if m == nil {
		return fmt.Errorf("%w: free of nil memory", device.ErrBadOp)
	}
	return nil
}

// Close implements device.Device: it waits for queued ops and stops the
// workers.
func (d *Device) Close() error {
	d.once.Do(d.pool.close)
	return nil
}

// Enqueue implements device.Device.
func (d *Device) Enqueue(_ int, op device.Op, done func(error)) error {
	j := getJob()
	var err error
	switch op := op.(type) {
	case device.CopyOp:
		if err = op.Validate(); err != nil {
			break
		}
		if op.Src.Mem.Host == nil || op.Dst.Mem.Host == nil {
			err = fmt.Errorf("%w: the CPU copies only between host-visible memory (%s → %s); let the other device run the copy", device.ErrUnsupported, op.Src.Mem.Device, op.Dst.Mem.Device)
			break
		}
		j.kind, j.n, j.name, j.copy = jobCopy, 1, "copy", op
	case device.FillOp:
		if err = op.Validate(); err != nil {
			break
		}
		if op.Dst.Host == nil {
			err = fmt.Errorf("%w: fill of memory the CPU cannot reach (%s)", device.ErrUnsupported, op.Dst.Device)
			break
		}
		// Big fills run in chunks on every worker: one core does not
		// reach the memory's bandwidth (nor its page faults' rate).
		j.kind, j.n, j.name, j.fill = jobFill, int64(max(1, min(d.workers, op.Bytes/minFillChunk))), "fill", op
	case device.LaunchOp:
		err = d.launchJob(j, &op)
	default:
		err = fmt.Errorf("%w: op %T", device.ErrUnsupported, op)
	}
	if err != nil {
		putJob(j)
		return err
	}
	j.done = done
	if err := d.pool.submit(j); err != nil {
		putJob(j)
		return err
	}
	return nil
}

// launchJob fills j with a launch: the fields its chunks read, no closure,
// so that a launch costs no allocation beyond a pooled job.
func (d *Device) launchJob(j *job, op *device.LaunchOp) error {
	fn := op.Func
	if op.Kernel != nil {
		fn = op.Kernel.Go
	}
	if fn == nil {
		return fmt.Errorf("%w: kernel %q has no Go implementation for %s; register one in Kernel.Go", device.ErrNoImplementation, op.Name, d.info.ID)
	}
	r := op.Range
	if err := r.Validate(); err != nil {
		return err
	}
	if err := device.CheckLaunch(op.Kernel, r, op.Args); err != nil {
		return err
	}
	var data [][]byte
	if len(op.Args) > 0 {
		if len(op.Args) <= len(j.dataBuf) {
			data = j.dataBuf[:len(op.Args)]
		} else {
			data = make([][]byte, len(op.Args))
		}
	}
	hasLocal, local := false, 0
	for i, a := range op.Args {
		if a.Kind == device.ArgLocal {
			hasLocal = true
			if a.LocalBytes < 0 || a.LocalBytes > LocalMemBytes-local {
				return fmt.Errorf("%w: kernel %q asks for more than the %d bytes of local memory a work-group of %s may have (argument %d: %d bytes); use smaller work-groups or local arrays",
					device.ErrBadOp, op.Name, LocalMemBytes, d.info.ID, i, a.LocalBytes)
			}
			local += a.LocalBytes
		}
		if a.Mem == nil {
			continue
		}
		if a.Mem.Host == nil {
			return fmt.Errorf("%w: kernel %q argument %d is memory of %s that the CPU cannot reach", device.ErrUnsupported, op.Name, i, a.Mem.Device)
		}
		if a.Offset < 0 || a.Offset > len(a.Mem.Host) {
			return fmt.Errorf("%w: kernel %q argument %d offset %d outside its allocation", device.ErrBadOp, op.Name, i, a.Offset)
		}
		data[i] = a.Mem.Host[a.Offset:]
	}
	j.name, j.fn, j.rng, j.args, j.data, j.hasLocal = op.Name, fn, r, op.Args, data, hasLocal
	items := r.Global[0] * r.Global[1] * r.Global[2]
	if items == 0 {
		j.kind, j.n = jobEmpty, 1
		return nil
	}
	if !r.Grouped() {
		// Split the slowest dimension with more than one index.
		sd := 0
		for sd < 2 && r.Global[sd] == 1 {
			sd++
		}
		n := min(int64(d.workers*chunksPerWorker), int64(r.Global[sd]), int64((items+minChunkItems-1)/minChunkItems))
		j.kind, j.n, j.sd = jobFlat, max(n, 1), sd
		return nil
	}
	for dd := range j.groups {
		j.groups[dd] = r.Global[dd] / r.Local[dd]
	}
	ng := j.groups[0] * j.groups[1] * j.groups[2]
	j.kind, j.n = jobGrouped, min(int64(ng), int64(d.workers*chunksPerWorker))
	return nil
}

// run runs chunk c of j with w (the worker's, reset before each call).
func (j *job) run(c int, w *device.Work) {
	switch j.kind {
	case jobCopy:
		device.CopyHost(j.copy.Dst.Mem.Host, j.copy.Src.Mem.Host, j.copy)
	case jobFill:
		f := j.fill
		if j.n > 1 {
			// Chunk c covers whole patterns [lo, hi) of the fill.
			p := int64(len(f.Pattern))
			count := int64(f.Bytes) / p
			lo, hi := count*int64(c)/j.n*p, count*int64(c+1)/j.n*p
			f.Offset, f.Bytes = f.Offset+int(lo), int(hi-lo)
		}
		fill(f.Dst.Host, f, j.fill.Bytes)
	case jobFlat:
		r, n := j.rng, j.n
		ext := r.Global[j.sd]
		w.Range, w.Args, w.Data, w.Hi = r, j.args, j.data, r.Global
		w.Lo[j.sd] = int(int64(ext) * int64(c) / n)
		w.Hi[j.sd] = int(int64(ext) * int64(c+1) / n)
		j.fn(w)
	case jobGrouped:
		r, groups := j.rng, j.groups
		ng := groups[0] * groups[1] * groups[2]
		w.Range, w.Args, w.Data = r, j.args, j.data
		if j.hasLocal {
			// One local allocation per work-group: this chunk's groups run
			// one after the other, each with the memory to itself (A3).
			w.Local = make([][]byte, len(j.args))
			for i, a := range j.args {
				if a.Kind == device.ArgLocal {
					w.Local[i] = AllocHost(a.LocalBytes)
				}
			}
		}
		lo, hi := int(int64(ng)*int64(c)/j.n), int(int64(ng)*int64(c+1)/j.n)
		for g := lo; g < hi; g++ {
			w.Group = [3]int{g / (groups[1] * groups[2]), g / groups[2] % groups[1], g % groups[2]}
			for dd := range 3 {
				w.Lo[dd] = w.Group[dd] * r.Local[dd]
				w.Hi[dd] = w.Lo[dd] + r.Local[dd]
			}
			j.fn(w)
		}
	}
}

// Backend is the CPU backend for device.RegisterBackend; the runtime opens
// it itself, so registering it is only needed by tools that list backends.
var Backend = device.Backend{Kind: device.KindCPU, Open: Open}
