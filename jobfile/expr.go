package jobfile

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxQuoted is how many bytes of a job file's text a message quotes; longer
// text is cut, with an ellipsis, so that a huge expression does not make a
// huge message.
const maxQuoted = 80

// quoteShort quotes s for a message, cut to about maxQuoted bytes.
func quoteShort(s string) string { return strconv.Quote(short(s)) }

// short is s cut to about maxQuoted bytes (on a rune boundary) with an
// ellipsis.
func short(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// maxDepth bounds the nesting of parentheses and unary minus signs, which
// bounds the parser's recursion.
const maxDepth = 64

// evalInt evaluates an integer expression over the job's params: integers,
// names, + - * / % and parentheses, with the usual precedence. Division
// truncates; overflow (math.MinInt64 / -1 and % -1 included) and division
// by zero are errors.
func evalInt(src string, params map[string]int64) (int64, error) {
	return evalExpr(src, func(name string) (int64, error) {
		if v, ok := params[name]; ok {
			return v, nil
		}
		names := make([]string, 0, len(params))
		for n := range params {
			names = append(names, n)
		}
		sortStrings(names)
		return 0, unknownParam(name, names)
	})
}

// unknownParam is the error for a name that is not a declared param;
// declared lists the job's params, sorted.
func unknownParam(name string, declared []string) error {
	known := "none declared; add params: {" + short(name) + ": N}"
	if len(declared) > 0 {
		known = strings.Join(declared, ", ")
	}
	return fmt.Errorf("unknown param %s%s (params: %s)", quoteShort(name), suggest(name, declared), known)
}

// evalExpr is evalInt with the value of each name from lookup, whose error
// is the expression's.
func evalExpr(src string, lookup func(name string) (int64, error)) (int64, error) {
	p := &exprParser{s: src, lookup: lookup}
	v, err := p.expr()
	if err != nil {
		return 0, err
	}
	p.space()
	if p.i < len(p.s) {
		return 0, fmt.Errorf("expression %s: unexpected %s at position %d", quoteShort(src), quoteShort(p.s[p.i:]), p.i+1)
	}
	return v, nil
}

type exprParser struct {
	s      string
	i      int
	lookup func(name string) (int64, error)
	depth  int
}

func (p *exprParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *exprParser) expr() (int64, error) {
	v, err := p.term()
	for err == nil {
		p.space()
		if p.i >= len(p.s) || (p.s[p.i] != '+' && p.s[p.i] != '-') {
			return v, nil
		}
		op := p.s[p.i]
		p.i++
		var w int64
		if w, err = p.term(); err != nil {
			break
		}
		if op == '+' {
			v, err = addChecked(v, w, p.s)
		} else {
			v, err = subChecked(v, w, p.s)
		}
	}
	return 0, err
}

func (p *exprParser) term() (int64, error) {
	v, err := p.factor()
	for err == nil {
		p.space()
		if p.i >= len(p.s) || !strings.ContainsRune("*/%", rune(p.s[p.i])) {
			return v, nil
		}
		op := p.s[p.i]
		p.i++
		var w int64
		if w, err = p.factor(); err != nil {
			break
		}
		switch op {
		case '*':
			if v != 0 && (v*w/v != w || (v == -1 && w == math.MinInt64)) {
				return 0, overflows(p.s)
			}
			v *= w
		case '/', '%':
			if w == 0 {
				return 0, fmt.Errorf("expression %s divides by zero", quoteShort(p.s))
			}
			if v == math.MinInt64 && w == -1 {
				// The quotient, 2⁶³, has no int64; Go would wrap it to
				// MinInt64 silently. The remainder (0) is refused too, as
				// C and the hardware's idiv do.
				return 0, overflows(p.s)
			}
			if op == '/' {
				v /= w
			} else {
				v %= w
			}
		}
	}
	return 0, err
}

func (p *exprParser) factor() (int64, error) {
	p.space()
	if p.i >= len(p.s) {
		return 0, fmt.Errorf("expression %s ends early", quoteShort(p.s))
	}
	c := p.s[p.i]
	if c == '(' || c == '-' {
		p.depth++
		if p.depth > maxDepth {
			return 0, fmt.Errorf("expression %s nests too deep (more than %d parentheses and minus signs); simplify it", quoteShort(p.s), maxDepth)
		}
		defer func() { p.depth-- }()
	}
	switch {
	case c == '(':
		p.i++
		v, err := p.expr()
		if err != nil {
			return 0, err
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return 0, fmt.Errorf("expression %s: missing )", quoteShort(p.s))
		}
		p.i++
		return v, nil
	case c == '-':
		p.i++
		v, err := p.factor()
		if err != nil {
			return 0, err
		}
		if v == math.MinInt64 {
			return 0, overflows(p.s)
		}
		return -v, nil
	case c >= '0' && c <= '9':
		j := p.i
		for j < len(p.s) && (p.s[j] >= '0' && p.s[j] <= '9' || p.s[j] == '_') {
			j++
		}
		v, err := strconv.ParseInt(strings.ReplaceAll(p.s[p.i:j], "_", ""), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("expression %s: %s is not a 64-bit integer", quoteShort(p.s), short(p.s[p.i:j]))
		}
		p.i = j
		return v, nil
	case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		j := p.i
		for j < len(p.s) && (p.s[j] == '_' || p.s[j] >= 'a' && p.s[j] <= 'z' || p.s[j] >= 'A' && p.s[j] <= 'Z' || p.s[j] >= '0' && p.s[j] <= '9') {
			j++
		}
		name := p.s[p.i:j]
		p.i = j
		return p.lookup(name)
	}
	r, _ := utf8.DecodeRuneInString(p.s[p.i:])
	return 0, fmt.Errorf("expression %s: unexpected %q at position %d", quoteShort(p.s), string(r), p.i+1)
}

func overflows(src string) error {
	return fmt.Errorf("expression %s overflows 64 bits (-9223372036854775808 to 9223372036854775807)", quoteShort(src))
}

func addChecked(a, b int64, src string) (int64, error) {
	s := a + b
	if (a > 0 && b > 0 && s < 0) || (a < 0 && b < 0 && s >= 0) {
		return 0, overflows(src)
	}
	return s, nil
}

// subChecked is a - b, or an error when it overflows (a - MinInt64 cannot
// be written as a + -b: -MinInt64 wraps).
func subChecked(a, b int64, src string) (int64, error) {
	s := a - b
	if (a^b)&(a^s) < 0 {
		return 0, overflows(src)
	}
	return s, nil
}
