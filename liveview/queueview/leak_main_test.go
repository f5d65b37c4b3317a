package queueview_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts is stopped by the time the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
