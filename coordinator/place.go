package coordinator

import "time"

// candidate is one device considered for a command group by PlaceAuto.
type candidate struct {
	dev int // index into Job.devices
	// netBytes and localBytes are the bytes the group's accessors lack on
	// the device, to come from another node or from another memory of the
	// same node (the client counts as another node).
	netBytes, localBytes int
	// queue is the estimated work already queued on the device (seconds),
	// kernel the estimate of this group's kernel there (0 when unknown).
	queue, kernel float64
	// haveBytes are the bytes of the group's accessors already valid
	// there (a tie-break towards the data).
	haveBytes int
	// pending is the number of unfinished groups placed there (the last
	// tie-break: spreads work while no kernel duration is known yet).
	pending int
}

// finish is the estimated time until the group would be done on c: the
// transfers (peer to peer, so they overlap the queue only partly; we take
// the sum, as dmda does with its data penalty), the device's queue and the
// kernel.
func (c candidate) finish(netBW, localBW float64) float64 {
	return float64(c.netBytes)/netBW + float64(c.localBytes)/localBW + c.queue + c.kernel
}

// localityMargin is how much sooner (seconds; or a tenth of the finish
// time, if more) a group must be estimated to finish elsewhere to be
// placed away from the device that holds most of its data. The queue and
// kernel estimates are noisy at this scale, and a page written away from
// its neighbours goes back for the next group that reads them, which the
// estimate does not see: a one-row fill of a split grid's edge went to a
// neighbour's device now and then, and the row crossed twice.
const localityMargin = 100e-6

// chooseAuto returns the index in cands with the earliest estimated
// finish; ties go to more data already there, then to fewer unfinished
// groups, then to the earlier candidate. The candidate that holds most of
// the group's data wins unless another finishes more than localityMargin
// sooner. It is pure and deterministic.
func chooseAuto(cands []candidate, netBW, localBW float64) int {
	best, home := -1, -1
	var bestT float64
	for i, c := range cands {
		t := c.finish(netBW, localBW)
		switch {
		case best < 0, t < bestT*(1-1e-9):
			best, bestT = i, t
		case t <= bestT*(1+1e-9) && (c.haveBytes > cands[best].haveBytes ||
			c.haveBytes == cands[best].haveBytes && c.pending < cands[best].pending):
			best, bestT = i, t
		}
		if c.haveBytes > 0 && (home < 0 || c.haveBytes > cands[home].haveBytes) {
			home = i
		}
	}
	if home >= 0 && home != best && cands[home].haveBytes > cands[best].haveBytes &&
		cands[home].finish(netBW, localBW) <= bestT+max(localityMargin, bestT/10) {
		return home
	}
	return best
}

// estimator learns kernel durations per (kernel, device), as seconds per
// work item, with an exponentially weighted moving average (StarPU's
// history-based performance models, simplified). Guarded by Job.mu.
type estimator struct {
	perItem map[estKey]float64
	// kindItem falls back to the average over devices of the same kind.
	kindItem map[estKey]float64
}

type estKey struct{ kernel, dev string }

const estAlpha = 0.3

func (e *estimator) estimate(kernel string, d Device, items int) float64 {
	if v, ok := e.perItem[estKey{kernel, d.String()}]; ok {
		return v * float64(items)
	}
	if v, ok := e.kindItem[estKey{kernel, d.Kind}]; ok {
		return v * float64(items)
	}
	return 0
}

func (e *estimator) observe(kernel string, d Device, items int, dur time.Duration) {
	if items <= 0 || dur <= 0 {
		return
	}
	if e.perItem == nil {
		e.perItem, e.kindItem = map[estKey]float64{}, map[estKey]float64{}
	}
	v := dur.Seconds() / float64(items)
	for _, k := range []estKey{{kernel, d.String()}, {kernel, d.Kind}} {
		m := e.perItem
		if k.dev == d.Kind {
			m = e.kindItem
		}
		if old, ok := m[k]; ok {
			m[k] = old + estAlpha*(v-old)
		} else {
			m[k] = v
		}
	}
}
