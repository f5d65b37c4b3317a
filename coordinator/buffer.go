package coordinator

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/proto"
)

// BufferSpec describes a buffer of a job.
type BufferSpec struct {
	// Name is used in errors and reports; empty means "buffer <id>".
	Name string
	// Range is the extent in elements, dimension 2 fastest (required, every
	// component ≥ 1).
	Range Dims
	// ElemSize is the element size in bytes (required).
	ElemSize int
	// PageSize is the page size per dimension (P1); zero means
	// coherence.DefaultPageSize.
	PageSize Dims
	// Init, when set, is the initial contents (Range × ElemSize bytes,
	// row-major). The client keeps a copy (its host allocation) and uploads
	// each page once, to where it is first needed. Nil means uninitialised:
	// nothing is transferred until a group writes it (T2).
	Init []byte
}

// Buffer is a buffer of a job. Its pages live on the nodes; the client
// holds the host image that Init filled and host reads bring up to date.
type Buffer struct {
	id   coherence.BufferID
	name string
	geo  coherence.Geometry
	// host is the client's allocation (nil until it exists). Bytes of a
	// page are written only by a read back of that page while it is
	// outdated on the client, and read only while it is up to date there.
	host []byte
	// allocs holds the alloc instruction issued for each of the buffer's
	// allocations on the nodes (guarded by Job.mu): later groups that list
	// the allocation wait for that instruction instead of issuing another.
	allocs map[coherence.AllocID]uint64
}

// String names the buffer.
func (b *Buffer) String() string {
	if b == nil {
		return "nil buffer" // in an error about a group that names none
	}
	if b.name != "" {
		return fmt.Sprintf("buffer %q", b.name)
	}
	return fmt.Sprintf("buffer %d", b.id)
}

// Geometry is the buffer's page geometry (the zero Geometry for a nil
// buffer).
func (b *Buffer) Geometry() coherence.Geometry {
	if b == nil {
		return coherence.Geometry{}
	}
	return b.geo
}

// pageRange maps an element region to pages; a zero rng means from off to
// the end of the buffer.
func (b *Buffer) pageRange(off, rng Dims) (coherence.Box, error) {
	if rng == (Dims{}) {
		rng = sub(b.geo.Range, off)
	}
	p, err := b.geo.PageRange(off, rng)
	if err != nil {
		return coherence.Box{}, fmt.Errorf("%w: %s: %w", ErrInvalid, b, err)
	}
	return p, nil
}

// NewBuffer adds a buffer to the job.
func (j *Job) NewBuffer(spec BufferSpec) (*Buffer, error) {
	geo, err := coherence.NewGeometry(spec.Range, spec.ElemSize, spec.PageSize)
	if err != nil {
		return nil, fmt.Errorf("%w: buffer %q: %w", ErrInvalid, spec.Name, err)
	}
	if spec.Init != nil && len(spec.Init) != geo.Bytes() {
		return nil, fmt.Errorf("%w: buffer %q: Init has %d bytes, the range %v × %d-byte elements needs %d", ErrInvalid, spec.Name, len(spec.Init), spec.Range, spec.ElemSize, geo.Bytes())
	}
	for {
		if err := j.waitRecovered(context.Background()); err != nil {
			return nil, err
		}
		j.mu.Lock()
		if j.res.recovering == nil {
			break
		}
		j.mu.Unlock()
	}
	defer j.mu.Unlock()
	if j.err != nil {
		return nil, j.err
	}
	b := &Buffer{id: j.nextBuf, name: spec.Name, geo: geo}
	bs := coherence.BufferSpec{ID: b.id, Geometry: geo}
	if spec.Init != nil {
		b.host = append([]byte(nil), spec.Init...)
		a := clientAlloc
		bs.HostData = &a
	}
	if err := j.core.AddBuffer(bs); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	j.nextBuf++
	j.bufs[b.id] = b
	if j.res.on {
		j.res.appendLocked(logOp{kind: opNewBuffer, buf: b, data: slices.Clone(spec.Init)})
	}
	return b, nil
}

// Release frees a buffer on every node and in the client, once every
// command group submitted before the call has finished (B1: allocations
// live until the buffer is released). Later use of b is refused.
func (j *Job) Release(ctx context.Context, b *Buffer) error {
	for {
		if err := j.waitRecovered(ctx); err != nil {
			return err
		}
		if err := j.releaseOnce(ctx, b, false); err != errEpochChanged {
			return err
		}
	}
}

// releaseOnce releases b in the current epoch (replay: a recovery's
// replay of a logged release).
func (j *Job) releaseOnce(ctx context.Context, b *Buffer, replay bool) error {
	j.mu.Lock()
	if j.err != nil {
		j.mu.Unlock()
		return j.err
	}
	if b == nil || j.bufs[b.id] != b {
		j.mu.Unlock()
		return fmt.Errorf("%w: Release of a buffer that is not a buffer of this job (or was released)", ErrInvalid)
	}
	var ids []GroupID
	for id := range j.live {
		ids = append(ids, id)
	}
	ep := j.ep
	j.mu.Unlock()
	if err := j.waitGroups(ctx, ep, ids); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return j.err
	}
	if ep != j.ep || (!replay && j.res.recovering != nil) {
		return errEpochChanged
	}
	if j.bufs[b.id] != b {
		return fmt.Errorf("%w: %s was released concurrently", ErrInvalid, b)
	}
	allocs, err := j.core.RemoveBuffer(b.id)
	if err != nil {
		return fmt.Errorf("coordinator: release %s: %w", b, err)
	}
	delete(j.bufs, b.id)
	delete(j.lineage, b.id)
	if !replay {
		j.res.appendLocked(logOp{kind: opRelease, buf: b})
	}
	gs := &groupState{id: j.nextCG, kernel: "release", dev: -1, host: true, submitted: time.Now()}
	j.nextCG++
	bd := &builder{j: j, g: gs, entries: map[coherence.NodeID]*entry{}}
	for _, a := range allocs {
		delete(j.ep.hazards, allocRef{b.id, a.Alloc})
		if a.Alloc.Node == ClientNode || j.nodes[a.Alloc.Node-1].lost {
			continue
		}
		bd.add(j.nodes[a.Alloc.Node-1], proto.Instr{Kind: proto.InstrFree, Buffer: uint64(b.id), Mem: uint32(a.Alloc.Mem)})
	}
	b.host = nil
	if gs.pending > 0 {
		j.stats.Groups++
		j.live[gs.id] = gs
		j.enqueueLocked(bd)
	}
	return nil
}
