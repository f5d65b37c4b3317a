package kernels

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/acpp/acpp/device"
)

// ErrBadPTX: a PTX module could not be read; the message says where.
var ErrBadPTX = errors.New("kernels: malformed PTX")

// ErrLayout: a launch's arguments do not match the PTX entry's parameters.
var ErrLayout = errors.New("kernels: arguments do not match the PTX entry's parameters")

// EntryParam is one .param of a PTX entry.
type EntryParam struct {
	Name  string
	Size  int // bytes
	Align int // bytes
}

// Entry is one kernel entry point of a PTX module.
type Entry struct {
	Name   string
	Params []EntryParam
}

// NDRangeBytes is the size of the implicit first parameter (struct acpp_nd).
const NDRangeBytes = 48

// Entries parses the .entry directives of a PTX module, in module order.
// It reads only what it needs (names and parameter sizes) and rejects what
// it cannot read with ErrBadPTX and the line.
func Entries(ptx []byte) ([]Entry, error) {
	src := stripComments(string(ptx))
	var out []Entry
	for pos := 0; ; {
		i := indexWord(src[pos:], ".entry")
		if i < 0 {
			return out, nil
		}
		start := pos + i
		line := 1 + strings.Count(src[:start], "\n")
		rest := src[start+len(".entry"):]
		// name, up to '(' or '{' or whitespace
		rest = strings.TrimLeft(rest, " \t\r\n")
		n := 0
		for n < len(rest) && isIdent(rest[n]) {
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: line %d: .entry without a name", ErrBadPTX, line)
		}
		e := Entry{Name: rest[:n]}
		after := strings.TrimLeft(rest[n:], " \t\r\n")
		consumed := len(src) - len(after)
		if strings.HasPrefix(after, "(") {
			end := strings.IndexByte(after, ')')
			if end < 0 {
				return nil, fmt.Errorf("%w: line %d: parameter list of %s not closed", ErrBadPTX, line, e.Name)
			}
			list := strings.TrimSpace(after[1:end])
			if list != "" {
				for j, decl := range strings.Split(list, ",") {
					p, err := parseParam(decl)
					if err != nil {
						return nil, fmt.Errorf("%w: line %d: entry %s parameter %d: %v", ErrBadPTX, line, e.Name, j, err)
					}
					e.Params = append(e.Params, p)
				}
			}
			consumed += end + 1
		}
		out = append(out, e)
		pos = consumed
	}
}

// parseParam reads ".param [.ptr .global .align N] .type name[N]".
func parseParam(decl string) (EntryParam, error) {
	f := strings.Fields(decl)
	if len(f) < 2 || f[0] != ".param" {
		return EntryParam{}, fmt.Errorf("%q is not a .param declaration", strings.TrimSpace(decl))
	}
	var p EntryParam
	elem := 0
	for i := 1; i < len(f); i++ {
		tok := f[i]
		switch {
		case tok == ".align":
			if i+1 >= len(f) {
				return p, fmt.Errorf(".align without a value")
			}
			a, err := strconv.Atoi(f[i+1])
			if err != nil || a <= 0 || a > 4096 || a&(a-1) != 0 {
				return p, fmt.Errorf(".align %q is not a power of two", f[i+1])
			}
			p.Align = a
			i++
		case tok == ".ptr" || tok == ".global" || tok == ".const" || tok == ".shared" || tok == ".local":
		case strings.HasPrefix(tok, "."):
			s := typeSize(tok)
			if s == 0 {
				return p, fmt.Errorf("unknown parameter type %s", tok)
			}
			elem = s
		default:
			name, count := tok, 1
			if b := strings.IndexByte(tok, '['); b >= 0 {
				if !strings.HasSuffix(tok, "]") {
					return p, fmt.Errorf("array parameter %q not closed", tok)
				}
				c, err := strconv.Atoi(tok[b+1 : len(tok)-1])
				if err != nil || c <= 0 || c > 1<<16 {
					return p, fmt.Errorf("array size in %q is not a positive count", tok)
				}
				name, count = tok[:b], c
			}
			if name == "" {
				return p, fmt.Errorf("%q declares no parameter name", strings.TrimSpace(decl))
			}
			if elem == 0 {
				return p, fmt.Errorf("parameter %s has no type", name)
			}
			p.Name, p.Size = name, elem*count
			if p.Align == 0 {
				p.Align = elem
			}
			if i != len(f)-1 {
				return p, fmt.Errorf("unexpected %q after parameter %s", f[i+1], name)
			}
			return p, nil
		}
	}
	return p, fmt.Errorf("%q declares no parameter name", strings.TrimSpace(decl))
}

func typeSize(t string) int {
	switch t {
	case ".b8", ".u8", ".s8":
		return 1
	case ".b16", ".u16", ".s16", ".f16", ".bf16":
		return 2
	case ".b32", ".u32", ".s32", ".f32", ".f16x2", ".bf16x2":
		return 4
	case ".b64", ".u64", ".s64", ".f64":
		return 8
	}
	return 0
}

func isIdent(c byte) bool {
	return c == '_' || c == '$' || c == '%' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// indexWord finds w as a whole directive (not a prefix of a longer one).
func indexWord(s, w string) int {
	for off := 0; ; {
		i := strings.Index(s[off:], w)
		if i < 0 {
			return -1
		}
		j := off + i + len(w)
		if j == len(s) || !isIdent(s[j]) {
			return off + i
		}
		off = j
	}
}

// stripComments removes // and /* */ comments, keeping newlines so line
// numbers stay right.
func stripComments(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				i = len(s)
				break
			}
			b.WriteString(strings.Repeat("\n", strings.Count(s[i:i+2+end+2], "\n")))
			i += 2 + end + 2
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

// ArgBytes is the size of one declared parameter in the parameter buffer
// (see the package documentation), and its alignment.
func ArgBytes(p device.Param) (size, align int) {
	switch p.Kind {
	case device.ArgPointer, device.ArgLocal:
		return 8, 8
	case device.ArgAccessor:
		return 8 + 3*8, 8
	case device.ArgRangedAccessor:
		return 8 + 9*8, 8
	case device.ArgScalar:
		s := p.ElemSize
		a := 1
		for a < s && a < 8 {
			a <<= 1
		}
		return s, a
	}
	return 0, 1
}

// CheckLayout reports whether entry e takes the implicit ND range followed
// by params, laid out as ArgBytes says. The error names the first parameter
// that differs. Scalars declared without a size (ElemSize 0) match any
// single PTX parameter.
func CheckLayout(kernel string, e Entry, params []device.Param) error {
	if len(e.Params) != len(params)+1 {
		return fmt.Errorf("%w: kernel %q declares %d parameters, PTX entry %s takes %d after the ND range; declare one Param per kernel argument", ErrLayout, kernel, len(params), e.Name, len(e.Params)-1)
	}
	if e.Params[0].Size != NDRangeBytes {
		return fmt.Errorf("%w: PTX entry %s does not take the ND range first (a %d-byte struct acpp_nd, see cuda/kernels/src/acpp.cuh); it takes %d bytes", ErrLayout, e.Name, NDRangeBytes, e.Params[0].Size)
	}
	for i, p := range params {
		size, _ := ArgBytes(p)
		got := e.Params[i+1].Size
		if p.Kind == device.ArgScalar && p.ElemSize == 0 {
			continue
		}
		if got != size {
			return fmt.Errorf("%w: kernel %q argument %d (%s) is a %s of %d bytes, PTX entry %s parameter %d (%s) has %d", ErrLayout, kernel, i, p.Name, p.Kind, size, e.Name, i+1, e.Params[i+1].Name, got)
		}
	}
	return nil
}
