package cli

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/jobfile"
	"github.com/acpp/acpp/kernels"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// Env is what Main takes from the process: output streams, environment,
// and whether stderr is a terminal (for the progress bar).
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string // nil: no environment
	Terminal       bool
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// Main runs acpp-submit with args (without the program name) and returns
// the exit code: 0 on success, 1 on failure, 2 on a usage error.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	root := newRoot(ctx, env)
	root.SetArgs(args)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	err := unknownCommand(root, args)
	if err == nil {
		err = root.Execute()
	}
	if err == nil {
		return 0
	}
	fmt.Fprintln(env.Stderr, "acpp-submit:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// unknownCommand refuses a first word that names no command before cobra
// sees it: with --help, cobra printed the root's help for `acpp-submit
// bench --help` and exited 0, as if the command existed. cobra adds its
// help and completion commands as it executes, so they are added here
// first (it adds them once); its hidden __complete commands are left to it.
func unknownCommand(root *cobra.Command, args []string) error {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd(args...)
	c, rest, err := root.Find(args)
	if err == nil && c.Name() == "help" && len(rest) > 0 {
		// `help TOPIC` for no command printed cobra's "Unknown help
		// topic" and the root's help, exit 0.
		if t, _, terr := root.Find(rest); terr != nil || t == root {
			return usageError{fmt.Errorf("unknown help topic %q (see %s --help)", strings.Join(rest, " "), root.CommandPath())}
		}
	}
	if err != nil || c != root {
		return nil
	}
	for _, a := range rest {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if strings.HasPrefix(a, "__") {
			return nil
		}
		if sub, _, err := root.Find([]string{a}); err == nil && sub != root {
			// A command after a flag of its own (`-q run job`): cobra
			// says which flag it does not know.
			return nil
		}
		return usageError{fmt.Errorf("unknown command %q (see %s --help)", a, root.CommandPath())}
	}
	return nil
}

// paramsFlag is --set name=value (repeated or comma-separated), as
// pflag's StringToString but for a name given twice: --set n=3 --set n=4
// is refused, naming both values, where the last silently won.
type paramsFlag struct{ m *map[string]string }

func (p paramsFlag) Set(val string) error {
	pairs, err := csv.NewReader(strings.NewReader(val)).Read()
	if err != nil {
		return fmt.Errorf("want name=value, like n=4096")
	}
	if *p.m == nil {
		*p.m = map[string]string{}
	}
	for _, pair := range pairs {
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("%q is not name=value, like n=4096", pair)
		}
		if old, dup := (*p.m)[k]; dup {
			return fmt.Errorf("param %s is given twice (%s=%s, then %s=%s): give it once", k, k, old, k, v)
		}
		(*p.m)[k] = v
	}
	return nil
}

func (p paramsFlag) Type() string { return "stringToString" }

func (p paramsFlag) String() string {
	if p.m == nil {
		return "[]"
	}
	pairs := make([]string, 0, len(*p.m))
	for k, v := range *p.m {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return "[" + strings.Join(pairs, ",") + "]"
}

// checkUIAddr refuses a --ui that is not host:port (port 0: any free
// one) as a usage error, before the job starts: like --cluster's.
func checkUIAddr(a string) error {
	if a == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(a)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return usageError{fmt.Errorf("--ui %q is not host:port with a port in 0–65535 (0: any free port); give a loopback address, e.g. 127.0.0.1:8090", a)}
	}
	return nil
}

type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// clusterFlags are the flags of the commands that talk to a cluster.
type clusterFlags struct {
	addrs          []string
	credentialsDir string
	client         string
	selectNodes    []string
	selectKinds    []string
	placement      string
	onNodeLoss     string
	checkpoint     string
	// flags is the command's flag set (add), to tell a flag given from
	// its default: --placement, --credentials and --client given without
	// --cluster are refused, not ignored.
	flags *pflag.FlagSet
}

// given reports whether the flag name was given on the command line.
func (c *clusterFlags) given(name string) bool {
	return c.flags != nil && c.flags.Changed(name)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c *clusterFlags) add(cmd *cobra.Command, env Env, run bool) {
	f := cmd.Flags()
	c.flags = f
	f.StringSliceVar(&c.addrs, "cluster", splitList(env.Getenv("ACPP_CLUSTER")), "QUIC address (host:port, an acpp-node's --quic-addr) of a cluster member; one address expands to every alive member, several (comma-separated or repeated) are used as given (env ACPP_CLUSTER)"+map[bool]string{true: "; without it the job runs on the embedded runtime of this machine", false: ""}[run])
	creds := env.Getenv("ACPP_CREDENTIALS")
	if creds == "" {
		creds = "/etc/acpp"
	}
	f.StringVar(&c.credentialsDir, "credentials", creds, "directory with ca.crt and clients/NAME.crt/.key, made by acpp-node credentials --dir DIR client NAME (env ACPP_CREDENTIALS); with --cluster")
	f.StringVar(&c.client, "client", env.Getenv("ACPP_CLIENT"), "client name of the credentials, as issued (env ACPP_CLIENT); required with --cluster")
	if run {
		f.StringSliceVar(&c.selectNodes, "nodes", splitList(env.Getenv("ACPP_NODES")), "with --cluster: node names to use, comma-separated (default: all; env ACPP_NODES)")
		f.StringSliceVar(&c.selectKinds, "kinds", splitList(env.Getenv("ACPP_KINDS")), "with --cluster: device kinds to use, e.g. cuda (default: all; env ACPP_KINDS)")
		f.StringVar(&c.placement, "placement", "auto", "with --cluster: placement of unsplit steps: auto (data locality and estimated finish time) or round-robin")
		f.StringVar(&c.onNodeLoss, "on-node-loss", "", "with --cluster: when a node is lost, recover (rebuild what only it held from the latest checkpoint, replaying on the nodes left) or fail (default: the job file's recovery.on_node_loss, else recover)")
		f.StringVar(&c.checkpoint, "checkpoint", "", "with --cluster and recover: copy every buffer to this process auto (Young's interval from the checkpoint time and the nodes' MTBF), off, or every N command groups at most (one at a time; default: the job file's recovery.checkpoint, else auto)")
	}
}

// cleanList trims a list flag's entries and drops empty ones, as
// splitList does for its variable: "--nodes 'n1, n2'" is n1 and n2 (" n2"
// named no node), "--cluster ADDR," is ADDR.
func cleanList(l []string) []string {
	return splitList(strings.Join(l, ","))
}

// config builds the cluster config, or nil without --cluster.
func (c *clusterFlags) config() (*ClusterConfig, error) {
	c.addrs, c.selectNodes, c.selectKinds = cleanList(c.addrs), cleanList(c.selectNodes), cleanList(c.selectKinds)
	// A list flag given with nothing in it (a script's "--cluster $ADDR"
	// with ADDR unset) would otherwise be as if not given: a run on this
	// machine instead of the cluster, every node instead of a selection.
	for _, l := range []struct {
		name, what string
		n          int
	}{{"cluster", "the QUIC address of a cluster member (leave --cluster out to run on this machine)", len(c.addrs)},
		{"nodes", "at least one node name (leave --nodes out for every node)", len(c.selectNodes)},
		{"kinds", "at least one device kind, cpu or cuda (leave --kinds out for every kind)", len(c.selectKinds)}} {
		if l.n == 0 && c.given(l.name) {
			return nil, usageError{fmt.Errorf("--%s is empty: give %s", l.name, l.what)}
		}
	}
	switch c.placement {
	case "", "auto", "round-robin":
	default:
		return nil, usageError{fmt.Errorf("--placement %q: use auto or round-robin", c.placement)}
	}
	if len(c.addrs) == 0 {
		var creds []string
		for _, name := range []string{"credentials", "client"} {
			if c.given(name) {
				creds = append(creds, "--"+name)
			}
		}
		if len(creds) > 0 {
			return nil, usageError{fmt.Errorf("%s name the credentials for a cluster: give --cluster ADDR (or ACPP_CLUSTER) too; without it the command uses this machine and no credentials", strings.Join(creds, " and "))}
		}
		if c.given("placement") {
			return nil, usageError{errors.New("--placement places steps on cluster nodes: give --cluster ADDR too (an embedded run places steps by their device: field and --device)")}
		}
		if len(c.selectNodes) > 0 || len(c.selectKinds) > 0 {
			return nil, usageError{errors.New("--nodes and --kinds (ACPP_NODES, ACPP_KINDS) select cluster devices: give --cluster ADDR too (for this machine's devices use --device)")}
		}
		if c.onNodeLoss != "" || c.checkpoint != "" {
			return nil, usageError{errors.New("--on-node-loss and --checkpoint say how a cluster run survives losing a node: give --cluster ADDR too (an embedded run has no nodes to lose)")}
		}
		return nil, nil
	}
	// A bad kind is refused here, before any connection: after one, an
	// unreachable cluster would hide it.
	for _, k := range c.selectKinds {
		if _, err := device.ParseKind(k); err != nil {
			return nil, usageError{fmt.Errorf("--kinds: %w", err)}
		}
	}
	if c.onNodeLoss != "" {
		if _, err := coordinator.ParseNodeLossPolicy(c.onNodeLoss); err != nil {
			return nil, usageError{fmt.Errorf("--%w", err)}
		}
	}
	if c.checkpoint != "" {
		if _, err := coordinator.ParseCheckpoint(c.checkpoint); err != nil {
			return nil, usageError{fmt.Errorf("--%w", err)}
		}
	}
	cfg := &ClusterConfig{Addrs: c.addrs, CredentialsDir: c.credentialsDir, Client: c.client, Nodes: c.selectNodes, Kinds: c.selectKinds,
		OnNodeLoss: c.onNodeLoss, Checkpoint: c.checkpoint}
	if c.placement == "round-robin" {
		cfg.Placement = coordinator.PlaceRoundRobin
	}
	if c.client == "" {
		return nil, usageError{errors.New("--client NAME (or ACPP_CLIENT) is required with --cluster: the client name issued by acpp-node credentials --dir DIR client NAME")}
	}
	for i, a := range c.addrs {
		// Each node once: the coordinator refused a repeated address
		// after connecting, as "cluster unreachable: … Nodes[1] … is
		// listed twice".
		if slices.Contains(c.addrs[:i], a) {
			return nil, usageError{fmt.Errorf("--cluster lists %s twice: give each node's address once", a)}
		}
		_, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
			return nil, usageError{fmt.Errorf("--cluster %q is not host:port with a port in 1–65535 (an acpp-node's --quic-addr, e.g. 127.0.0.1:7951)", a)}
		}
	}
	return cfg, nil
}

func newRoot(ctx context.Context, env Env) *cobra.Command {
	root := &cobra.Command{
		Use:   "acpp-submit",
		Short: "Run acpp job files on this machine or on a cluster",
		Long: `acpp-submit runs job files: buffers, kernels over them, outputs (docs/JOBS.md).
By default a job runs on the embedded runtime: the CPU and the GPUs of this machine.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetContext(ctx)
	root.AddCommand(newRunCmd(env), newCheckCmd(env), newKernelsCmd(env), newDevicesCmd(env), newClusterCmd("nodes", "List the members of a cluster with their devices", env),
		newClusterCmd("status", "List the jobs running on a cluster", env))
	// An unknown command is a usage error (exit 2), as a bad flag is;
	// no command at all prints the help.
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("unknown command %q (see %s --help)", args[0], c.CommandPath())}
		}
		return c.Help()
	}
	// A string flag whose default is a value (--placement auto,
	// --max-bytes auto, --credentials /etc/acpp, --out-dir .) given
	// empty, as a script's "--placement $P" with P unset gives it, is
	// refused: it was taken as the default, or (--credentials) as
	// another default, without a word.
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		var err error
		c.Flags().Visit(func(f *pflag.Flag) {
			if err == nil && f.Value.Type() == "string" && f.DefValue != "" && f.Value.String() == "" {
				err = usageError{fmt.Errorf("--%s is empty: give a value, or leave the flag out for its default, %q (see %s --help)", f.Name, f.DefValue, c.CommandPath())}
			}
		})
		return err
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	return root
}

// noArgs refuses arguments as a usage error (exit 2): `acpp-submit nodes
// extra` is an unknown command, as `acpp-submit extra` is (cobra.NoArgs's
// error alone made it exit 1).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unknown command %q for %q: it takes no arguments (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())}
	}
	return nil
}

func exactlyOneJob(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError{fmt.Errorf("%s takes one job file, got %d arguments (e.g. %s examples/jobs/jacobi.yaml)", cmd.CommandPath(), len(args), cmd.CommandPath())}
	}
	return nil
}

func newRunCmd(env Env) *cobra.Command {
	var (
		cf                 clusterFlags
		outDir, trace, dag string
		devices            []string
		workers, window    int
		progress           string
		quiet, verbose     bool
		params             map[string]string
		maxBytes           string
		uiAddr             string
	)
	cmd := &cobra.Command{
		Use:   "run JOB",
		Short: "Run a job file (embedded runtime by default)",
		Example: `  acpp-submit run examples/jobs/jacobi.yaml
  acpp-submit run --out-dir out --trace trace.json --dag dag.dot examples/jobs/jacobi.yaml
  acpp-submit run --device cpu examples/jobs/saxpy.yaml
  acpp-submit run --set n=4096 --set iters=20 examples/jobs/jacobi.yaml
  acpp-submit run --cluster 127.0.0.1:7951 --credentials creds --client alice examples/jobs/jacobi.yaml`,
		Args: exactlyOneJob,
		RunE: func(cmd *cobra.Command, args []string) error {
			cc, err := cf.config()
			if err != nil {
				return err
			}
			if workers < 0 || workers > acpp.MaxWorkers {
				return usageError{fmt.Errorf("--workers %d: give a positive number of worker goroutines, at most %d, or 0 for one per processor (GOMAXPROCS)", workers, acpp.MaxWorkers)}
			}
			if window < 0 {
				return usageError{fmt.Errorf("--window %d: give a positive number of command groups, or 0 for the default (1024)", window)}
			}
			if err := checkDevices(devices); err != nil {
				return err
			}
			if cc != nil && (len(devices) > 0 || workers > 0) {
				return usageError{errors.New("--device and --workers choose this machine's devices; on a cluster use --nodes and --kinds (the nodes' acpp-node settings decide their workers)")}
			}
			if cc != nil && cmd.Flags().Changed("max-bytes") {
				return usageError{errors.New("--max-bytes is the memory budget of this machine; on a cluster each node's acpp-node --max-bytes decides")}
			}
			limit, err := device.ParseMemoryLimit(maxBytes)
			if err != nil {
				return usageError{fmt.Errorf("--max-bytes: %w", err)}
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelDebug
			}
			cfg := Config{JobFile: args[0], Params: params, OutDir: outDir, Record: trace != "" || dag != "", Devices: devices, Workers: workers, Window: window,
				Logger: slog.New(saidElsewhere{slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}), verbose}), Cluster: cc, MemoryLimit: limit, UI: uiAddr}
			if uiAddr != "" {
				cfg.UIReady = func(url string) { fmt.Fprintf(env.Stderr, "live view: %s\n", url) }
			}
			if !quiet {
				// Recoveries, drains and joins, as they happen.
				cfg.Notify = func(line string) { fmt.Fprintln(env.Stderr, line) }
			}
			show := progress == "always" || (progress == "auto" && env.Terminal && !quiet)
			switch progress {
			case "auto", "always", "never":
			default:
				return usageError{fmt.Errorf("--progress %q: use auto, always or never", progress)}
			}
			// --quiet prints nothing but errors: a flag that asks for more
			// output is refused with it, not overruled without a word.
			if quiet && progress == "always" {
				return usageError{errors.New("--quiet prints nothing but errors, --progress always a progress bar: give one of them")}
			}
			if quiet && verbose {
				return usageError{errors.New("--quiet prints nothing but errors, --verbose the runtime's debug log: give one of them")}
			}
			var bar *progressbar.ProgressBar
			lastLine := time.Now()
			start := time.Now()
			cfg.Progress = func(done, total int) {
				switch {
				case quiet:
				case show:
					if bar == nil {
						bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(env.Stderr), progressbar.OptionSetDescription(filepath.Base(args[0])),
							progressbar.OptionShowCount(), progressbar.OptionSetItsString("groups"), progressbar.OptionShowIts(),
							progressbar.OptionThrottle(50*time.Millisecond), progressbar.OptionClearOnFinish(), progressbar.OptionSetWidth(30))
					}
					bar.Set(done)
				case progress == "auto" && (time.Since(lastLine) >= 2*time.Second || done == total):
					// Not a terminal: a plain line every 2 s and at the end.
					lastLine = time.Now()
					fmt.Fprintf(env.Stderr, "progress: %d/%d command groups done (%s)\n", done, total, time.Since(start).Round(time.Millisecond))
				}
			}
			if err := checkUIAddr(uiAddr); err != nil {
				return err
			}
			for _, f := range []struct{ flag, path string }{{"--trace", trace}, {"--dag", dag}} {
				if f.path == "" {
					continue
				}
				// The files are written after the run, each over whatever is
				// there: over the job file, or one over the other, without a
				// word. (Outputs are checked once the job is read.)
				if samePath(f.path, args[0]) {
					return usageError{fmt.Errorf("%s %s is the job file: writing it would replace the job; give %s another file", f.flag, f.path, f.flag)}
				}
				if err := canWrite(f.path); err != nil {
					return usageError{fmt.Errorf("%s: %w", f.flag, err)}
				}
				if cfg.Writes == nil {
					cfg.Writes = map[string]string{}
				}
				cfg.Writes[f.flag] = f.path
			}
			if trace != "" && dag != "" && samePath(trace, dag) {
				return usageError{fmt.Errorf("--trace and --dag both name %s: the DAG would overwrite the trace; give each its own file", trace)}
			}
			res, err := Run(cmd.Context(), cfg)
			if bar != nil {
				bar.Finish()
			}
			var werr error
			if res != nil {
				if !quiet {
					fmt.Fprint(env.Stdout, res.Summary())
				}
				if trace != "" {
					werr = errors.Join(werr, writeFile(trace, res.WriteTrace, "--trace"))
				}
				if dag != "" {
					werr = errors.Join(werr, writeFile(dag, res.WriteDAG, "--dag"))
				}
				if werr == nil && !quiet {
					for _, p := range []string{trace, dag} {
						if p != "" {
							fmt.Fprintf(env.Stdout, "  wrote %s\n", p)
						}
					}
				}
			}
			return errors.Join(err, werr)
		},
	}
	f := cmd.Flags()
	f.Var(paramsFlag{&params}, "set", "override a param of the job: --set n=4096 (repeat or comma-separate; integers or expressions over the job's params)")
	f.StringVarP(&outDir, "out-dir", "o", ".", "directory for the job's outputs (created if missing); output paths in the job are relative to it")
	f.StringVar(&trace, "trace", "", "write a Chrome trace of the run to this file (open it in ui.perfetto.dev): a track per device, a slice per command group, dependency arrows, bytes per link")
	f.StringVar(&dag, "dag", "", "write the command-group DAG as Graphviz DOT to this file (render: dot -Tsvg FILE > dag.svg)")
	f.StringSliceVar(&devices, "device", nil, "devices to use: cpu, cuda (every device of a kind), cpu:0, cuda:1; repeat or comma-separate (default: every local device, GPUs first; the first is where steps without device: run)")
	f.IntVar(&workers, "workers", 0, "worker goroutines of the CPU device, at most 1024 (default 0 = GOMAXPROCS)")
	f.IntVar(&window, "window", 0, "command groups submitted ahead of the oldest unfinished one (default 0 = 1024); bounds memory, not order")
	f.StringVar(&progress, "progress", "auto", "progress display: auto (a bar on a terminal, a line every 2 s otherwise), always (bar), never")
	f.BoolVarP(&quiet, "quiet", "q", false, "print nothing but errors")
	f.StringVar(&uiAddr, "ui", "", "serve a live view of the run at this host:port while it runs (members, progress, page grids, bytes/s per link; read-only, no authentication: keep it on loopback, e.g. 127.0.0.1:8090)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log runtime debug events to stderr")
	f.StringVar(&maxBytes, "max-bytes", "auto", "memory budget of this machine for the embedded runtime: what buffers may allocate in each memory; an allocation beyond it fails its step instead of the process. auto (75% of host memory, 90% of each GPU's), a share like 50%, a size like 8GiB, or 0 (none)")
	cf.add(cmd, env, true)
	return cmd
}

func writeFile(path string, write func(io.Writer) error, flag string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: write %s: %w", flag, path, err)
	}
	return nil
}

func newCheckCmd(env Env) *cobra.Command {
	var (
		params   map[string]string
		maxBytes string
		devices  []string
		cf       clusterFlags
	)
	cmd := &cobra.Command{
		Use:   "check JOB",
		Short: "Validate a job file, describe it and say whether it fits the machine (or cluster) it would run on, without running it",
		Example: `  acpp-submit check examples/jobs/jacobi.yaml
  acpp-submit check --cluster 127.0.0.1:7951 --credentials creds --client alice examples/jobs/jacobi.yaml`,
		Args: exactlyOneJob,
		RunE: func(cmd *cobra.Command, args []string) error {
			cc, err := cf.config()
			if err != nil {
				return err
			}
			if cc != nil && (cmd.Flags().Changed("max-bytes") || len(devices) > 0) {
				return usageError{errors.New("--max-bytes and --device describe this machine; on a cluster the nodes' budgets (acpp-node --max-bytes) decide")}
			}
			if err := checkDevices(devices); err != nil {
				return err
			}
			limit, err := device.ParseMemoryLimit(maxBytes)
			if err != nil {
				return usageError{fmt.Errorf("--max-bytes: %w", err)}
			}
			cc, release, err := lendClient(cc, slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			defer release()
			src, err := kernelsFor(cmd.Context(), cc)
			if err != nil {
				return err
			}
			job, err := loadWith(args[0], params, src)
			if err != nil {
				return err
			}
			// What the files, the launches and (below) the devices show is
			// reported in one list, in line order, as the file's own mistakes are.
			jobErrs := joinJobErrors(checkFiles(job, filepath.Dir(args[0])), checkLaunches(job), checkRecovery(job))
			var mems []memBudget
			var missing []string
			where, hostOut := "this machine", (*memBudget)(nil)
			if cc != nil {
				where, hostOut = "the cluster", hostBudget()
				mems, missing, err = clusterBudgets(cmd.Context(), cc)
			} else {
				var infos []device.Info
				mems, infos, err = machineBudgets(cmd.Context(), limit, devices)
				for i := range mems {
					if mems[i].Host {
						hostOut = &mems[i]
					}
				}
				if err == nil {
					err = checkStepDevices(job, infos)
				}
			}
			if err = joinJobErrors(jobErrs, err); err != nil {
				return err
			}
			why := fit(job, mems, where, hostOut)
			var kernelsLine string
			var noKernel []string
			if ks, ok := src.(kernelSource); ok {
				kernelsLine, noKernel = ks.onCluster(job)
			}
			verdict := "valid"
			switch {
			case len(noKernel) > 0:
				verdict = "valid, but the cluster cannot run it"
			case len(why) > 0:
				verdict = "valid, but it does not fit " + where
			}
			fmt.Fprint(env.Stdout, describe(job, verdict))
			if kernelsLine != "" {
				fmt.Fprintf(env.Stdout, "  kernels on the cluster: %s\n", kernelsLine)
			}
			if len(noKernel) > 0 {
				return fmt.Errorf("%w: %s", ErrDoesNotFit, strings.Join(noKernel, "; "))
			}
			fmt.Fprintf(env.Stdout, "  memory budgets of %s: %s\n", where, budgetsLine(mems))
			if len(missing) > 0 {
				fmt.Fprintf(env.Stdout, "  not counted (no inventory): %s\n", strings.Join(missing, ", "))
			}
			if len(why) > 0 {
				return fmt.Errorf("%w %s: %s; make the buffers smaller, run it where there is more memory (check --cluster ADDR), or raise the budgets (--max-bytes here, acpp-node --max-bytes on nodes)",
					ErrDoesNotFit, where, strings.Join(why, "; "))
			}
			fmt.Fprintf(env.Stdout, "  fits the memory budgets of %s\n", where)
			return nil
		},
	}
	f := cmd.Flags()
	f.Var(paramsFlag{&params}, "set", "override a param of the job: --set n=4096")
	f.StringVar(&maxBytes, "max-bytes", "auto", "memory budget of this machine to check against, as for run: auto (75% of host memory, 90% of each GPU's), a share like 50%, a size like 8GiB, or 0 (none)")
	f.StringSliceVar(&devices, "device", nil, "devices of this machine to check against, as for run (default: every local device)")
	cf.add(cmd, env, false)
	return cmd
}

// Describe is a short description of a job: its buffers, step count and
// outputs.
func Describe(job *jobfile.Job) string { return describe(job, "valid") }

func describe(job *jobfile.Job, verdict string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s (%s): %s\n", job.Name, job.File, verdict)
	if len(job.Params) > 0 {
		names := make([]string, 0, len(job.Params))
		for n := range job.Params {
			names = append(names, n)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s=%d", n, job.Params[n])
		}
		fmt.Fprintf(&b, "  params: %s (override with --set)\n", strings.Join(parts, " "))
	}
	total := 0
	for _, buf := range job.Buffers {
		init := "uninitialised"
		switch {
		case buf.Init == nil:
		case buf.Init.Value != nil:
			init = "value " + buf.Init.Value.Text
		case buf.Init.File != "":
			init = "file " + buf.Init.File + " (" + string(buf.Init.Format) + ")"
		case buf.Init.Kernel != nil:
			init = "kernel " + buf.Init.Kernel.Kernel
		}
		total += buf.Bytes()
		fmt.Fprintf(&b, "  buffer %-12s %-8s %-14s %10s  %s\n", buf.Name, buf.Type, fmt.Sprint(buf.Range), bytesStr(int64(buf.Bytes())), init)
	}
	fmt.Fprintf(&b, "  %s from %s; %s of buffers\n", things(groupCount(job), "command group"), things(len(job.Steps), "step"), bytesStr(int64(total)))
	for _, o := range job.Outputs {
		fmt.Fprintf(&b, "  output %s → %s (%s)\n", o.Buffer, o.File, o.Format)
	}
	return b.String()
}

func newKernelsCmd(env Env) *cobra.Command {
	var cf clusterFlags
	cmd := &cobra.Command{
		Use:   "kernels",
		Short: "List the kernels jobs can name, with their parameters (with --cluster: which nodes have each)",
		Long: `List the kernels a job can name: this program's built-in kernels, with their
parameters and forms. With --cluster, list the kernels each node of the cluster
advertises: a node's own binary (node/nodecmd, examples/custom-node) may carry
kernels of its own, and a group runs only on nodes that have its kernel.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cc, err := cf.config()
			if err != nil {
				return err
			}
			if cc != nil {
				return KernelsOnCluster(cmd.Context(), cc, env.Stdout)
			}
			if err := kernels.Register(); err != nil {
				return err
			}
			for _, n := range device.Kernels.Names() {
				k, _ := device.Kernels.Lookup(n)
				var forms []string
				if k.Go != nil {
					forms = append(forms, "cpu")
				}
				if k.PTX != nil {
					forms = append(forms, "cuda")
				} else if k.CUDA != nil {
					forms = append(forms, "cuda (CUDA C)")
				}
				fmt.Fprintf(env.Stdout, "%-60s [%s]\n", kernelSignature(k), strings.Join(forms, ", "))
			}
			return nil
		},
	}
	cf.add(cmd, env, false)
	return cmd
}

func kernelSignature(k *device.Kernel) string {
	parts := make([]string, len(k.Params))
	for i, p := range k.Params {
		t, ok := kernels.ParamType(k.Name, p.Name)
		if !ok && p.ElemSize != 0 {
			t = strconv.Itoa(p.ElemSize) + "-byte"
		}
		switch p.Kind {
		case device.ArgPointer:
			parts[i] = p.Name + " *" + t
		case device.ArgAccessor:
			parts[i] = p.Name + " accessor[" + t + "]"
		case device.ArgRangedAccessor:
			parts[i] = p.Name + " ranged[" + t + "]"
		case device.ArgLocal:
			parts[i] = p.Name + " local"
		default:
			parts[i] = p.Name + " " + t
		}
	}
	return k.Name + "(" + strings.Join(parts, ", ") + ")"
}

func newDevicesCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "devices",
		Short: "List the devices of this machine that jobs can run on",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := acpp.NewQueue(cmd.Context())
			if err != nil {
				return fmt.Errorf("open the local devices: %w", err)
			}
			defer q.Close()
			fmt.Fprintf(env.Stdout, "%-8s %-34s %10s %7s %-12s %s\n", "device", "name", "memory", "queues", "host-linked", "kernels")
			for _, d := range q.Devices() {
				mem := "host"
				if d.Caps.MemBytes > 0 {
					mem = bytesStr(d.Caps.MemBytes)
				}
				forms := make([]string, len(d.Caps.KernelForms))
				for i, f := range d.Caps.KernelForms {
					forms[i] = f.String()
				}
				fmt.Fprintf(env.Stdout, "%-8s %-34s %10s %7d %-12v %s\n", d.ID, d.Name, mem, d.Caps.Queues, d.Caps.HostUnified, strings.Join(forms, ", "))
			}
			return nil
		},
	}
}

func newClusterCmd(name, short string, env Env) *cobra.Command {
	var cf clusterFlags
	cmd := &cobra.Command{
		Use:   name,
		Short: short + " (needs --cluster)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(cf.addrs) == 0 {
				return usageError{fmt.Errorf("%s needs --cluster ADDR (or ACPP_CLUSTER): the QUIC address of any cluster member", name)}
			}
			cc, err := cf.config()
			if err != nil {
				return err
			}
			if name == "nodes" {
				return Nodes(cmd.Context(), cc, env.Stdout)
			}
			return Status(cmd.Context(), cc, env.Stdout)
		},
	}
	cf.add(cmd, env, false)
	return cmd
}

// saidElsewhere drops the log records that run reports in its own words
// (a failed job is its error; a recovery has its own lines), so that they
// are not printed twice, unless --verbose asks for the whole log.
type saidElsewhere struct {
	slog.Handler
	verbose bool
}

// ownLines are the messages of the coordinator's records that run prints
// itself.
var ownLines = map[string]bool{"job failed": true, "node lost: recovering": true}

func (h saidElsewhere) Handle(ctx context.Context, r slog.Record) error {
	if !h.verbose && ownLines[r.Message] {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h saidElsewhere) WithAttrs(as []slog.Attr) slog.Handler {
	return saidElsewhere{h.Handler.WithAttrs(as), h.verbose}
}

func (h saidElsewhere) WithGroup(name string) slog.Handler {
	return saidElsewhere{h.Handler.WithGroup(name), h.verbose}
}
