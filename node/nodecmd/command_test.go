package nodecmd

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

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
