package jobfile

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// evalInt evaluates an integer expression over the job's params: integers,
// names, + - * / % and parentheses, with the usual precedence. Division
// truncates; overflow and division by zero are errors.
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
	known := "none declared; add params: {" + name + ": N}"
	if len(declared) > 0 {
		known = strings.Join(declared, ", ")
	}
	return fmt.Errorf("unknown param %q%s (params: %s)", name, suggest(name, declared), known)
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
		return 0, fmt.Errorf("expression %q: unexpected %q at position %d", src, p.s[p.i:], p.i+1)
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
			v, err = addChecked(v, -w, p.s)
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
				return 0, fmt.Errorf("expression %q overflows 64 bits", p.s)
			}
			v *= w
		case '/', '%':
			if w == 0 {
				return 0, fmt.Errorf("expression %q divides by zero", p.s)
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
		return 0, fmt.Errorf("expression %q ends early", p.s)
	}
	c := p.s[p.i]
	switch {
	case c == '(':
		p.depth++
		if p.depth > 64 {
			return 0, fmt.Errorf("expression %q nests too deep", p.s)
		}
		p.i++
		v, err := p.expr()
		if err != nil {
			return 0, err
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return 0, fmt.Errorf("expression %q: missing )", p.s)
		}
		p.i++
		p.depth--
		return v, nil
	case c == '-':
		p.i++
		v, err := p.factor()
		return -v, err
	case c >= '0' && c <= '9':
		j := p.i
		for j < len(p.s) && (p.s[j] >= '0' && p.s[j] <= '9' || p.s[j] == '_') {
			j++
		}
		v, err := strconv.ParseInt(strings.ReplaceAll(p.s[p.i:j], "_", ""), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("expression %q: %s is not a 64-bit integer", p.s, p.s[p.i:j])
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
	return 0, fmt.Errorf("expression %q: unexpected %q at position %d", p.s, string(c), p.i+1)
}

func addChecked(a, b int64, src string) (int64, error) {
	s := a + b
	if (a > 0 && b > 0 && s < 0) || (a < 0 && b < 0 && s >= 0) {
		return 0, fmt.Errorf("expression %q overflows 64 bits", src)
	}
	return s, nil
}
