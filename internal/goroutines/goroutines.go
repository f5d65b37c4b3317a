// Package goroutines lets tests see what a goroutine is doing: whether a
// waiter spins (running, runnable) or parks (select, chan receive), read
// from the runtime's dump of every goroutine's stack.
package goroutines

import (
	"runtime"
	"strings"
)

// StateIn is the scheduler state ("select", "running", "runnable", ...)
// of the first goroutine whose stack holds fn (a function as the dump
// prints it, e.g. "exec.(*Node).Wait("), or "" if there is none.
func StateIn(fn string) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, fn) {
			continue
		}
		// "goroutine 7 [select]:" or "goroutine 7 [select, 2 minutes]:"
		head, _, _ := strings.Cut(g, "\n")
		_, st, _ := strings.Cut(head, "[")
		st, _, _ = strings.Cut(st, "]")
		st, _, _ = strings.Cut(st, ",")
		return st
	}
	return ""
}
