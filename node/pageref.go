package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// Pages by reference: between two nodes on one host whose allocations are
// GPU memory, a Send exports its allocation (CUDA IPC) instead of copying
// the boxes out to pinned memory and over QUIC; the receiver maps it once,
// copies the boxes device to device on its own GPU, and only then
// acknowledges, so the sender's Send (and with it the sender's right to
// overwrite the pages) ends after the copy. On the two-GPU Jacobi this
// turns a 64 KiB halo hop of about 0.45 ms (GPU → pinned → QUIC → pinned →
// GPU) into one NVLink copy plus a small message (docs/PERFORMANCE.md).
//
// The sender tries it where its memory can be exported, and falls back to
// sending the bytes for a (peer, memory) pair that refused once with
// proto.CodeNoPageRef: a receiver on another host (the Linux boot ID
// differs), in the same process (CUDA cannot open its own handles),
// without a MemSharer device, or whose mapping failed.

// refAckTimeout bounds how long a send by reference that was cancelled
// waits for the receiver's answer (see sendByRef).
const refAckTimeout = 10 * time.Second

// pageRefs is a node's state for pages by reference.
type pageRefs struct {
	host   string        // this host's ID; "" disables pages by reference
	serial atomic.Uint64 // numbers the node's allocations (proto.PageRef.Alloc)

	mu      sync.Mutex
	refused map[string]time.Time // "peer/mem" pairs that answered CodeNoPageRef, and when
}

// refRetry is how long a (peer, memory) pair that refused pages by
// reference gets bytes before the next offer (a refusal may be passing:
// a mapping that failed once).
const refRetry = time.Minute

// hostID identifies the host across processes: the kernel's boot ID, or
// "" where there is none (then nothing goes by reference).
func hostID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	id := strings.TrimSpace(string(b))
	if len(id) > proto.MaxPageRefHost {
		return ""
	}
	return id
}

func refKey(peer string, mem uint32) string { return peer + "/" + strconv.FormatUint(uint64(mem), 10) }

func (r *pageRefs) usable(peer string, mem uint32) bool {
	if r.host == "" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.refused[refKey(peer, mem)]
	return !ok || time.Since(at) > refRetry
}

func (r *pageRefs) refuse(peer string, mem uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused == nil {
		r.refused = map[string]time.Time{}
	}
	r.refused[refKey(peer, mem)] = time.Now()
}

// sendByRef sends hdr's pages of a by reference. handled is false when
// they must go as bytes instead (not possible here, or refused by the
// peer); err is the transfer's outcome otherwise.
func (j *job) sendByRef(ctx context.Context, a *alloc, peer credentials.Identity, hdr *proto.PageHeader) (handled bool, err error) {
	n := j.n
	sh, ok := a.m.dev.(device.MemSharer)
	if !ok || !n.refs.usable(peer.Name, hdr.Mem) {
		return false, nil
	}
	j.mu.Lock()
	handle, failed := a.exported, a.exportFailed
	j.mu.Unlock()
	if failed {
		return false, nil
	}
	if handle == nil {
		if handle, err = sh.ExportMem(a.mem); err != nil {
			n.log.Debug("device memory cannot be exported; sending its pages as bytes", "device", a.m.dev.Info().ID, "error", err)
			j.mu.Lock()
			a.exportFailed = true
			j.mu.Unlock()
			return false, nil
		}
		j.mu.Lock()
		a.exported = handle
		j.mu.Unlock()
	}
	h := *hdr
	h.Ref = &proto.PageRef{Host: n.refs.host, PID: os.Getpid(), Handle: handle, Bytes: a.bytes, Alloc: a.serial}
	t0 := time.Now()
	// The receiver copies from this allocation until it answers, and the
	// allocation may be freed as soon as this send ends: a cancellation
	// (job closed, peer lost) must not end the send before the answer, or
	// the receiver's GPU could read freed memory. The answer comes when
	// the copy is done, the receiver's job closes, or the connection
	// breaks; after a cancellation refAckTimeout bounds the wait. Without
	// one the send waits as long as the receiver's Recv takes to be ready,
	// as a send of bytes does.
	j.mu.Lock()
	if !slices.Contains(a.lentTo, peer.Name) { // it may map it from now on: unmap before free
		a.lentTo = append(a.lentTo, peer.Name)
	}
	j.mu.Unlock()
	sctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(refAckTimeout, func() { cancel(context.Cause(ctx)) })
	})
	err = n.tr.SendPages(sctx, peer, &h, nil)
	stop()
	cancel(nil)
	if n.log.Enabled(ctx, slog.LevelDebug) {
		n.log.Debug("pages sent by reference", "peer", peer.Name, "buffer", hdr.Buffer, "sent_at_us", t0.UnixMicro(), "acked_after", time.Since(t0).String(), "error", err)
	}
	var re *transport.RemoteError
	if errors.As(err, &re) && re.Code == proto.CodeNoPageRef {
		n.log.Info("peer cannot map this node's device memory; sending pages through the network", "peer", peer.Name, "mem", hdr.Mem, "reason", re.Message)
		n.refs.refuse(peer.Name, hdr.Mem)
		return false, nil
	}
	if err == nil {
		n.met.byRef.WithLabelValues("sent", peer.Name).Inc()
	}
	return true, err
}

// imported is a peer's allocation mapped into a device of this node.
type imported struct {
	dev   device.Device
	mem   *device.Mem
	peer  string // the node that lent it
	alloc uint64 // its PageRef.Alloc
}

// importRef maps the allocation ref names into sh (once per job, peer and
// allocation).
func (j *job) importRef(sh device.MemSharer, dev device.Device, peer string, mem uint32, ref *proto.PageRef) (*device.Mem, error) {
	key := refKey(peer, mem) + "/" + strconv.FormatUint(ref.Alloc, 10) + "/" + string(ref.Handle)
	j.mu.Lock()
	im, ok := j.imports[key]
	j.mu.Unlock()
	if ok {
		return im.mem, nil
	}
	m, err := sh.ImportMem(ref.Handle, int(ref.Bytes))
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.freed { // closed meanwhile: nobody would unmap it
		j.n.goFunc(func() { _ = dev.Free(m) })
		return nil, fmt.Errorf("%w: job %d", errJobClosed, j.id)
	}
	if other, ok := j.imports[key]; ok { // mapped twice concurrently
		j.n.goFunc(func() { _ = dev.Free(m) })
		return other.mem, nil
	}
	if j.imports == nil {
		j.imports = map[string]imported{}
	}
	j.imports[key] = imported{dev: dev, mem: m, peer: peer, alloc: ref.Alloc}
	return m, nil
}

// pagesByRef is onPages for pages by reference from node peer: Done maps
// the sender's allocation, hands the transfer to its Recv (now, or when
// the Recv is armed) and returns when the Recv's copy has finished, which
// acknowledges the transfer to the sender.
func (n *Node) pagesByRef(ctx context.Context, j *job, peer string, boot uint64, h *proto.PageHeader, total uint64) (transport.PageSink, error) {
	noRef := func(format string, args ...any) (transport.PageSink, error) {
		return transport.PageSink{}, reply(proto.CodeNoPageRef, format, args...)
	}
	if n.refs.host == "" || h.Ref.Host != n.refs.host {
		return noRef("node %s runs on another host", n.cfg.Name)
	}
	m, err := n.devs.mem(h.Mem)
	if err != nil {
		return transport.PageSink{}, err
	}
	sh, ok := m.dev.(device.MemSharer)
	if m.host || !ok {
		return noRef("memory %d of node %s is not device memory that can map another process's", h.Mem, n.cfg.Name)
	}
	hdr := *h
	hdr.Boxes = slices.Clone(h.Boxes)
	ref := *h.Ref
	asked := time.Now()
	return transport.PageSink{Done: func(err error) error {
		if err != nil {
			return err
		}
		done := time.Now()
		src, err := j.importRef(sh, m.dev, peer, h.Mem, &ref)
		if errors.Is(err, errJobClosed) {
			return reply(proto.CodeRefused, "job %d is closed on node %s", j.id, n.cfg.Name)
		}
		if err != nil {
			n.log.Info("cannot map a peer's device memory; it will send pages through the network", "peer", peer, "device", m.dev.Info().ID, "error", err)
			return &proto.ErrorReply{Code: proto.CodeNoPageRef, Message: fmt.Sprintf("%s cannot map %s's memory: %v", m.dev.Info().ID, peer, err)}
		}
		arr := &arrival{from: peer, boot: boot, hdr: hdr, landed: true, ref: src, refBytes: ref.Bytes, refDone: make(chan error, 1), at: time.Now()}
		j.mu.Lock()
		if j.closed != nil {
			j.mu.Unlock()
			return reply(proto.CodeRefused, "job %d is closed on node %s", j.id, n.cfg.Name)
		}
		in, a := j.claimArmedLocked(peer, &hdr)
		claimed := in != nil
		if claimed {
			arr.claim, arr.claimedAt = in, time.Now()
			j.mu.Unlock()
			j.n.goFunc(func() { j.applyRef(in, a, arr) })
		} else {
			j.early = append(j.early, arr)
			j.mu.Unlock()
		}
		select {
		case err := <-arr.refDone:
			if n.log.Enabled(ctx, slog.LevelDebug) {
				n.log.Debug("pages received by reference", "peer", peer, "buffer", hdr.Buffer, "early", !claimed, "asked_at_us", asked.UnixMicro(),
					"handler_to_done", done.Sub(asked).String(), "mapped", arr.at.Sub(done).String(), "claimed_after", arr.claimedAt.Sub(arr.at).String(),
					"copy_started_after", arr.copyAt.Sub(arr.claimedAt).String(), "copied_in", time.Since(arr.copyAt).String())
			}
			if err == nil {
				n.met.bytes.WithLabelValues("received", peer).Add(float64(total))
				n.met.boxes.WithLabelValues("received", peer).Add(float64(len(hdr.Boxes)))
				n.met.transfers.WithLabelValues("received", peer).Inc()
				n.met.byRef.WithLabelValues("received", peer).Inc()
			}
			return err
		case <-ctx.Done():
		case <-j.ctx.Done():
		}
		// The sender gave up or the job closed. An unclaimed arrival is
		// dropped. A claimed one's copy is on the device: answer only when
		// it has ended (device work always ends), since the answer lets
		// the sender free the memory it reads.
		j.mu.Lock()
		claimedNow := arr.claim != nil
		if i := slices.Index(j.early, arr); i >= 0 && !claimedNow {
			j.early = slices.Delete(j.early, i, i+1)
		}
		j.mu.Unlock()
		if claimedNow {
			return <-arr.refDone
		}
		if err := context.Cause(ctx); err != nil {
			return err
		}
		return reply(proto.CodeRefused, "job %d closed on node %s", j.id, n.cfg.Name)
	}}, nil
}

// applyRef copies the boxes of a transfer by reference from the mapped
// sender allocation into a, finishes in, and acknowledges the transfer.
func (j *job) applyRef(in *instr, a *alloc, arr *arrival) {
	arr.copyAt = time.Now()
	err := elemMismatch(a, arr.hdr.ElemSize)
	if err == nil && arr.refBytes != a.bytes {
		err = fmt.Errorf("%w: the sender's allocation of buffer %d has %d bytes, this node's %d", proto.ErrMalformed, a.key.buf, arr.refBytes, a.bytes)
	}
	if err != nil {
		j.finish(in, err)
		arr.refDone <- &proto.ErrorReply{Code: proto.CodeRefused, Message: err.Error()}
		return
	}
	runOps(a.m.dev, queueIn, sameBoxCopies(arr.ref, a.mem, a, in.in.Boxes), func(err error) {
		j.finish(in, err)
		arr.refDone <- err
	})
}

// handleUnmapRef closes this node's mappings of allocations that node peer
// lent by reference in a job (MsgUnmapRef), so that peer may free them.
// No copy reads them any more: the peer asks only once every send of
// theirs has ended, which is after the copies here.
func (n *Node) handleUnmapRef(_ context.Context, from credentials.Identity, req *proto.UnmapRef) (*proto.UnmapRefDone, error) {
	if from.Role != proto.RoleNode {
		return nil, reply(proto.CodeRefused, "only nodes lend memory by reference; %s may not ask to unmap it", from)
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	j := n.jobs[req.Job]
	n.mu.Unlock()
	if j == nil { // its mappings went with it
		return &proto.UnmapRefDone{}, nil
	}
	var drop []imported
	j.mu.Lock()
	for key, im := range j.imports {
		if im.peer == from.Name && slices.Contains(req.Allocs, im.alloc) {
			drop = append(drop, im)
			delete(j.imports, key)
		}
	}
	j.mu.Unlock()
	for _, im := range drop {
		if err := im.dev.Free(im.mem); err != nil {
			n.log.Warn("unmapping a peer's memory failed", "peer", from.Name, "job", jobID(req.Job), "device", im.dev.Info().ID, "error", err)
		}
	}
	return &proto.UnmapRefDone{Unmapped: len(drop)}, nil
}
