package nodeclient

import (
	"context"
	"fmt"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// RegisterKernels ships kernels to the job's node (MsgJobKernels), which
// registers them for this job only: its launches may name them, no other
// job sees them, and they go when the job closes. Kernels are sent in as
// few requests as the bounds allow (proto.MaxKernelsPerRequest kernels and
// proto.MaxKernelModule bytes of modules each); each request is registered
// whole or not at all, so after an error some earlier requests' kernels
// may be registered (sending them again is harmless). A request that
// breaks the bounds (a module over the limit, a bad name) is refused here,
// before anything is sent, with an error wrapping proto.ErrMalformed; the
// node's refusals (a name its registry has, a module without the entry)
// come back as *transport.RemoteError. It returns the node's last reply.
func (j *Job) RegisterKernels(ctx context.Context, ks ...proto.KernelSpec) (*proto.JobKernelsRegistered, error) {
	var out proto.JobKernelsRegistered
	for len(ks) > 0 {
		n, bytes := 0, 0
		for n < len(ks) && n < proto.MaxKernelsPerRequest && (n == 0 || bytes+len(ks[n].Module()) <= proto.MaxKernelModule) {
			bytes += len(ks[n].Module())
			n++
		}
		req := &proto.JobKernels{Job: j.id, Kernels: ks[:n]}
		if err := req.Validate(); err != nil {
			return nil, fmt.Errorf("nodeclient: kernels for job %d on node %s: %w", j.id, j.node, err)
		}
		if err := j.c.tr.Call(ctx, credentials.Node(j.node), proto.MsgJobKernels, req, &out); err != nil {
			return nil, err
		}
		ks = ks[n:]
	}
	return &out, nil
}
