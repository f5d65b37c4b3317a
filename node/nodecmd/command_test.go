package nodecmd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/acpp/acpp/credentials"
)

// execute runs the acpp-node command line with args and env.
func execute(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := Command(&out, lookup(env))
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errb.String(), err
}

// TestCredentialsPrintExpiry: issuing a certificate says until when it is
// valid (the date to renew it by).
func TestCredentialsPrintExpiry(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	if _, _, err := execute(t, nil, "credentials", "--dir", dir, "init", "--cluster", "lab"); err != nil {
		t.Fatal(err)
	}
	out, _, err := execute(t, nil, "credentials", "--dir", dir, "node", "n1")
	if err != nil {
		t.Fatal(err)
	}
	creds, err := credentials.LoadNode(dir, "n1")
	if err != nil {
		t.Fatal(err)
	}
	want := "valid until " + creds.NotAfter.UTC().Format("2006-01-02")
	if !strings.Contains(out, "issued node certificate") || !strings.Contains(out, want) {
		t.Errorf("credentials node printed %q; want it to say %q", out, want)
	}
}

// TestNVRTCWorkerCommand: the hidden nvrtc-worker command answers one
// compile request on stdin with a result on stdout (here: no libnvrtc at
// the path asked, so the result is that error), refuses input that is no
// request saying who starts it, and is not listed in the help.
func TestNVRTCWorkerCommand(t *testing.T) {
	run := func(stdin string) (string, error) {
		var out bytes.Buffer
		cmd := Command(&out, lookup(nil))
		cmd.SetIn(strings.NewReader(stdin))
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs([]string{nvrtcWorker})
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := run(`{"Library": "/nonexistent/libnvrtc.so", "Program": {"Source": "ZXh0ZXJu", "Name": "k.cu"}, "Options": ["--gpu-architecture=compute_90"]}`)
	if err != nil || !strings.Contains(out, `"Err":"nvrtc: libnvrtc not found`) || !strings.Contains(out, "tried /nonexistent/libnvrtc.so") {
		t.Errorf("nvrtc-worker with a request: %q, %v; want a reply naming the missing library", out, err)
	}
	if _, err := run("hello"); err == nil || !strings.Contains(err.Error(), "started by a node") {
		t.Errorf("nvrtc-worker with no request: %v, want an error saying a node starts it", err)
	}
	help, _, _ := execute(t, nil, "--help")
	if strings.Contains(help, nvrtcWorker) {
		t.Errorf("acpp-node --help lists the hidden %s:\n%s", nvrtcWorker, help)
	}
}

// TestRunErrorsNameTheSetting: acpp-node run refuses a bad --name,
// --devices, --cpu-workers, or a --max-job-bytes above a --max-bytes size,
// whether from a flag, its ACPP_* variable or the config file, with an
// error that names the setting (OPERATIONS.md, "Settings": "An error names
// the setting as you typed it"), not node.Config's field ("invalid config:
// CPUWorkers (-1) must be >= 0", "Devices: …", "Name: …").
func TestRunErrorsNameTheSetting(t *testing.T) {
	dir := t.TempDir()
	file := func(body string) string {
		p := filepath.Join(dir, fmt.Sprintf("c%d.yaml", len(body)))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := []string{"run", "--credentials", filepath.Join(dir, "none"), "--gossip-addr", "127.0.0.1:0", "--quic-addr", "127.0.0.1:0", "--http-addr", ""}
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"name flag", nil, []string{"--name", "../x"}, `name "../x"`},
		{"name env", map[string]string{"ACPP_NAME": "a b"}, nil, `name "a b"`},
		{"devices flag", nil, []string{"--name", "n1", "--devices", "cpu,gpu"}, `devices: "gpu"`},
		{"devices env", map[string]string{"ACPP_DEVICES": "cpu:x"}, []string{"--name", "n1"}, `devices: "cpu:x"`},
		{"cpu-workers flag", nil, []string{"--name", "n1", "--cpu-workers", "-1"}, "cpu-workers -1"},
		{"cpu-workers env", map[string]string{"ACPP_CPU_WORKERS": "-2"}, []string{"--name", "n1"}, "cpu-workers -2"},
		{"cpu-workers file", nil, []string{"--name", "n1", "--config", file("cpu_workers: -3\n")}, "cpu-workers -3"},
		{"max-job-bytes", nil, []string{"--name", "n1", "--max-bytes", "1MiB", "--max-job-bytes", "2MiB"}, "max-job-bytes 2MiB is more than max-bytes 1MiB"},
		// A flag given empty where empty means nothing (a script's
		// "--timing $T" with T unset): --credentials "" failed naming
		// node.Config's CredentialsDir; --timing, --log-format and
		// --max-bytes "" were taken as their defaults.
		{"credentials empty", nil, []string{"--name", "n1", "--credentials", ""}, `--credentials is empty: give a value, or leave the flag out for its default, "/etc/acpp"`},
		{"timing empty", nil, []string{"--name", "n1", "--timing", ""}, `--timing is empty`},
		{"log-format empty", nil, []string{"--name", "n1", "--log-format", ""}, `--log-format is empty`},
		{"max-bytes empty", nil, []string{"--name", "n1", "--max-bytes", ""}, `--max-bytes is empty`},
		// A config file that never ends was read until the node ran out
		// of memory.
		{"config endless", nil, []string{"--name", "n1", "--config", "/dev/zero"}, "config file /dev/zero is larger than 1048576 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := execute(t, tt.env, append(append([]string{}, base...), tt.args...)...)
			if err == nil {
				t.Fatal("acpp-node run accepted it")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not name %s", msg, tt.want)
			}
			for _, field := range []string{"invalid config", "Name:", "Devices:", "CPUWorkers", "MaxJobBytes", "CredentialsDir"} {
				if strings.Contains(msg, field) {
					t.Errorf("error %q names node.Config (%s), not the setting", msg, field)
				}
			}
		})
	}
}

// TestCredentialsUnknownCommandFails: a word that is no credentials
// subcommand (a typo: "nodes" for "node") fails and issues nothing; it
// printed the help and exited 0, so a script went on without the
// certificates. No word at all is the help.
func TestCredentialsUnknownCommandFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	if _, _, err := execute(t, nil, "credentials", "--dir", dir, "init", "--cluster", "lab"); err != nil {
		t.Fatal(err)
	}
	_, _, err := execute(t, nil, "credentials", "--dir", dir, "nodes", "n1")
	if err == nil || !strings.Contains(err.Error(), `unknown command "nodes"`) {
		t.Errorf("credentials nodes n1: error %v, want an unknown command", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nodes", "n1.crt")); err == nil {
		t.Error("credentials nodes n1 issued nodes/n1.crt")
	}
	if out, _, err := execute(t, nil, "credentials"); err != nil || !strings.Contains(out, "Usage:") {
		t.Errorf("credentials: %v, stdout %q; want the help", err, out)
	}
}

// TestNVRTCWorkerWhenEmbedded: a program that embeds the acpp-node
// command as a subcommand starts its compiler workers through that
// subcommand (it started "exe nvrtc-worker", which such a program does not
// have, and every job's CUDA C failed to compile).
func TestNVRTCWorkerWhenEmbedded(t *testing.T) {
	find := func(root *cobra.Command, path ...string) *cobra.Command {
		c, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	plain := Command(&bytes.Buffer{}, lookup(nil))
	if got := workerCommand("/bin/x", find(plain, "run")); !slices.Equal(got, []string{"/bin/x", nvrtcWorker}) {
		t.Errorf("acpp-node's worker command = %q, want [/bin/x %s]", got, nvrtcWorker)
	}
	var out bytes.Buffer
	tool := &cobra.Command{Use: "mytool", SilenceErrors: true, SilenceUsage: true}
	node := Command(&out, lookup(nil))
	node.Use = "node"
	tool.AddCommand(node)
	args := workerCommand("/bin/mytool", find(tool, "node", "run"))
	if !slices.Equal(args, []string{"/bin/mytool", "node", nvrtcWorker}) {
		t.Fatalf("embedded worker command = %q, want [/bin/mytool node %s]", args, nvrtcWorker)
	}
	tool.SetArgs(args[1:])
	tool.SetIn(strings.NewReader(`{"Library": "/nonexistent/libnvrtc.so", "Program": {"Source": "ZXh0ZXJu", "Name": "k.cu"}, "Options": ["--gpu-architecture=compute_90"]}`))
	tool.SetOut(&out)
	if err := tool.Execute(); err != nil || !strings.Contains(out.String(), "libnvrtc not found") {
		t.Errorf("running the embedded worker command: %q, %v; want the worker's reply", out.String(), err)
	}
}

// TestEmptyCredentialsDirRefused: credentials --dir "" and drain
// --credentials "" (a script's "--dir $D" with D unset) are refused
// naming the flag: init failed with "mkdir : no such file or directory",
// node, client and operator issued into the current directory, and drain
// looked for the operator there.
func TestEmptyCredentialsDirRefused(t *testing.T) {
	cwd := t.TempDir()
	if _, _, err := execute(t, nil, "credentials", "--dir", cwd, "init", "--cluster", "lab"); err != nil {
		t.Fatal(err)
	}
	t.Chdir(cwd)
	for _, args := range [][]string{
		{"credentials", "--dir", "", "init"},
		{"credentials", "--dir", "", "node", "n1"},
		{"credentials", "--dir", "", "client", "alice"},
		{"credentials", "--dir", "", "operator", "ops"},
	} {
		_, _, err := execute(t, nil, args...)
		if err == nil || !strings.Contains(err.Error(), `--dir is empty: give the credentials directory, or leave the flag out for its default, "acpp-credentials"`) {
			t.Errorf("%v: error %v, want --dir refused as empty", args, err)
		}
	}
	for _, sub := range []string{"nodes", "clients"} {
		if _, err := os.Stat(filepath.Join(cwd, sub)); err == nil {
			t.Errorf("a refused command issued into the current directory (%s/)", sub)
		}
	}
	_, _, err := execute(t, map[string]string{"ACPP_CREDENTIALS": cwd}, "drain", "--credentials", "", "--client", "ops", "127.0.0.1:7951")
	if err == nil || !strings.Contains(err.Error(), "--credentials is empty") {
		t.Errorf("drain --credentials \"\": error %v, want it refused as empty", err)
	}
}

// TestConfigFlagWinsOverVariable: --config "" means no config file, over
// ACPP_CONFIG, as every flag wins over its variable (ACPP_CONFIG's file
// was read).
func TestConfigFlagWinsOverVariable(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("no_such_key: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"run", "--name", "n1", "--credentials", filepath.Join(dir, "none"), "--gossip-addr", "127.0.0.1:0", "--quic-addr", "127.0.0.1:0", "--http-addr", ""}
	_, _, err := execute(t, map[string]string{"ACPP_CONFIG": bad}, base...)
	if err == nil || !strings.Contains(err.Error(), `unknown key "no_such_key"`) {
		t.Fatalf("ACPP_CONFIG: error %v, want its file read", err)
	}
	_, _, err = execute(t, map[string]string{"ACPP_CONFIG": bad}, append(base, "--config", "")...)
	if err == nil || strings.Contains(err.Error(), "no_such_key") || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("--config \"\" with ACPP_CONFIG set: error %v, want no config file read (and the missing credentials)", err)
	}
}
