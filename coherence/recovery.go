package coherence

// Recovery planning (C5, issue 15). When a node is lost, a job that keeps
// a checkpoint (a consistent copy of every buffer at one point of the
// submission order) and a log of the command groups since can rebuild
// what only the lost node held: restore the checkpoint and run the log
// again. PlanRecovery decides whether that is needed and which logged
// groups to run again; it is pure, like the rest of the core, so the
// scripts in testdata/*.rec pin its decisions.

// LoggedGroup is a command group of a job's log as a recovery sees it:
// its accesses (Buffer, Pages, Mode, Discard; Target is ignored, the
// replay places the group again) and whether it completed.
type LoggedGroup struct {
	ID       CGID
	Accesses []Access
	// Done: the group completed and the program was told. A group not done
	// is always run again: the program waits for it.
	Done bool
}

// RecoveryAction is what a job does after losing a node.
type RecoveryAction uint8

const (
	// RecoverContinue: every page the node held has another valid copy
	// and nothing was running there; the job goes on without it.
	RecoverContinue RecoveryAction = iota
	// RecoverReplay: restore the checkpoint, run Rerun again.
	RecoverReplay
	// RecoverFail: no node is left to run on.
	RecoverFail
)

func (a RecoveryAction) String() string {
	switch a {
	case RecoverContinue:
		return "continue"
	case RecoverReplay:
		return "replay"
	case RecoverFail:
		return "fail"
	}
	return "unknown"
}

// RecoveryInput is what is known when a node is lost.
type RecoveryInput struct {
	// Lost are the pages with no valid copy left (LoseNode), including
	// pages that were in transit from the lost node.
	Lost []LostPages
	// InFlight are groups that had work on the lost node (a launch, or a
	// transfer from it) and will not complete.
	InFlight []CGID
	// Log holds the groups since the checkpoint, in submission order.
	Log []LoggedGroup
	// NodesLeft is the number of nodes the job can still run on (zero or
	// less: none, RecoverFail).
	NodesLeft int
}

// RecoveryPlan is PlanRecovery's answer.
type RecoveryPlan struct {
	Action RecoveryAction
	// Rerun are the logged groups to run again, in order; Skipped the
	// completed ones whose every write is overwritten, unread, by a later
	// group (their results are dead).
	Rerun, Skipped []CGID
}

// PlanRecovery decides how a job recovers from the loss in in.
func PlanRecovery(in RecoveryInput) RecoveryPlan {
	lost := false
	for _, l := range in.Lost {
		if len(l.Boxes) > 0 {
			lost = true
		}
	}
	if !lost && len(in.InFlight) == 0 {
		return RecoveryPlan{Action: RecoverContinue}
	}
	if in.NodesLeft <= 0 {
		return RecoveryPlan{Action: RecoverFail}
	}
	p := RecoveryPlan{Action: RecoverReplay}
	for i, keep := range PlanReplay(in.Log) {
		if keep {
			p.Rerun = append(p.Rerun, in.Log[i].ID)
		} else {
			p.Skipped = append(p.Skipped, in.Log[i].ID)
		}
	}
	return p
}

// PlanReplay says, for each group of log, whether a replay from the
// checkpoint the log starts at runs it again. Every buffer is restored
// to the checkpoint, so every page's final value is needed; a completed
// group is skipped only when every page it writes is overwritten by a
// later Discard write before anything reads it (backward liveness over
// the log: the lineage of the final state, through overwritten inputs).
// Groups not done always run.
func PlanReplay(log []LoggedGroup) []bool {
	keep := make([]bool, len(log))
	dead := map[BufferID][]Box{} // pages whose value at this point no later group reads
	for i := len(log) - 1; i >= 0; i-- {
		g := log[i]
		need := !g.Done
		for _, a := range g.Accesses {
			if a.Mode != Read && len(subtractAll(a.Pages, dead[a.Buffer])) > 0 {
				need = true
			}
		}
		if !need {
			continue // its writes are dead, its reads do not matter
		}
		keep[i] = true
		for _, a := range g.Accesses {
			if a.Mode == Write && a.Discard {
				dead[a.Buffer] = append(dead[a.Buffer], a.Pages)
			}
		}
		for _, a := range g.Accesses {
			if a.Mode != Write || !a.Discard {
				// Read, read-write, reduce, and writes that keep what they
				// do not overwrite: the value before g is needed.
				var next []Box
				for _, d := range dead[a.Buffer] {
					next = append(next, d.Minus(a.Pages)...)
				}
				dead[a.Buffer] = next
			}
		}
	}
	return keep
}

// subtractAll is b minus every box of holes.
func subtractAll(b Box, holes []Box) []Box {
	out := []Box{b}
	for _, h := range holes {
		var next []Box
		for _, x := range out {
			next = append(next, x.Minus(h)...)
		}
		out = next
		if len(out) == 0 {
			break
		}
	}
	return out
}
