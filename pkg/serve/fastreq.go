package serve

import (
	"encoding/json"
	"strconv"
)

// fastRequest reads the common inference request without encoding/json's reflection, which
// took most of the 9 us serve spent decoding a digits request: an object with "id" (a string)
// and "inputs", objects with "name", "datatype" (strings), "shape" (integers) and "data" (a
// list), each key once and spelled as the protocol spells it, strings of printable ASCII
// without escapes. Anything else (parameters, outputs, null, escapes, other keys or spellings)
// reports !ok and leaves req as it was, and decodeRequest takes encoding/json's path, which
// words the errors. What both accept, both read alike (TestFastRequestAgreesWithJSON).
func fastRequest(body []byte, req *InferRequest) bool {
	s := scanner{b: body}
	var out InferRequest
	seen := 0
	ok := s.object(func(key string) bool {
		switch {
		case key == "id" && seen&1 == 0:
			seen |= 1
			id, ok := s.str()
			out.ID = id
			return ok
		case key == "inputs" && seen&2 == 0:
			seen |= 2
			out.Inputs = []RequestInput{}
			return s.list(func() bool {
				in, ok := s.input()
				out.Inputs = append(out.Inputs, in)
				return ok
			})
		}
		return false
	})
	s.ws()
	if !ok || s.i != len(s.b) {
		return false
	}
	*req = out
	return true
}

// scanner walks JSON bytes; every method skips the whitespace before what it reads and reports
// false on anything outside fastRequest's subset.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c if it comes next.
func (s *scanner) next(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling member with each key to read its value.
func (s *scanner) object(member func(key string) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		key, ok := s.str()
		if !ok || !s.next(':') || !member(key) {
			return false
		}
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// list reads [elem, ...], calling elem to read each element.
func (s *scanner) list(elem func() bool) bool {
	if !s.next('[') {
		return false
	}
	if s.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.next(']') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// str reads a string of printable ASCII without escapes.
func (s *scanner) str() (string, bool) {
	if !s.next('"') {
		return "", false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return string(s.b[start : s.i-1]), true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return "", false
		}
		s.i++
	}
	return "", false
}

// input reads one element of "inputs".
func (s *scanner) input() (RequestInput, bool) {
	var in RequestInput
	seen := 0
	ok := s.object(func(key string) bool {
		bit := 0
		switch key {
		case "name":
			bit = 1
		case "datatype":
			bit = 2
		case "shape":
			bit = 4
		case "data":
			bit = 8
		}
		if bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
		var ok bool
		switch key {
		case "name":
			in.Name, ok = s.str()
		case "datatype":
			in.Datatype, ok = s.str()
		case "shape":
			in.Shape, ok = s.ints()
		default:
			in.Data, ok = s.data()
		}
		return ok
	})
	return in, ok
}

// ints reads a list of integers as encoding/json reads them into []int64: no fraction, no
// exponent, within int64.
func (s *scanner) ints() ([]int64, bool) {
	out := []int64{}
	ok := s.list(func() bool {
		s.ws()
		start := s.i
		if s.i < len(s.b) && s.b[s.i] == '-' {
			s.i++
		}
		digits := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == digits || s.b[digits] == '0' && s.i-digits > 1 {
			return false // no digits, or a leading zero JSON does not allow
		}
		v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
		out = append(out, v)
		return err == nil
	})
	return out, ok
}

// data takes a list's bytes as they are, for decodeData, as json.RawMessage would: lists,
// numbers and true/false/null only (no strings or objects), and valid JSON.
func (s *scanner) data() (json.RawMessage, bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return nil, false
	}
	start, depth := s.i, 0
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '[':
			depth++
		case c == ']':
			depth--
			if depth == 0 {
				s.i++
				raw := s.b[start:s.i]
				return raw, json.Valid(raw)
			}
		case c == '"' || c == '{' || c == '}':
			return nil, false
		}
	}
	return nil, false
}
