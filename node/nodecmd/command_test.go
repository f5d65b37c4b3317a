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
