package npy

import (
	"fmt"
	"strconv"
	"strings"
)

// header is the parsed dictionary at the start of a .npy file.
type header struct {
	descr        string
	fortranOrder bool
	shape        []int64
}

// parseHeader parses the Python dict literal of a .npy header, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 224, 224), }.
// It accepts the subset of Python literal syntax numpy writes (and the "3L" long
// suffix of files written by Python 2) and nothing more: a header is never evaluated.
func parseHeader(s string) (header, error) {
	p := &litParser{s: s}
	var h header
	var seen = map[string]bool{}
	p.skipSpace()
	if !p.eat('{') {
		return h, fmt.Errorf("header is not a dict: %q", clip(s))
	}
	for {
		p.skipSpace()
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return h, fmt.Errorf("header key: %v in %q", err, clip(s))
		}
		p.skipSpace()
		if !p.eat(':') {
			return h, fmt.Errorf("header: missing ':' after key %q", key)
		}
		p.skipSpace()
		if seen[key] {
			return h, fmt.Errorf("header: duplicate key %q", key)
		}
		seen[key] = true
		switch key {
		case "descr":
			if p.peek() == '[' {
				return h, fmt.Errorf("structured dtype (record array) is not supported; save each field as its own array")
			}
			h.descr, err = p.str()
			if err != nil {
				return h, fmt.Errorf("header 'descr': %v", err)
			}
		case "fortran_order":
			h.fortranOrder, err = p.boolean()
			if err != nil {
				return h, fmt.Errorf("header 'fortran_order': %v", err)
			}
		case "shape":
			h.shape, err = p.tuple()
			if err != nil {
				return h, fmt.Errorf("header 'shape': %v", err)
			}
		default:
			return h, fmt.Errorf("header has unexpected key %q", key)
		}
		p.skipSpace()
		if p.eat(',') {
			continue
		}
		p.skipSpace()
		if !p.eat('}') {
			return h, fmt.Errorf("header: expected ',' or '}' at offset %d in %q", p.i, clip(s))
		}
		break
	}
	p.skipSpace()
	if p.i != len(p.s) {
		return h, fmt.Errorf("header: unexpected text after the dict: %q", clip(p.s[p.i:]))
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return h, fmt.Errorf("header is missing key %q", k)
		}
	}
	return h, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

type litParser struct {
	s string
	i int
}

func (p *litParser) skipSpace() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *litParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *litParser) eat(c byte) bool {
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

// str parses a single- or double-quoted string without escapes (numpy headers never
// need them).
func (p *litParser) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", fmt.Errorf("expected a quoted string at offset %d", p.i)
	}
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", fmt.Errorf("unterminated string at offset %d", p.i)
	}
	v := p.s[p.i+1 : p.i+1+end]
	if strings.ContainsRune(v, '\\') {
		return "", fmt.Errorf("escaped string %q is not supported", v)
	}
	p.i += end + 2
	return v, nil
}

func (p *litParser) boolean() (bool, error) {
	switch {
	case strings.HasPrefix(p.s[p.i:], "True"):
		p.i += 4
		return true, nil
	case strings.HasPrefix(p.s[p.i:], "False"):
		p.i += 5
		return false, nil
	}
	return false, fmt.Errorf("expected True or False at offset %d", p.i)
}

// tuple parses "()", "(3,)", "(3, 4)" and "(3L, 4L)".
func (p *litParser) tuple() ([]int64, error) {
	if !p.eat('(') {
		return nil, fmt.Errorf("expected a tuple at offset %d", p.i)
	}
	shape := []int64{}
	for {
		p.skipSpace()
		if p.eat(')') {
			return shape, nil
		}
		start := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if start == p.i {
			return nil, fmt.Errorf("expected a non-negative integer at offset %d", p.i)
		}
		d, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("dimension %q: %v", p.s[start:p.i], err)
		}
		shape = append(shape, d)
		p.eat('L')
		p.skipSpace()
		if p.eat(',') {
			continue
		}
		p.skipSpace()
		if !p.eat(')') {
			return nil, fmt.Errorf("expected ',' or ')' at offset %d", p.i)
		}
		if len(shape) == 1 {
			// Python spells a one-element tuple "(3,)"; "(3)" is just an int.
			return nil, fmt.Errorf("one-element shape must be written (%d,)", shape[0])
		}
		return shape, nil
	}
}

// parseDescr maps a numpy type string such as "<f4" or "|b1" to a dtype name and
// whether the data is big-endian.
func parseDescr(descr string) (dtype string, bigEndian bool, err error) {
	if descr == "" {
		return "", false, fmt.Errorf("empty dtype")
	}
	order, code := descr[0], descr[1:]
	switch order {
	case '<', '|':
	case '>':
		bigEndian = true
	case '=':
		bigEndian = nativeBigEndian
	default:
		// numpy always writes an order character; be lenient about its absence.
		code = descr
		bigEndian = nativeBigEndian
	}
	switch code {
	case "f4":
		dtype = Float32
	case "f8":
		dtype = Float64
	case "i8":
		dtype = Int64
	case "i4":
		dtype = Int32
	case "i2":
		dtype = Int16
	case "i1":
		dtype = Int8
	case "u1":
		dtype = Uint8
	case "b1", "?":
		dtype = Bool
	default:
		return "", false, fmt.Errorf("unsupported dtype %q (supported: float32, float64, int64, int32, int16, int8, uint8, bool); convert it with arr.astype(np.float32) or np.int64 before saving", descr)
	}
	return dtype, bigEndian, nil
}

// descrFor returns the little-endian numpy type string written for dtype.
func descrFor(dtype string) string {
	switch dtype {
	case Float32:
		return "<f4"
	case Float64:
		return "<f8"
	case Int64:
		return "<i8"
	case Int32:
		return "<i4"
	case Int16:
		return "<i2"
	case Int8:
		return "|i1"
	case Uint8:
		return "|u1"
	case Bool:
		return "|b1"
	}
	return ""
}

// formatHeader returns the dict literal numpy would write for a.
func formatHeader(a *Array) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{'descr': '%s', 'fortran_order': False, 'shape': (", descrFor(a.DType))
	for i, d := range a.Shape {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	if len(a.Shape) == 1 {
		b.WriteByte(',')
	}
	b.WriteString("), }")
	return b.String()
}
