package node

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// closedTransport is a transport that was started and closed again: every
// send through it fails with transport.ErrClosed, as on a node shutting
// down. One serves every offline node of the process.
var closedTransport = sync.OnceValues(func() (*transport.Transport, error) {
	ca, err := credentials.NewCA(credentials.CAConfig{Cluster: "fuzz"})
	if err != nil {
		return nil, err
	}
	is, err := ca.Issue(proto.RoleNode, "fuzz", credentials.IssueConfig{})
	if err != nil {
		return nil, err
	}
	cred, err := credentials.New(is.CertPEM, is.KeyPEM, ca.CertPEM())
	if err != nil {
		return nil, err
	}
	tr, err := transport.Start(transport.Config{Credentials: cred, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	return tr, tr.Close()
})

// offlineNode is a node with devices and metrics but no network: enough to
// run the executor. Its sends (Send, ReadBack) fail as on a closed node.
func offlineNode(t testing.TB) *Node {
	n := &Node{cfg: Config{Name: "fuzz", MaxBytes: 1 << 20}.withDefaults(), jobs: map[uint64]*job{}}
	n.log = slog.New(slog.DiscardHandler)
	n.ctx, n.cancel = context.WithCancelCause(context.Background())
	var err error
	if n.devs, err = openDevices(context.Background(), Config{CPUWorkers: 1}); err != nil {
		t.Fatal(err)
	}
	n.met = newMetrics(n.clp.Load)
	if n.tr, err = closedTransport(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.cancel(ErrClosed)
		n.wg.Wait()
		n.devs.close()
	})
	return n
}

// batchFrom turns fuzz bytes into instructions: 12 bytes each, small IDs,
// buffers, memories and boxes so that they often refer to each other.
func batchFrom(data []byte) []proto.Instr {
	var out []proto.Instr
	for len(data) >= 12 && len(out) < 64 {
		b := data[:12]
		data = data[12:]
		in := proto.Instr{
			ID:       uint64(b[0]%32) + 1,
			Kind:     proto.InstrKind(b[1] % 11),
			Buffer:   uint64(b[2] % 3),
			Mem:      uint32(b[3] % 3),
			DstMem:   uint32(b[4] % 2),
			Range:    [3]uint64{1, uint64(b[5]%4) + 1, uint64(b[6]%64) + 1},
			ElemSize: uint32(b[7] % 9),
			Peer:     []string{"", "client", "fuzz", "gone"}[b[8]%4],
			Pattern:  []byte{b[9]}[:b[9]%2],
		}
		if b[10]%4 != 0 {
			in.Deps = []uint64{uint64(b[10]%32) + 1}
		}
		lo := uint64(b[11] % 8)
		in.Boxes = []proto.Box{{Lo: [3]uint64{0, 0, lo}, Hi: [3]uint64{1, 1, lo + uint64(b[11]%5)}}}
		out = append(out, in)
	}
	return out
}

// FuzzSubmit submits arbitrary batches to a job: the batch is accepted or
// refused, every accepted instruction finishes or waits for pages, nothing
// hangs or panics, and closing the job returns every byte.
func FuzzSubmit(f *testing.F) {
	f.Add([]byte("\x00\x01\x01\x00\x00\x01\x10\x04\x00\x00\x00\x00" + "\x01\x09\x01\x00\x00\x01\x10\x04\x00\x01\x01\x02"))
	f.Add([]byte("\x00\x01\x01\x00\x00\x01\x10\x04\x00\x00\x00\x00" + "\x01\x04\x01\x00\x00\x01\x10\x04\x03\x00\x01\x02" + "\x02\x05\x01\x00\x00\x01\x10\x04\x03\x00\x01\x02"))
	f.Add([]byte("\x00\x01\x01\x01\x00\x03\x10\x04\x00\x00\x00\x00" + "\x01\x03\x01\x00\x01\x01\x10\x04\x00\x00\x01\x03" + "\x02\x02\x01\x00\x00\x01\x10\x04\x00\x00\x01\x00"))
	f.Add([]byte("\x00\x07\x01\x00\x00\x01\x10\x04\x00\x00\x00\x00" + "\x01\x08\x01\x00\x00\x01\x10\x04\x00\x00\x01\x07"))
	f.Add(make([]byte, 12*40))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := offlineNode(t)
		j := newJob(n, 1, credentials.Client("alice"), time.Minute, 512<<10)
		n.jobs[1] = j
		batch := batchFrom(data)
		_, err := j.submit(batch, 0)
		if err != nil {
			var re *proto.ErrorReply
			if !asReply(err, &re) || re.Code != proto.CodeBadInstr {
				t.Fatalf("submit refused with %v, want a CodeBadInstr reply", err)
			}
		}
		waitNotRunning(t, j, batch)
		closeJobFreesAll(t, n, j)
	})
}

// closeJobFreesAll closes j on n and fails t unless nothing of it is left:
// no pending instruction, no byte held by the job or the node.
func closeJobFreesAll(t *testing.T, n *Node, j *job) {
	t.Helper()
	n.closeJob(j, errJobClosed)
	j.mu.Lock()
	pending, bytes := j.pending, j.bytes
	j.mu.Unlock()
	if pending != 0 || bytes != 0 || n.allocated.Load() != 0 {
		t.Fatalf("after close: %d pending, job holds %d bytes, node %d; want 0", pending, bytes, n.allocated.Load())
	}
}

func asReply(err error, re **proto.ErrorReply) bool {
	r, ok := err.(*proto.ErrorReply)
	*re = r
	return ok
}

// waitNotRunning waits until none of j's instructions runs, failing the
// test with what (the input) after 5 s.
func waitNotRunning(t *testing.T, j *job, what any) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		j.mu.Lock()
		running := j.running
		j.mu.Unlock()
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("instructions still running after 5 s: %+v", what)
		}
		time.Sleep(time.Millisecond)
	}
}
