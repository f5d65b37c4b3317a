package cluster

import (
	"errors"
	"fmt"
	"strings"
	"time"
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
	// ErrGossipKey: a member answered a join, but its gossip could not be
	// decrypted with this member's keys, or one side encrypts and the other
	// does not: the two have different keys. Retrying does not help, so
	// Start's join (Config.JoinRetry) gives up at once. An AddrError of a
	// JoinError matches it.
	ErrGossipKey = errors.New("cluster: gossip keys differ")
)

// keyMismatch is memberlist's refusal of a state exchange whose other side
// has other keys, marked as ErrGossipKey. memberlist (v0.7) returns these
// as plain text (net.go readStream, security.go decryptPayload), so the
// text is what tells them apart; TestWrongGossipKeyCannotJoin_C6 checks the
// classification against the real memberlist.
type keyMismatch struct{ err error }

func (e keyMismatch) Error() string        { return e.err.Error() }
func (e keyMismatch) Unwrap() error        { return e.err }
func (e keyMismatch) Is(target error) bool { return target == ErrGossipKey }

// markKeyMismatch returns err marked as ErrGossipKey when it is one of
// memberlist's key refusals, else err.
func markKeyMismatch(err error) error {
	l := strings.ToLower(err.Error())
	for _, s := range []string{
		"no installed keys could decrypt the message",                // our keys cannot read the peer
		"remote state is encrypted and encryption is not configured", // we have no keys, the peer has
		"encryption is configured but remote state is not encrypted", // we have keys, the peer has none
	} {
		if strings.Contains(l, s) {
			return keyMismatch{err}
		}
	}
	return err
}

// ListenError is the failure to bind the gossip port (TCP and UDP), or to
// start gossip on it: usually another process has the port, or (Advertise)
// no address to advertise was found.
type ListenError struct {
	// Addr is the address and port asked for ("0.0.0.0:7946").
	Addr string
	// Advertise is set when the port was bound but memberlist could not
	// start, which usually means no private IP address to advertise.
	Advertise bool
	Err       error
}

func (e *ListenError) Error() string {
	if e.Advertise {
		return fmt.Sprintf("cluster: start gossip on %s: %v; set AdvertiseAddr if no private address was found", e.Addr, e.Err)
	}
	return fmt.Sprintf("cluster: listen for gossip on %s: %v; pick a free BindPort (0 picks one)", e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

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
		b.WriteString(", and that this node has the cluster's gossip key (another key: \"no installed keys could decrypt the message\") and cluster name (another name looks like a connection closed by the peer: EOF)")
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

// JoinTimeoutError: Start retried Config.Join for Config.JoinRetry and
// joined nobody. Err is the last round's error (a *JoinError, or the
// context's).
type JoinTimeoutError struct {
	Retry time.Duration
	Err   error
}

func (e *JoinTimeoutError) Error() string {
	return fmt.Sprintf("cluster: joined nobody within JoinRetry %v: %v", e.Retry, e.Err)
}

func (e *JoinTimeoutError) Unwrap() error { return e.Err }
