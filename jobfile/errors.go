package jobfile

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrInvalid matches every error about a job file's content.
var ErrInvalid = errors.New("jobfile: invalid job file")

// Error is one problem in a job file: where it is and what is wrong.
type Error struct {
	File string // the job file's name as given to Parse
	Line int    // 1-based; 0 when unknown
	Path string // the field: steps[1].accessors[0].buffer
	Msg  string // what is wrong and what to do
	Err  error  // the cause, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes every *Error match ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found in a job file, in line order.
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Is makes Errors match ErrInvalid.
func (es Errors) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the individual errors.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func (es Errors) sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Line < es[j].Line })
	return es
}

// suggest returns ` (did you mean "x"?)` for the closest candidate within
// edit distance 2, or "".
func suggest(got string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(got, c); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
