package node

import (
	"context"
	"fmt"
	"slices"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// onPages is the transport's page handler: it finds where an incoming
// transfer goes. Pages for an armed Recv (or Upload) land straight in its
// allocation when the allocation has a host view; for device memory, and
// for pages that came before their Recv was ready, they land in host
// staging memory, counted against the job's limit.
func (n *Node) onPages(ctx context.Context, from credentials.Identity, h *proto.PageHeader) (transport.PageSink, error) {
	n.mu.Lock()
	j := n.jobs[h.Job]
	n.mu.Unlock()
	if j == nil {
		return transport.PageSink{}, &proto.ErrorReply{Code: proto.CodeRefused, Message: fmt.Sprintf("job %d is not open on node %s", h.Job, n.cfg.Name)}
	}
	peer, label := "", "client"
	switch from.Role {
	case proto.RoleClient, proto.RoleOperator:
		if !ownedBy(j, from) {
			return transport.PageSink{}, reply(proto.CodeNotOwner, "job %d belongs to another client; %s may not write its buffers", h.Job, from)
		}
	case proto.RoleNode:
		peer, label = from.Name, from.Name
	default:
		return transport.PageSink{}, reply(proto.CodeRefused, "pages from %s refused", from)
	}
	total, err := h.Validate(0)
	if err != nil {
		return transport.PageSink{}, err
	}
	if h.Ref != nil {
		if peer == "" {
			return transport.PageSink{}, reply(proto.CodeNoPageRef, "pages by reference come from nodes only")
		}
		return n.pagesByRef(ctx, j, peer, from.Instance, h, total)
	}
	count := func(err error) {
		if err == nil {
			n.met.bytes.WithLabelValues("received", label).Add(float64(total))
			n.met.boxes.WithLabelValues("received", label).Add(float64(len(h.Boxes)))
			n.met.transfers.WithLabelValues("received", label).Inc()
		}
	}

	j.mu.Lock()
	if j.closed != nil {
		j.mu.Unlock()
		return transport.PageSink{}, reply(proto.CodeRefused, "job %d is closed on node %s", h.Job, n.cfg.Name)
	}
	if in, a := j.claimArmedLocked(peer, h); in != nil {
		var runs [][]byte
		err := elemMismatch(a, h.ElemSize)
		if err == nil && a.mem.Host != nil {
			for _, b := range h.Boxes {
				if runs, err = proto.AppendBoxRuns(runs, a.mem.Host, a.rng, a.elem, b); err != nil {
					break
				}
			}
		}
		if err != nil {
			ready := j.finishLocked(in, err)
			j.mu.Unlock()
			j.startAll(ready)
			return transport.PageSink{}, reply(proto.CodeRefused, "%v", err)
		}
		if a.mem.Host != nil {
			j.mu.Unlock()
			return transport.PageSink{Dst: runs, Done: func(err error) error {
				count(err)
				return nil
			}, After: func(err error) { // after the sender's acknowledgement: its dependents start
				j.finish(in, recvErr(from, err))
			}}, nil
		}
		if err := j.reserveLocked(total, "receive staging"); err != nil {
			ready := j.finishLocked(in, err)
			j.mu.Unlock()
			j.startAll(ready)
			return transport.PageSink{}, reply(proto.CodeRefused, "%v", err)
		}
		j.mu.Unlock()
		st := j.newStaging(a.m, int(total))
		return transport.PageSink{Dst: [][]byte{st.data()}, Done: func(err error) error {
			count(err)
			return nil
		}, After: func(err error) {
			if err != nil {
				j.mu.Lock()
				j.releaseLocked(total)
				j.mu.Unlock()
				st.release()
				j.finish(in, recvErr(from, err))
				return
			}
			j.apply(in, a, st, h.ElemSize)
		}}, nil
	}
	// No Recv is ready for these pages yet: stage them.
	if err := j.reserveLocked(total, "early pages"); err != nil {
		j.mu.Unlock()
		return transport.PageSink{}, reply(proto.CodeRefused, "%v", err)
	}
	hdr := *h
	hdr.Boxes = slices.Clone(h.Boxes)
	arr := &arrival{from: peer, boot: from.Instance, hdr: hdr}
	j.early = append(j.early, arr)
	j.mu.Unlock()
	m, _ := n.devs.mem(h.Mem)
	arr.st = j.newStaging(m, int(total)) // before any Done: no lock needed to set it
	// then is the work Done leaves to After (same goroutine, in order):
	// the claiming Recv's completion, after the sender's acknowledgement.
	var then func()
	return transport.PageSink{Dst: [][]byte{arr.st.data()}, After: func(error) {
		if then != nil {
			then()
		}
	}, Done: func(err error) error {
		count(err)
		j.mu.Lock()
		if err != nil {
			if i := slices.Index(j.early, arr); i >= 0 {
				j.early = slices.Delete(j.early, i, i+1)
			}
			j.releaseLocked(total)
			arr.st.release()
			claim := arr.claim
			free := func() {}
			if claim == nil {
				free = j.freeIfIdleLocked()
			}
			j.mu.Unlock()
			free()
			if claim != nil {
				then = func() { j.finish(claim, recvErr(from, err)) }
			}
			return nil
		}
		arr.landed = true
		in := arr.claim
		if in == nil {
			if j.closed != nil { // nobody will claim it
				j.releaseLocked(total)
				arr.st.release()
			}
			j.mu.Unlock()
			return nil
		}
		if i := slices.Index(j.early, arr); i >= 0 {
			j.early = slices.Delete(j.early, i, i+1)
		}
		a := j.allocs[allocKey{in.in.Buffer, in.in.Mem}]
		j.mu.Unlock()
		if a == nil || a.mem == nil {
			j.mu.Lock()
			j.releaseLocked(total)
			j.mu.Unlock()
			arr.st.release()
			then = func() {
				j.finish(in, fmt.Errorf("allocation of buffer %d in memory %d is gone", in.in.Buffer, in.in.Mem))
			}
			return nil
		}
		then = func() { j.apply(in, a, arr.st, arr.hdr.ElemSize) }
		return nil
	}}, nil
}

// claimArmedLocked finds the armed, unclaimed Recv (or Upload) that pages
// described by h from peer fill, with its allocation, and marks it claimed
// and running. It returns nil when no Recv is ready for them. The caller
// checks the pages' element size against the allocation's (elemMismatch).
func (j *job) claimArmedLocked(peer string, h *proto.PageHeader) (*instr, *alloc) {
	for _, in := range j.recvs {
		if in.state != stArmed || in.claimed || !matches(in, peer, h) {
			continue
		}
		a := j.allocs[allocKey{in.in.Buffer, in.in.Mem}]
		if a == nil || a.mem == nil {
			continue
		}
		in.claimed, in.state = true, stRunning
		j.running++
		return in, a
	}
	return nil, nil
}

func recvErr(from credentials.Identity, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("pages from %s did not arrive: %w", from, err)
}
