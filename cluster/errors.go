package cluster

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalidConfig: Config.Validate found bad fields; the message names
	// each with its bound.
	ErrInvalidConfig = errors.New("cluster: invalid config")
	// ErrClosed: the Cluster was closed; Start a new one.
	ErrClosed = errors.New("cluster: closed")
	// ErrLeft: this member has left the cluster (Leave); it can no longer
	// join or update its metadata. Close it and Start a new one to rejoin.
	ErrLeft = errors.New("cluster: member has left the cluster")
	// ErrJoin: none, or not all, of the addresses given to Join could be
	// joined; the error is a *JoinError that lists them.
	ErrJoin = errors.New("cluster: join failed")
	// ErrEncryptionDisabled: a key operation on a member started with
	// InsecureNoEncryption; encryption cannot be turned on at run time.
	ErrEncryptionDisabled = errors.New("cluster: gossip encryption is disabled (InsecureNoEncryption); restart with GossipKeys")
	// ErrKey: a key operation was refused (bad length, unknown key, removing
	// the primary key); the message says which.
	ErrKey = errors.New("cluster: gossip key operation refused")
)

// AddrError is the failure to join one address.
type AddrError struct {
	Addr string
	Err  error
}

func (e AddrError) Error() string { return e.Addr + ": " + e.Err.Error() }

// JoinError lists the addresses that Join could not join. Joined says how
// many could: a JoinError with Joined > 0 means this member is in the
// cluster, but some addresses named are wrong or down.
type JoinError struct {
	Joined int
	Failed []AddrError
	// Encrypted records whether this member encrypts gossip, to word the
	// hint.
	Encrypted bool
}

func (e *JoinError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cluster: could not join %d of %d addresses", len(e.Failed), len(e.Failed)+e.Joined)
	for i, f := range e.Failed {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(f.Error())
	}
	b.WriteString(". Check that each address is host:port of a running acpp-node's gossip port, reachable over TCP and UDP")
	if e.Encrypted {
		b.WriteString(", and that this node has the cluster's gossip key and cluster name (a wrong key looks like a connection closed by the peer)")
	} else {
		b.WriteString(", that the cluster does not require gossip encryption (this node runs without keys), and that the cluster names match")
	}
	return b.String()
}

// Unwrap lets errors.Is match ErrJoin and each address's cause.
func (e *JoinError) Unwrap() []error {
	errs := make([]error, 0, len(e.Failed)+1)
	errs = append(errs, ErrJoin)
	for _, f := range e.Failed {
		errs = append(errs, f.Err)
	}
	return errs
}
