package jobfile

import (
	"strings"
	"testing"
)

// TestExpressionOverflow: overflow of every operator is an error, never a
// wrapped value (MinInt64 / -1 and % -1 included); unary minus signs nest
// like parentheses, which bounds the parser's recursion.
func TestExpressionOverflow(t *testing.T) {
	params := map[string]int64{"min": -9223372036854775807 - 1, "max": 9223372036854775807}
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"(-9223372036854775807 - 1) / -1", 0, "overflows 64 bits"},
		{"(-9223372036854775807 - 1) % -1", 0, "overflows 64 bits"},
		{"min / -1", 0, "overflows"},
		{"min % -1", 0, "overflows"},
		{"min / 1", -9223372036854775807 - 1, ""},
		{"min % 2", 0, ""},
		{"-min", 0, "overflows"},
		{"0 - min", 0, "overflows"},
		{"-1 - min", 9223372036854775807, ""},
		{"-max - 1", -9223372036854775807 - 1, ""},
		{"-max - 2", 0, "overflows"},
		{"max - -1", 0, "overflows"},
		{"min * -1", 0, "overflows"},
		{"-1 * min", 0, "overflows"},
		{"min - 1", 0, "overflows"},
		{"-(-(-(1)))", -1, ""},
		{strings.Repeat("-", 64) + "1", 1, ""},
		{strings.Repeat("-", 65) + "1", 0, "nests too deep"},
	} {
		got, err := evalInt(tc.in, params)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("evalInt(%q) = %d, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("evalInt(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	// Messages quote at most about maxQuoted bytes, cut on a rune.
	long := strings.Repeat("(", 1000) + "1"
	_, err := evalInt(long, nil)
	if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "…") {
		t.Errorf("evalInt of a 1001-byte expression: %v, want a short message with an ellipsis", err)
	}
	if s := short(strings.Repeat("é", 100)); len(s) > maxQuoted || !strings.HasSuffix(s, "é…") {
		t.Errorf("short cut %q inside a rune or too long", s)
	}
}
