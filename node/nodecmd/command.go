// Package nodecmd is acpp-node as a library: its command line (run,
// credentials), settings from flags, ACPP_* variables and a config file,
// and the agent's life until SIGTERM. cmd/acpp-node is Main and nothing
// else; a team builds its own node the same way, with its kernels
// registered before Main (examples/custom-node):
//
//	func main() {
//		device.MustRegister(myKernel) // Go, PTX and/or CUDA C
//		nodecmd.Main()
//	}
//
// The node advertises every kernel of device.Kernels to the cluster, runs
// a Go kernel on its CPU devices over its own allocations, and the
// coordinator places a group only on nodes that have its kernel.
// docs/OPERATIONS.md is the operator's guide.
package nodecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/acpp/acpp/credentials"
	_ "github.com/acpp/acpp/cuda" // registers the CUDA backend: GPUs are found when a driver is present
	"github.com/acpp/acpp/cuda/nvrtc"
	"github.com/acpp/acpp/internal/fileread"
	"github.com/acpp/acpp/kernels"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/proto"
)

// Main runs the acpp-node command line with the process's arguments and
// environment, and exits with 1 (after printing the error) when it fails.
func Main() {
	if err := Command(os.Stdout, os.LookupEnv).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "acpp-node:", err)
		os.Exit(1)
	}
}

// Command is the acpp-node command (run, credentials, drain) writing to
// stdout and reading the environment through lookupEnv (os.LookupEnv: a
// variable set to "" is told from an unset one); set its arguments with
// SetArgs to run it in a test.
func Command(stdout io.Writer, lookupEnv func(string) (string, bool)) *cobra.Command {
	getenv := func(k string) string { v, _ := lookupEnv(k); return v }
	root := &cobra.Command{
		Use:           "acpp-node",
		Short:         "acpp cluster agent: runs jobs' instructions on this machine's devices",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.AddCommand(newRun(lookupEnv), newCredentials(stdout), newDrain(stdout, getenv), newNVRTCWorker())
	return root
}

// nvrtcWorker is the hidden command a node runs each compilation of a
// job's CUDA C in (nvrtc.Worker): NVRTC runs inside whatever process calls
// it, and a source that crashed it, or made it run or grow without bound,
// would otherwise take the node down with it.
const nvrtcWorker = "nvrtc-worker"

func newNVRTCWorker() *cobra.Command {
	return &cobra.Command{
		Use:    nvrtcWorker,
		Short:  "compile one CUDA C program for the node that started this process (not for use by hand)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return nvrtc.ServeWorker(cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

// compileInWorkers makes the process's NVRTC compilations (the CUDA
// backend's) run in this executable's nvrtc-worker command, beside run.
func compileInWorkers(log *slog.Logger, run *cobra.Command) {
	exe, err := os.Executable()
	if err == nil {
		err = nvrtc.Default.UseWorker(nvrtc.Worker{Command: workerCommand(exe, run)})
	}
	if err != nil {
		log.Warn("jobs' CUDA C will compile inside the node process: its own executable cannot be started as a compiler worker", "error", err)
	}
}

// workerCommand is the command line that reaches the nvrtc-worker
// command beside run in executable exe: "exe nvrtc-worker" for acpp-node,
// "exe node nvrtc-worker" for a program that embeds Command as its "node"
// subcommand.
func workerCommand(exe string, run *cobra.Command) []string {
	args := []string{exe}
	if run.HasParent() {
		args = append(args, strings.Fields(run.Parent().CommandPath())[1:]...)
	}
	return append(args, nvrtcWorker)
}

func newRun(lookupEnv func(string) (string, bool)) *cobra.Command {
	var flags settings
	var configFile string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "run the agent until SIGTERM or SIGINT, then drain and leave the cluster",
		Long: `Run the agent. Every setting comes from its flag, else its ACPP_* environment
variable, else the YAML file given with --config (keys are the flag names with
_ for -), else its default. See docs/OPERATIONS.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The flag wins over the variable, also given empty: --config ""
			// is no file, as ACPP_CONFIG= is (it read ACPP_CONFIG's file).
			if !cmd.Flags().Changed("config") {
				configFile, _ = lookupEnv("ACPP_CONFIG")
			}
			var file []byte
			if configFile != "" {
				var err error
				if file, err = readConfigFile(configFile); err != nil {
					return err
				}
			}
			s, err := resolve(cmd.Flags(), &flags, file, lookupEnv)
			if err != nil {
				return err
			}
			log, err := newLogger(os.Stderr, s.LogLevel, s.LogFormat)
			if err != nil {
				return err
			}
			slog.SetDefault(log)                       // backends that log without a logger of their own (cuda) follow the format
			if err := kernels.Register(); err != nil { // the built-in kernel library (Go and PTX)
				return err
			}
			cfg, err := s.nodeConfig(log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			// SIGHUP reloads the gossip key file (key rotation, docs/CLUSTER.md).
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			reload := make(chan struct{})
			go func() { // forwards SIGHUP to the node until ctx ends
				for {
					select {
					case <-hup:
						select {
						case reload <- struct{}{}:
						case <-ctx.Done():
							return
						}
					case <-ctx.Done():
						return
					}
				}
			}()
			cfg.ReloadKeys = reload
			compileInWorkers(log, cmd)
			if err := node.Run(ctx, cfg); err != nil {
				return err
			}
			log.Info("stopped cleanly")
			return nil
		},
	}
	addFlags(cmd.Flags(), &flags)
	cmd.Flags().StringVar(&configFile, "config", "", "YAML config file [ACPP_CONFIG]")
	return cmd
}

func newCredentials(stdout io.Writer) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "credentials",
		Short: "create the cluster CA, node, client and operator certificates and the gossip key",
		Long: `Create the cluster's secrets in a directory (default ./acpp-credentials):
  acpp-node credentials init --cluster lab     CA (ca.crt, ca.key) and gossip.key
  acpp-node credentials node n1 n2 n3          nodes/<name>.crt and .key
  acpp-node credentials client alice           clients/<name>.crt and .key
  acpp-node credentials operator ops           clients/<name>.crt and .key, operator role
A client sees only its own jobs in acpp-submit status; an operator is a client
that sees every client's jobs (and runs jobs as a client does). Both are used
with acpp-submit --client NAME. Copy ca.crt, gossip.key and a node's pair to
each node; keep ca.key off the nodes. Existing files are never overwritten.`,
		// A word that is no subcommand (a typo: "nodes n1") is an error,
		// not the help with exit 0: a script must not go on as if the
		// certificates were issued.
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q: use init, node, client or operator (see %s --help)", args[0], c.CommandPath(), c.CommandPath())
			}
			return c.Help()
		},
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", "acpp-credentials", "credentials directory")
	// --dir "" (a script's "--dir $D" with D unset) failed init with
	// "mkdir : no such file or directory", and made node, client and
	// operator use the current directory.
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if dir == "" {
			return fmt.Errorf("--dir is empty: give the credentials directory, or leave the flag out for its default, %q (see %s --help)", "acpp-credentials", c.CommandPath())
		}
		return nil
	}
	var cluster string
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "create the cluster CA and the gossip key",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			ca, err := credentials.CreateCA(dir, credentials.CAConfig{Cluster: cluster})
			if err != nil {
				return err
			}
			if _, err := credentials.CreateGossipKey(dir); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "created CA of cluster %q and gossip key in %s (valid until %s)\n", ca.Cluster, dir, ca.Cert.NotAfter.Format("2006-01-02"))
			return nil
		},
	}
	initCmd.Flags().StringVar(&cluster, "cluster", "acpp", "cluster name: lower-case letters, digits, '-' and '.'")
	issue := func(kind, short string, create func(dir, name string, cfg credentials.IssueConfig) (*credentials.Issued, error)) *cobra.Command {
		return &cobra.Command{
			Use:   kind + " NAME...",
			Short: short,
			Args:  cobra.MinimumNArgs(1),
			RunE: func(_ *cobra.Command, names []string) error {
				var errs []error
				for _, name := range names {
					iss, err := create(dir, name, credentials.IssueConfig{})
					if err != nil {
						errs = append(errs, fmt.Errorf("%s %s: %w", kind, name, err))
						continue
					}
					crt, _ := credentials.Paths(dir, roleOf(kind), name)
					fmt.Fprintf(stdout, "issued %s certificate %s (valid until %s; renew it before then: docs/OPERATIONS.md)\n", kind, crt, iss.NotAfter.UTC().Format("2006-01-02"))
				}
				return errors.Join(errs...)
			},
		}
	}
	cmd.AddCommand(initCmd,
		issue("node", "issue node certificates signed by the cluster CA", credentials.CreateNode),
		issue("client", "issue client certificates signed by the cluster CA: each sees only its own jobs", credentials.CreateClient),
		issue("operator", "issue operator certificates signed by the cluster CA: clients that see every client's jobs", credentials.CreateOperator))
	return cmd
}

func roleOf(kind string) proto.Role {
	switch kind {
	case "node":
		return proto.RoleNode
	case "operator":
		return proto.RoleOperator
	}
	return proto.RoleClient
}

// maxConfigFile bounds the config file: a few dozen settings.
const maxConfigFile = 1 << 20

// readConfigFile reads the --config file, refusing one larger than
// maxConfigFile without reading past it (a device such as /dev/zero never
// ends).
func readConfigFile(path string) ([]byte, error) {
	b, err := fileread.AtMost(path, maxConfigFile)
	if errors.Is(err, fileread.ErrTooLarge) {
		return nil, fmt.Errorf("config file %s is larger than %d bytes; name the YAML file of settings", path, maxConfigFile)
	}
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	return b, nil
}
