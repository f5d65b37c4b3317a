package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
)

// start runs an instruction whose dependencies completed. It is called
// without j.mu held; in is marked stRunning.
func (j *job) start(in *instr) {
	if err := j.n.ctx.Err(); err != nil {
		j.finish(in, fmt.Errorf("%w: %v", errJobClosed, ErrClosed))
		return
	}
	switch in.in.Kind {
	case proto.InstrAlloc:
		j.n.goFunc(func() { j.finish(in, j.doAlloc(in)) })
	case proto.InstrFree:
		j.n.goFunc(func() { j.finish(in, j.doFree(in)) })
	case proto.InstrCopy:
		j.doCopy(in)
	case proto.InstrFill:
		j.doFill(in)
	case proto.InstrLaunch:
		j.doLaunch(in)
	case proto.InstrSend, proto.InstrReadBack:
		j.doSend(in)
	case proto.InstrRecv, proto.InstrUpload:
		j.arm(in)
	default:
		j.finish(in, fmt.Errorf("instruction kind %v is not implemented by this node", in.in.Kind))
	}
}

func elems(r [3]uint64) uint64 { return r[0] * r[1] * r[2] }

func ints(r [3]uint64) [3]int { return [3]int{int(r[0]), int(r[1]), int(r[2])} }

func (j *job) doAlloc(in *instr) error {
	m, err := j.n.devs.mem(in.in.Mem)
	if err != nil {
		return err
	}
	bytes := elems(in.in.Range) * uint64(in.in.ElemSize)
	key := allocKey{in.in.Buffer, in.in.Mem}
	a := &alloc{key: key, m: m, rng: in.in.Range, elem: in.in.ElemSize, bytes: bytes, serial: j.n.refs.serial.Add(1)}
	j.mu.Lock()
	if _, ok := j.allocs[key]; ok {
		j.mu.Unlock()
		return fmt.Errorf("buffer %d already has an allocation in memory %d; allocations have the full buffer size and are made once (B1)", key.buf, key.mem)
	}
	// Admit before allocating: Go cannot recover from a failed allocation.
	if err := j.reserveInLocked(m, bytes, fmt.Sprintf("allocation of buffer %d in memory %d", key.buf, key.mem)); err != nil {
		j.mu.Unlock()
		return err
	}
	j.allocs[key] = a // placeholder: users depend on this instruction
	j.mu.Unlock()
	mem, err := m.dev.Alloc(device.MemDevice, int(bytes))
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil {
		delete(j.allocs, key)
		j.releaseInLocked(m, bytes)
		return fmt.Errorf("allocate %d bytes for buffer %d on %s: %w", bytes, key.buf, m.dev.Info().ID, err)
	}
	a.mem = mem
	j.n.met.allocs.Inc()
	return nil
}

func (j *job) doFree(in *instr) error {
	key := allocKey{in.in.Buffer, in.in.Mem}
	j.mu.Lock()
	a, ok := j.allocs[key]
	if !ok || a.mem == nil {
		j.mu.Unlock()
		return fmt.Errorf("job %d has no allocation of buffer %d in memory %d to free", j.id, key.buf, key.mem)
	}
	delete(j.allocs, key)
	j.releaseInLocked(a.m, a.bytes)
	lent := len(a.lentTo) > 0
	j.mu.Unlock()
	j.n.met.allocs.Dec()
	if lent { // a peer may have it mapped (pages by reference): it unmaps first
		j.freeLent([]*alloc{a})
		return nil
	}
	return a.m.dev.Free(a.mem)
}

// checkBoxes checks that boxes lie inside the buffer's range.
func checkBoxes(a *alloc, boxes []proto.Box) error {
	for i, b := range boxes {
		for d := range 3 {
			if b.Hi[d] > a.rng[d] {
				return fmt.Errorf("%w: box %d %v..%v lies outside buffer %d's range %v", proto.ErrMalformed, i, b.Lo, b.Hi, a.key.buf, a.rng)
			}
		}
	}
	return nil
}

func boxSize(b proto.Box) [3]int {
	return [3]int{int(b.Hi[0] - b.Lo[0]), int(b.Hi[1] - b.Lo[1]), int(b.Hi[2] - b.Lo[2])}
}

// boxCopies are the copies between an allocation and packed staging memory
// (the boxes' bytes one after another, each row-major), one per box.
func boxCopies(a *alloc, boxes []proto.Box, staging *device.Mem, toStaging bool) []device.CopyOp {
	ops := make([]device.CopyOp, 0, len(boxes))
	off := 0
	for _, b := range boxes {
		sz := boxSize(b)
		side := device.Region{Mem: a.mem, Extent: ints(a.rng), Origin: ints(b.Lo)}
		st := device.Region{Mem: staging, Offset: off, Extent: sz}
		op := device.CopyOp{Src: side, Dst: st, Size: sz, ElemSize: int(a.elem)}
		if !toStaging {
			op.Src, op.Dst = st, side
		}
		ops = append(ops, op)
		off += sz[0] * sz[1] * sz[2] * int(a.elem)
	}
	return ops
}

// hostMem wraps Go memory as a device.Mem that every backend can copy from
// or to (the CPU device's kind of memory).
func (j *job) hostMem(b []byte) *device.Mem {
	m := &device.Mem{Device: j.n.devs.mems[0].dev.Info().ID, Kind: device.MemHost, Bytes: len(b), Host: b}
	if len(b) > 0 {
		m.Addr = uint64(uintptr(unsafe.Pointer(&b[0])))
	}
	return m
}

// Device queues (streams on a GPU) by the kind of work, so that page
// moves never wait behind kernels queued on the same device: a halo's copy
// out to the network must not queue behind the next chunks' kernels, or
// the peer that waits for it idles (measured on two GPUs: a 64 KiB send
// took a median 0.73 ms behind kernels, 0.52 ms on a queue of its own). Kernels keep
// one queue, in the order their dependencies complete.
const (
	queueKernels = 0
	queueOut     = 1 // device → staging, for sends and readbacks
	queueIn      = 2 // staging → device, for recvs and uploads
	queueLocal   = 3 // copies between memories of this node, fills
)

// runOps enqueues ops on dev's queue q and calls done once, after all of
// them finished, with the first error.
func runOps(dev device.Device, q int, ops []device.Op, done func(error)) {
	if len(ops) == 0 {
		done(nil)
		return
	}
	var mu sync.Mutex
	left := len(ops)
	var first error
	one := func(n int, err error) {
		mu.Lock()
		if err != nil && first == nil {
			first = err
		}
		left -= n
		last := left == 0
		mu.Unlock()
		if last {
			done(first)
		}
	}
	for i, op := range ops {
		if err := dev.Enqueue(q, op, func(err error) { one(1, err) }); err != nil {
			one(len(ops)-i, fmt.Errorf("%s refused the work: %w", dev.Info().ID, err))
			return
		}
	}
}

// sameBoxCopies copies boxes between two memories holding the same buffer
// (geometry of a: range and element size), one op per box.
func sameBoxCopies(src, dst *device.Mem, a *alloc, boxes []proto.Box) []device.Op {
	ops := make([]device.Op, 0, len(boxes))
	for _, b := range boxes {
		ops = append(ops, device.CopyOp{
			Src:  device.Region{Mem: src, Extent: ints(a.rng), Origin: ints(b.Lo)},
			Dst:  device.Region{Mem: dst, Extent: ints(a.rng), Origin: ints(b.Lo)},
			Size: boxSize(b), ElemSize: int(a.elem),
		})
	}
	return ops
}

func copyOps(cs []device.CopyOp) []device.Op {
	ops := make([]device.Op, len(cs))
	for i, c := range cs {
		ops[i] = c
	}
	return ops
}

func (j *job) doCopy(in *instr) {
	src, err := j.allocFor(in.in.Buffer, in.in.Mem)
	if err == nil {
		var dst *alloc
		if dst, err = j.allocFor(in.in.Buffer, in.in.DstMem); err == nil {
			err = checkBoxes(src, in.in.Boxes)
			if err == nil {
				dev := j.n.devs.mems[0].dev
				switch {
				case !dst.m.host:
					dev = dst.m.dev
				case !src.m.host:
					dev = src.m.dev
				}
				runOps(dev, queueLocal, sameBoxCopies(src.mem, dst.mem, src, in.in.Boxes), func(err error) { j.finish(in, err) })
				return
			}
		}
	}
	j.finish(in, err)
}

// boxOffsets lists the contiguous byte runs of box b in the row-major
// storage of a buffer of range rng, as (offset, length) pairs.
func boxOffsets(rng [3]uint64, elem uint32, b proto.Box) [][2]int {
	var out [][2]int
	run := (b.Hi[2] - b.Lo[2]) * uint64(elem)
	for z := b.Lo[0]; z < b.Hi[0]; z++ {
		for y := b.Lo[1]; y < b.Hi[1]; y++ {
			off := ((z*rng[1]+y)*rng[2] + b.Lo[2]) * uint64(elem)
			if n := len(out); n > 0 && out[n-1][0]+out[n-1][1] == int(off) {
				out[n-1][1] += int(run)
				continue
			}
			out = append(out, [2]int{int(off), int(run)})
		}
	}
	return out
}

func (j *job) doFill(in *instr) {
	a, err := j.allocFor(in.in.Buffer, in.in.Mem)
	if err == nil && int(a.elem)%len(in.in.Pattern) != 0 {
		err = fmt.Errorf("fill pattern of %d bytes does not divide the element size %d", len(in.in.Pattern), a.elem)
	}
	if err == nil {
		err = checkBoxes(a, in.in.Boxes)
	}
	if err != nil {
		j.finish(in, err)
		return
	}
	var ops []device.Op
	if len(in.in.Boxes) == 0 {
		ops = append(ops, device.FillOp{Dst: a.mem, Bytes: int(a.bytes), Pattern: in.in.Pattern})
	}
	for _, b := range in.in.Boxes {
		for _, r := range boxOffsets(a.rng, a.elem, b) {
			ops = append(ops, device.FillOp{Dst: a.mem, Offset: r[0], Bytes: r[1], Pattern: in.in.Pattern})
		}
	}
	runOps(a.m.dev, queueLocal, ops, func(err error) { j.finish(in, err) })
}

func (j *job) doLaunch(in *instr) {
	op, dev, err := j.launchOp(in.in.Launch)
	if err != nil {
		j.finish(in, err)
		return
	}
	if err := dev.Enqueue(queueKernels, op, func(err error) { j.finish(in, err) }); err != nil {
		j.finish(in, fmt.Errorf("%s refused kernel %q: %w", dev.Info().ID, op.Name, err))
	}
}

func (j *job) launchOp(l *proto.Launch) (device.LaunchOp, device.Device, error) {
	var op device.LaunchOp
	dev, ok := j.n.devs.byID[l.Device]
	if !ok {
		return op, nil, fmt.Errorf("this node has no device %q (see its inventory)", l.Device)
	}
	k, err := j.kernel(l.Kernel, dev) // the job's own kernels first, then the node's
	if err != nil {
		return op, nil, err
	}
	memID := j.n.devs.memOf[l.Device]
	args := make([]device.Arg, len(l.Args))
	for i, ka := range l.Args {
		a := device.Arg{
			Kind: device.ArgKind(ka.Kind), Space: device.AddrSpace(ka.Space), Offset: int(ka.Offset), ElemSize: int(ka.ElemSize),
			Range: ints(ka.Range), AccessOffset: ints(ka.AccessOffset), AccessRange: ints(ka.AccessRange),
			ReadOnly: ka.ReadOnly, LocalBytes: int(ka.LocalBytes), Scalar: ka.Scalar,
		}
		switch a.Kind {
		case device.ArgPointer, device.ArgAccessor, device.ArgRangedAccessor:
			if ka.Mem != memID {
				return op, nil, fmt.Errorf("kernel %q argument %d: buffer %d in memory %d, but %s uses memory %d; copy the pages there first", l.Kernel, i, ka.Buffer, ka.Mem, l.Device, memID)
			}
			al, err := j.allocFor(ka.Buffer, ka.Mem)
			if err != nil {
				return op, nil, fmt.Errorf("kernel %q argument %d: %w", l.Kernel, i, err)
			}
			if ka.Offset > al.bytes {
				return op, nil, fmt.Errorf("kernel %q argument %d: offset %d beyond the allocation's %d bytes", l.Kernel, i, ka.Offset, al.bytes)
			}
			if err := accessorFits(ka, al.bytes); err != nil {
				return op, nil, fmt.Errorf("kernel %q argument %d: %w", l.Kernel, i, err)
			}
			a.Mem = al.mem
			if a.Space == 0 {
				a.Space = al.mem.Space()
			}
		case device.ArgScalar:
			if a.Space == 0 {
				a.Space = device.Private
			}
		case device.ArgLocal:
			if a.Space == 0 {
				a.Space = device.Local
			}
		}
		args[i] = a
	}
	args, err = device.ValidateArgs(k, args, dev.Info().Caps.LocalMemBytes)
	if err != nil {
		return op, nil, err
	}
	r := device.NDRange{Global: ints(l.Global), Local: ints(l.Local), Offset: ints(l.Offset)}
	return device.LaunchOp{Name: l.Kernel, Kernel: k, Range: r, Args: args}, dev, nil
}

// doSend sends pages to a peer node (Send) or to the job's client
// (ReadBack).
func (j *job) doSend(in *instr) {
	a, err := j.allocFor(in.in.Buffer, in.in.Mem)
	if err == nil {
		err = checkBoxes(a, in.in.Boxes)
	}
	unseen := false // the peer's run is newer than membership shows yet
	if err == nil && in.in.Kind == proto.InstrSend {
		var how string
		var gone bool
		if how, gone, unseen = j.n.peerGone(in.in.Peer, in.in.PeerBoot); gone {
			err = &NodeLostError{Node: in.in.Peer, How: how, Buffer: in.in.Buffer, Boxes: in.in.Boxes}
		}
	}
	if err != nil {
		j.finish(in, err)
		return
	}
	ctx, cancel := context.WithCancelCause(j.ctx)
	j.mu.Lock()
	if in.finished() { // failed meanwhile (peer lost, job closed)
		j.mu.Unlock()
		cancel(nil)
		return
	}
	in.cancel = cancel
	j.mu.Unlock()
	peer, label := credentials.Node(in.in.Peer), in.in.Peer
	hdr := proto.PageHeader{Job: j.id, Buffer: in.in.Buffer, Mem: in.in.PeerMem, ElemSize: a.elem, Boxes: in.in.Boxes}
	if in.in.Kind == proto.InstrReadBack {
		peer, label = j.owner, "client"
		hdr.Mem = in.in.Ticket
	}
	byRef := in.in.Kind == proto.InstrSend && a.mem.Host == nil
	j.n.goFunc(func() {
		var err error
		handled := false
		if unseen {
			// Dial the run the coordinator named only once membership
			// shows it (the address may be another), or fail with it.
			var how string
			var gone bool
			if how, gone, err = j.n.awaitRun(ctx, in.in.Peer, in.in.PeerBoot); gone {
				err = &NodeLostError{Node: in.in.Peer, How: how, Buffer: in.in.Buffer, Boxes: in.in.Boxes}
			}
			handled = err != nil
		}
		if byRef && !handled {
			handled, err = j.sendByRef(ctx, a, peer, &hdr)
		}
		if !handled {
			err = j.send(ctx, a, peer, &hdr)
		}
		if err != nil {
			var nl *NodeLostError
			if cause := context.Cause(ctx); errors.As(cause, &nl) {
				err = cause
			} else if cause := context.Cause(j.ctx); cause != nil {
				err = fmt.Errorf("%w: %v", errJobClosed, cause)
			}
		} else {
			total, _ := hdr.Validate(0)
			j.n.met.bytes.WithLabelValues("sent", label).Add(float64(total))
			j.n.met.boxes.WithLabelValues("sent", label).Add(float64(len(hdr.Boxes)))
			j.n.met.transfers.WithLabelValues("sent", label).Inc()
		}
		j.finish(in, err)
	})
}

func (j *job) send(ctx context.Context, a *alloc, peer credentials.Identity, hdr *proto.PageHeader) error {
	total, err := hdr.Validate(0)
	if err != nil {
		return err
	}
	var runs [][]byte
	if a.mem.Host != nil {
		for _, b := range hdr.Boxes {
			if runs, err = proto.AppendBoxRuns(runs, a.mem.Host, a.rng, a.elem, b); err != nil {
				return err
			}
		}
	} else {
		// Device memory without a host view: copy the boxes out into
		// packed host memory first.
		j.mu.Lock()
		err := j.reserveLocked(total, "send staging")
		j.mu.Unlock()
		if err != nil {
			return err
		}
		defer func() {
			j.mu.Lock()
			j.releaseLocked(total)
			j.mu.Unlock()
		}()
		st := j.newStaging(a.m, int(total))
		defer st.release()
		done := make(chan error, 1)
		runOps(a.m.dev, queueOut, copyOps(boxCopies(a, hdr.Boxes, st.mem, true)), func(err error) { done <- err })
		if err := <-done; err != nil { // device ops always finish; never abandon staging they write
			return fmt.Errorf("copy pages out of %s: %w", a.m.dev.Info().ID, err)
		}
		runs = [][]byte{st.data()}
	}
	return j.n.tr.SendPages(ctx, peer, hdr, runs)
}

// arm makes a Recv or Upload wait for its pages, or applies pages that
// arrived before it was ready.
func (j *job) arm(in *instr) {
	a, err := j.allocFor(in.in.Buffer, in.in.Mem)
	if err == nil {
		err = checkBoxes(a, in.in.Boxes)
	}
	if err == nil && in.in.Kind == proto.InstrRecv {
		// A run of the peer that membership has not shown yet is not
		// gone: its pages may come before the news.
		if how, gone, _ := j.n.peerGone(in.in.Peer, in.in.PeerBoot); gone {
			err = &NodeLostError{Node: in.in.Peer, How: how, Buffer: in.in.Buffer, Boxes: in.in.Boxes}
		}
	}
	if err != nil {
		j.finish(in, err)
		return
	}
	j.mu.Lock()
	if in.finished() {
		j.mu.Unlock()
		return
	}
	in.state = stArmed
	j.running--
	for i, arr := range j.early {
		if arr.claim != nil || !matches(in, arr.from, &arr.hdr) {
			continue
		}
		arr.claim, in.claimed, in.state = in, true, stRunning
		arr.claimedAt = time.Now()
		j.running++
		if !arr.landed {
			j.mu.Unlock()
			return // applied when it lands
		}
		j.early = append(j.early[:i:i], j.early[i+1:]...)
		j.mu.Unlock()
		if arr.ref != nil {
			j.n.goFunc(func() { j.applyRef(in, a, arr) })
			return
		}
		j.apply(in, a, arr.st, arr.hdr.ElemSize)
		return
	}
	free := j.freeIfIdleLocked()
	j.mu.Unlock()
	free()
}

// elemMismatch is the error for pages whose elements (elem bytes each)
// are not those of the allocation they are for: their boxes would span
// other bytes than the sender meant.
func elemMismatch(a *alloc, elem uint32) error {
	if elem == a.elem {
		return nil
	}
	return fmt.Errorf("%w: pages of buffer %d came with %d-byte elements, its allocation in memory %d has %d-byte elements; the job's instructions disagree about the buffer",
		proto.ErrMalformed, a.key.buf, elem, a.key.mem, a.elem)
}

// matches reports whether pages described by h from peer ("" for the
// job's client) are the ones in waits for.
func matches(in *instr, peer string, h *proto.PageHeader) bool {
	if in.in.Buffer != h.Buffer || in.in.Mem != h.Mem || len(in.in.Boxes) != len(h.Boxes) {
		return false
	}
	if peer == "" && in.in.Kind != proto.InstrUpload || peer != "" && (in.in.Kind != proto.InstrRecv || in.in.Peer != peer) {
		return false
	}
	for i := range h.Boxes {
		if in.in.Boxes[i] != h.Boxes[i] {
			return false
		}
	}
	return true
}

// apply copies staged, packed pages of elem-byte elements into the
// allocation and finishes in. The staged bytes were reserved against the
// limits; apply releases them and the staging memory.
func (j *job) apply(in *instr, a *alloc, st stagingBuf, elem uint32) {
	data := st.data()
	release := func() {
		j.mu.Lock()
		j.releaseLocked(uint64(len(data)))
		j.mu.Unlock()
		st.release()
	}
	if err := elemMismatch(a, elem); err != nil {
		release()
		j.finish(in, err)
		return
	}
	if a.mem.Host != nil {
		off := 0
		var runs [][]byte
		var err error
		for _, b := range in.in.Boxes {
			if runs, err = proto.AppendBoxRuns(runs[:0], a.mem.Host, a.rng, a.elem, b); err != nil {
				break
			}
			for _, r := range runs {
				off += copy(r, data[off:])
			}
		}
		release()
		j.finish(in, err)
		return
	}
	runOps(a.m.dev, queueIn, copyOps(boxCopies(a, in.in.Boxes, st.mem, false)), func(err error) {
		release()
		j.finish(in, err)
	})
}

// stagingBuf is host memory that pages pass through on their way to or
// from device memory without a host view, or that holds pages which came
// before their Recv was ready. Its first n bytes are used.
type stagingBuf struct {
	mem  *device.Mem
	n    int
	free func() // returns pinned memory to its pool or device; nil for Go memory
}

// data is the used part of the buffer.
func (s stagingBuf) data() []byte { return s.mem.Host[:s.n] }

// newStaging returns n bytes of staging for pages of memory m (nil:
// unknown): pinned host memory of m's device when m is device memory and
// the device has host USM (copies to and from it run at full speed),
// reused from the memory's pool when one fits; Go memory otherwise.
func (j *job) newStaging(m *memory, n int) stagingBuf {
	if m != nil && !m.host && m.dev.Info().Caps.Supports(device.MemHost) {
		pm := m.pool.get(n)
		if pm == nil {
			var err error
			if pm, err = m.dev.Alloc(device.MemHost, n); err != nil || len(pm.Host) < n {
				j.n.log.Debug("no pinned staging; using pageable memory", "device", m.dev.Info().ID, "error", err)
				pm = nil
			}
		}
		if pm != nil {
			return stagingBuf{mem: pm, n: n, free: func() {
				if m.pool.put(pm) {
					return
				}
				j.n.goFunc(func() {
					if err := m.dev.Free(pm); err != nil {
						j.n.log.Warn("free of pinned staging failed", "job", jobID(j.id), "device", m.dev.Info().ID, "error", err)
					}
				})
			}}
		}
	}
	return stagingBuf{mem: j.hostMem(cpu.AllocHost(n)), n: n}
}

// release returns pinned staging to its pool, or frees it on a node
// goroutine (a device's Free may block, and release may run in a device
// callback).
func (s stagingBuf) release() {
	if s.free != nil {
		s.free()
	}
}

// accessorFits checks that a memory argument's range (elements of
// ElemSize bytes from Offset) lies within its allocation of bytes, and a
// ranged accessor's access region within its range. A client could
// otherwise hand a kernel a range past the allocation (a GPU kernel would
// write into other jobs' memory) or, past 2^63, negative extents.
func accessorFits(ka proto.KArg, bytes uint64) error {
	if ka.Range != ([3]uint64{}) {
		n, ok := (proto.Box{Hi: ka.Range}).Elems()
		if !ok || ka.ElemSize != 0 && n > (bytes-ka.Offset)/uint64(ka.ElemSize) {
			return fmt.Errorf("range %v of %d-byte elements from byte %d does not fit the allocation's %d bytes", ka.Range, ka.ElemSize, ka.Offset, bytes)
		}
	}
	for d := range 3 {
		if ka.AccessOffset[d] > ka.Range[d] || ka.AccessRange[d] > ka.Range[d]-ka.AccessOffset[d] {
			return fmt.Errorf("access region %v+%v lies outside the range %v", ka.AccessOffset, ka.AccessRange, ka.Range)
		}
	}
	return nil
}
