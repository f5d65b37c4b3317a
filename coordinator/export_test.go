package coordinator

import "github.com/acpp/acpp/proto"

// SetTestHookPlanned sets the hook that runs between planning a Submit's
// chunks and submitting them (nil: none).
func SetTestHookPlanned(f func()) { testHookPlanned = f }

// NodeBootsForTest is the boot ID the job recorded for each of its nodes
// (what Send and Recv instructions name as PeerBoot).
func (j *Job) NodeBootsForTest() map[string]uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string]uint64{}
	for _, ns := range j.nodes {
		out[ns.name] = ns.boot()
	}
	return out
}

// SetTestHookReopened sets the hook that runs in a recovery once the job
// was opened again on the survivors (nil: none).
func SetTestHookReopened(f func()) { testHookReopened = f }

// ApplyMembersForTest acts on ms as if a node of the job had answered
// the membership watch with it.
func (j *Job) ApplyMembersForTest(ms *proto.Members) { j.applyMembers(j.ctx, ms) }

// SetTestHookDiscovered sets the hook that runs in Open once the one
// address given listed the members (nil: none).
func SetTestHookDiscovered(f func()) { testHookDiscovered = f }
