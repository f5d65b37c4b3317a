package cuda

import (
	"encoding/binary"
	"fmt"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
)

// execCopy starts a box copy on the owner thread. The copy runs on the GPU
// whose device memory it writes (or reads, for device-to-host); a task that
// arrived at another device is handed over.
func (d *Device) execCopy(t task, o device.CopyOp) error {
	sk, sbase, err := d.copySide(o.Src.Mem)
	if err != nil {
		return err
	}
	dk, dbase, err := d.copySide(o.Dst.Mem)
	if err != nil {
		return err
	}
	srcOwner, dstOwner := d.owner(o.Src.Mem), d.owner(o.Dst.Mem)
	exec := d
	switch {
	case dstOwner != nil:
		exec = dstOwner
	case srcOwner != nil:
		exec = srcOwner
	}
	if exec != d {
		exec.pushInternal(t)
		return nil
	}
	if sk == sideHost {
		d.pinFor(o.Src.Mem)
	}
	if dk == sideHost {
		d.pinFor(o.Dst.Mem)
	}
	s := d.stream(t.queue)
	p := planBox(sbase+uint64(o.Src.Offset), dbase+uint64(o.Dst.Offset), o.Src.Extent, o.Dst.Extent, o.Src.Origin, o.Dst.Origin, o.Size, o.ElemSize)
	if p.Dims == 0 {
		d.issued(s, completion{done: t.done})
		return nil
	}
	if srcOwner != nil && srcOwner != d {
		if d.peers[srcOwner.attrs.Ordinal] {
			if err := d.issuePeer(p, srcOwner, s); err != nil {
				return err
			}
			d.issued(s, completion{done: t.done})
			return nil
		}
		return d.staged(t, o, srcOwner, sbase, dbase, dk)
	}
	if err := d.issue(p, sk, dk, s); err != nil {
		return err
	}
	d.issued(s, completion{done: t.done})
	return nil
}

// memType is how a copy descriptor names a side.
func memType(k sideKind) driver.MemoryType {
	switch k {
	case sideHost:
		return driver.MemoryTypeHost
	case sideManaged:
		return driver.MemoryTypeUnified
	}
	return driver.MemoryTypeDevice
}

// issue puts one planned transfer on stream s: one driver call.
func (d *Device) issue(p copyPlan, sk, dk sideKind, s int) error {
	st := d.streams[s]
	if p.Dims == 1 {
		switch {
		case sk == sideHost && dk != sideHost:
			return d.lib.MemcpyHtoDAsync(driver.DevicePtr(p.Dst), uintptr(p.Src), p.Width, st)
		case sk != sideHost && dk == sideHost:
			return d.lib.MemcpyDtoHAsync(uintptr(p.Dst), driver.DevicePtr(p.Src), p.Width, st)
		case sk != sideHost && dk != sideHost:
			return d.lib.MemcpyDtoDAsync(driver.DevicePtr(p.Dst), driver.DevicePtr(p.Src), p.Width, st)
		}
		// host to host: a one-row 2D copy
		p.Dims, p.Height, p.SrcPitch, p.DstPitch = 2, 1, p.Width, p.Width
	}
	if p.Dims == 2 {
		c := driver.Memcpy2D{
			SrcMemoryType: memType(sk), SrcPitch: p.SrcPitch,
			DstMemoryType: memType(dk), DstPitch: p.DstPitch,
			WidthInBytes: p.Width, Height: p.Height,
		}
		if sk == sideHost {
			c.SrcHost = uintptr(p.Src)
		} else {
			c.SrcDevice = driver.DevicePtr(p.Src)
		}
		if dk == sideHost {
			c.DstHost = uintptr(p.Dst)
		} else {
			c.DstDevice = driver.DevicePtr(p.Dst)
		}
		return d.lib.Memcpy2DAsync(&c, st)
	}
	c := driver.Memcpy3D{
		SrcMemoryType: memType(sk), SrcPitch: p.SrcPitch, SrcHeight: p.SrcHeight,
		DstMemoryType: memType(dk), DstPitch: p.DstPitch, DstHeight: p.DstHeight,
		WidthInBytes: p.Width, Height: p.Height, Depth: p.Depth,
	}
	if sk == sideHost {
		c.SrcHost = uintptr(p.Src)
	} else {
		c.SrcDevice = driver.DevicePtr(p.Src)
	}
	if dk == sideHost {
		c.DstHost = uintptr(p.Dst)
	} else {
		c.DstDevice = driver.DevicePtr(p.Dst)
	}
	return d.lib.Memcpy3DAsync(&c, st)
}

// issuePeer copies from src's device memory into d's, peer to peer.
func (d *Device) issuePeer(p copyPlan, src *Device, s int) error {
	st := d.streams[s]
	if p.Dims == 1 {
		return d.lib.MemcpyPeerAsync(driver.DevicePtr(p.Dst), d.ctx, driver.DevicePtr(p.Src), src.ctx, p.Width, st)
	}
	c := driver.Memcpy3DPeer{
		SrcMemoryType: driver.MemoryTypeDevice, SrcDevice: driver.DevicePtr(p.Src), SrcContext: src.ctx,
		SrcPitch: p.SrcPitch, SrcHeight: p.SrcHeight,
		DstMemoryType: driver.MemoryTypeDevice, DstDevice: driver.DevicePtr(p.Dst), DstContext: d.ctx,
		DstPitch: p.DstPitch, DstHeight: p.DstHeight,
		WidthInBytes: p.Width, Height: p.Height, Depth: p.Depth,
	}
	if p.Dims == 2 {
		c.Depth, c.SrcHeight, c.DstHeight = 1, p.Height, p.Height
	}
	return d.lib.Memcpy3DPeerAsync(&c, st)
}

// staged copies a box from src's device memory into d's through a pinned
// host buffer: src's owner copies the box out (packed) and records an event;
// d's owner makes its stream wait for that event and copies the box in.
// Neither owner waits for the other.
func (d *Device) staged(t task, o device.CopyOp, src *Device, sbase, dbase uint64, dk sideKind) error {
	n := uint64(o.Bytes())
	buf, class, err := d.group.staging.get(d, n)
	if err != nil {
		return fmt.Errorf("%s: pinned staging buffer of %d bytes for a copy from %s: %w", d.info.ID, n, src.info.ID, err)
	}
	var zero [3]int
	out := planBox(sbase+uint64(o.Src.Offset), uint64(buf), o.Src.Extent, o.Size, o.Src.Origin, zero, o.Size, o.ElemSize)
	in := planBox(uint64(buf), dbase+uint64(o.Dst.Offset), o.Size, o.Dst.Extent, zero, o.Dst.Origin, o.Size, o.ElemSize)
	fail := func(err error) {
		d.group.staging.put(buf, class)
		if t.done != nil {
			t.done(d.asLost(err))
		}
	}
	src.pushInternal(task{queue: t.queue, done: fail, run: func(*Thread) {
		ss := src.stream(t.queue)
		if err := src.issue(out, sideDevice, sideHost, ss); err != nil {
			fail(err)
			return
		}
		ev, err := src.comp.event()
		if err == nil {
			err = src.lib.EventRecord(ev, src.streams[ss])
		}
		if err != nil {
			fail(err)
			return
		}
		d.pushInternal(task{queue: t.queue, done: fail, run: func(*Thread) {
			ds := d.stream(t.queue)
			err := d.lib.StreamWaitEvent(d.streams[ds], ev)
			if err == nil {
				err = d.issue(in, sideHost, dk, ds)
			}
			if err != nil {
				fail(err)
				src.comp.putEvent(ev)
				return
			}
			d.issued(ds, completion{done: t.done, release: func() {
				d.group.staging.put(buf, class)
				src.comp.putEvent(ev)
			}})
		}})
	}})
	return nil
}

// fillSeed is the most bytes of a fill pattern copied from the host before
// device-to-device copies double it (execFill).
const fillSeed = 1 << 20

// execFill starts a fill on the owner thread.
func (d *Device) execFill(t task, f device.FillOp) error {
	if owner := d.owner(f.Dst); owner != nil && owner != d {
		owner.pushInternal(t)
		return nil
	}
	sk, base, err := d.copySide(f.Dst)
	if err != nil {
		return err
	}
	s := d.stream(t.queue)
	if sk == sideHost || f.Bytes == 0 {
		// Host memory (pinned or another backend's): the host fills it.
		// Ops on one device are independent, so no stream order is owed.
		device.FillHost(f.Dst.Host, f)
		d.issued(s, completion{done: t.done})
		return nil
	}
	addr := driver.DevicePtr(base + uint64(f.Offset))
	pat, n, st := f.Pattern, uint64(f.Bytes), d.streams[s]
	uniform := true
	for _, b := range pat {
		uniform = uniform && b == pat[0]
	}
	switch {
	case uniform:
		err = d.lib.MemsetD8Async(addr, pat[0], n, st)
	case len(pat) == 4 && addr%4 == 0:
		err = d.lib.MemsetD32Async(addr, binary.LittleEndian.Uint32(pat), n/4, st)
	case len(pat) == 2 && addr%4 == 0 && n%4 == 0:
		err = d.lib.MemsetD32Async(addr, uint32(binary.LittleEndian.Uint16(pat))*0x10001, n/4, st)
	case len(pat) == 2 && addr%2 == 0:
		err = d.lib.MemsetD16Async(addr, binary.LittleEndian.Uint16(pat), n/2, st)
	case len(pat) == 8 && addr%4 == 0 && [4]byte(pat[:4]) == [4]byte(pat[4:]):
		err = d.lib.MemsetD32Async(addr, binary.LittleEndian.Uint32(pat), n/4, st)
	default:
		// Any other pattern (float64 values, 3-byte ones, unaligned
		// ones): a block of whole patterns from pinned memory, then
		// device-to-device copies that double the filled part until it
		// covers the region (log2(n/fillSeed) copies, about n bytes
		// moved on the device instead of n over the bus).
		seed := min(n, uint64(fillSeed-fillSeed%len(pat)))
		buf, class, gerr := d.group.staging.get(d, seed)
		if gerr != nil {
			return gerr
		}
		device.FillHost(hostSlice(buf, int(seed)), device.FillOp{Bytes: int(seed), Pattern: pat})
		if err := d.lib.MemcpyHtoDAsync(addr, buf, seed, st); err != nil {
			d.group.staging.put(buf, class)
			return err
		}
		var cerr error
		for done := seed; done < n; {
			c := min(done, n-done) // whole patterns: done and n are multiples of the pattern
			if cerr = d.lib.MemcpyDtoDAsync(addr+driver.DevicePtr(done), addr, c, st); cerr != nil {
				break
			}
			done += c
		}
		// The seed copy is in flight: the staging buffer goes back once
		// the stream reaches this point, also when a copy failed.
		d.issued(s, completion{done: func(e error) {
			if e == nil {
				e = cerr
			}
			t.done(d.asLost(e))
		}, release: func() { d.group.staging.put(buf, class) }})
		return nil
	}
	if err != nil {
		return err
	}
	d.issued(s, completion{done: t.done})
	return nil
}
