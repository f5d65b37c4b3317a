package coherence

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises rapid's default number of checks (100) to 1000 for this
// package's property tests unless -rapid.checks is given.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set && !testing.Short() {
		_ = flag.Set("rapid.checks", "1000")
	}
	os.Exit(m.Run())
}
