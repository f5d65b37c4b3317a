package nodecmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

// newDrain is `acpp-node drain`: ask running nodes to drain and leave, as
// SIGTERM does, from anywhere that reaches their QUIC address, with an
// operator's credentials (issue 15).
func newDrain(stdout io.Writer, getenv func(string) string) *cobra.Command {
	var dir, operator, reason string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "drain QUIC_ADDR...",
		Short: "ask running nodes to drain and leave: their jobs move the pages only they hold elsewhere, nothing is re-run",
		Long: `Ask each node (by its --quic-addr) to drain, as SIGTERM does: it takes no new
jobs, the jobs running on it hand over the pages only it holds to their other
nodes and release it, then it leaves the cluster and its acpp-node exits 0.
Needs an operator's credentials (acpp-node credentials operator NAME).`,
		Example: `  acpp-node drain --credentials /etc/acpp --client ops 10.0.0.7:7947`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, addrs []string) error {
			if dir == "" { // a script's "--credentials $D" with D unset: not the current directory
				return fmt.Errorf("--credentials is empty: give the directory with ca.crt and clients/NAME.crt/.key, or leave the flag out for its default, %q", "/etc/acpp")
			}
			if operator == "" {
				return fmt.Errorf("--client NAME (or ACPP_CLIENT) is required: an operator made with acpp-node credentials --dir DIR operator NAME")
			}
			if timeout <= 0 { // no node could answer in no time
				return fmt.Errorf("--timeout %v: want a positive duration like 10s (how long each node gets to answer)", timeout)
			}
			creds, err := credentials.LoadClient(dir, operator)
			if err != nil {
				return err
			}
			cl, err := nodeclient.Start(nodeclient.Config{Credentials: creds})
			if err != nil {
				return err
			}
			defer cl.Close()
			// Every address is asked, whatever happened to the ones before
			// (an operator draining a rack should not stop at its first
			// dead node); the command fails at the end if any was not.
			var failed []string
			for _, addr := range addrs {
				r, err := drainOne(cmd.Context(), cl, addr, reason, timeout)
				if err != nil {
					failed = append(failed, addr)
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", addr, err)
					continue
				}
				fmt.Fprintln(stdout, drainLine(r, addr))
			}
			if len(failed) > 0 {
				return fmt.Errorf("%d of %d nodes were not asked to drain: %s (see above)", len(failed), len(addrs), strings.Join(failed, ", "))
			}
			return nil
		},
	}
	creds := getenv("ACPP_CREDENTIALS")
	if creds == "" {
		creds = "/etc/acpp"
	}
	f := cmd.Flags()
	f.StringVar(&dir, "credentials", creds, "directory with ca.crt and clients/NAME.crt/.key (env ACPP_CREDENTIALS)")
	f.StringVar(&operator, "client", getenv("ACPP_CLIENT"), "operator name of the credentials (env ACPP_CLIENT)")
	f.StringVar(&reason, "reason", "", "why, for the node's log")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "per node: how long to wait for its answer")
	return cmd
}

// drainLine is what acpp-node drain prints for a node that answered, its
// counts agreeing with their nouns ("1 job open hands over its pages").
func drainLine(r *proto.NodeDraining, addr string) string {
	jobs := fmt.Sprintf("%d jobs open", r.Jobs)
	if r.Jobs == 1 {
		jobs = "1 job open"
	}
	switch {
	case r.Already:
		return fmt.Sprintf("node %s is already draining (%s; %s)", r.Node, jobs, addr)
	case r.Jobs == 0:
		return fmt.Sprintf("node %s drains: no job open, it leaves (%s)", r.Node, addr)
	case r.Jobs == 1:
		return fmt.Sprintf("node %s drains: 1 job open hands over its pages, then it leaves (%s)", r.Node, addr)
	}
	return fmt.Sprintf("node %s drains: %s hand over their pages, then it leaves (%s)", r.Node, jobs, addr)
}

// drainOne asks the node at addr to drain, within timeout.
func drainOne(ctx context.Context, cl *nodeclient.Client, addr, reason string, timeout time.Duration) (*proto.NodeDraining, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	name, err := cl.Connect(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("connect: %w; is acpp-node running there, and are these the cluster's credentials?", err)
	}
	r, err := cl.Drain(ctx, name, reason)
	if err != nil {
		return nil, fmt.Errorf("drain %s: %w", name, err)
	}
	return r, nil
}
