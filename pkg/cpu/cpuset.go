package cpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// CPUSet is a sorted set of logical CPU numbers without duplicates. The zero value is
// the empty set. Its text form is the kernel's list format ("0-3,8,10-11"), which is
// what /sys, /proc/self/status, cgroups, numactl and taskset all use, so a user can
// paste it anywhere.
type CPUSet []int

// ParseCPUList parses the kernel list format: comma-separated numbers and inclusive
// ranges, optionally with a stride ("0-15:2" as in cpuset(7)). Blank input is the empty
// set; whitespace and a trailing newline are ignored.
func ParseCPUList(s string) (CPUSet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		stride := 1
		if rng, st, ok := strings.Cut(part, ":"); ok {
			n, err := strconv.Atoi(st)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("cpu list %q: bad stride %q in %q; write e.g. 0-15:2", s, st, part)
			}
			stride, part = n, rng
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: %q is not a CPU number; write e.g. 0-3,8", s, part)
		}
		b := a
		if isRange {
			b, err = strconv.Atoi(hi)
			if err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: %q is not a range low-high; write e.g. 0-3,8", s, part)
			}
		}
		if b-a > 1<<20 {
			return nil, fmt.Errorf("cpu list %q: range %q is too large", s, part)
		}
		for c := a; c <= b; c += stride {
			out = append(out, c)
		}
	}
	return NewCPUSet(out...), nil
}

// MustParseCPUList is ParseCPUList for constants in tests and tables; it panics on a
// malformed list, so never feed it user input.
func MustParseCPUList(s string) CPUSet {
	set, err := ParseCPUList(s)
	if err != nil {
		panic(err)
	}
	return set
}

// NewCPUSet returns the set of the given CPUs, sorted, without duplicates.
func NewCPUSet(cpus ...int) CPUSet {
	if len(cpus) == 0 {
		return nil
	}
	out := slices.Clone(cpus)
	slices.Sort(out)
	return CPUSet(slices.Compact(out))
}

// String formats the set in the kernel list format; the empty set is "".
func (s CPUSet) String() string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Len is the number of CPUs in the set.
func (s CPUSet) Len() int { return len(s) }

// Contains reports whether cpu is in the set.
func (s CPUSet) Contains(cpu int) bool {
	_, ok := slices.BinarySearch(s, cpu)
	return ok
}

// Intersect returns the CPUs in both sets.
func (s CPUSet) Intersect(o CPUSet) CPUSet {
	var out []int
	for _, c := range s {
		if o.Contains(c) {
			out = append(out, c)
		}
	}
	return CPUSet(out)
}

// Minus returns the CPUs of s that are not in o.
func (s CPUSet) Minus(o CPUSet) CPUSet {
	var out []int
	for _, c := range s {
		if !o.Contains(c) {
			out = append(out, c)
		}
	}
	return CPUSet(out)
}

// Union returns the CPUs in either set.
func (s CPUSet) Union(o CPUSet) CPUSet {
	return NewCPUSet(append(slices.Clone(s), o...)...)
}

// IsSubsetOf reports whether every CPU of s is in o.
func (s CPUSet) IsSubsetOf(o CPUSet) bool {
	return len(s.Minus(o)) == 0
}

// Equal reports whether both sets hold the same CPUs.
func (s CPUSet) Equal(o CPUSet) bool { return slices.Equal(s, o) }

// MarshalJSON writes the set as an array of CPU numbers; the empty set is [] rather than
// null, so scripts can iterate without a nil check.
func (s CPUSet) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('[')
	for i, c := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c))
	}
	b.WriteByte(']')
	return []byte(b.String()), nil
}

// UnmarshalJSON accepts an array of CPU numbers or a kernel list string ("0-3,8").
func (s *CPUSet) UnmarshalJSON(data []byte) error {
	t := strings.TrimSpace(string(data))
	if t == "null" {
		*s = nil
		return nil
	}
	if strings.HasPrefix(t, `"`) {
		str, err := strconv.Unquote(t)
		if err != nil {
			return fmt.Errorf("cpu set %s: %w", t, err)
		}
		set, err := ParseCPUList(str)
		if err != nil {
			return err
		}
		*s = set
		return nil
	}
	t = strings.TrimSuffix(strings.TrimPrefix(t, "["), "]")
	var cpus []int
	for _, f := range strings.Split(t, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return fmt.Errorf("cpu set %s: %q is not a CPU number", string(data), f)
		}
		cpus = append(cpus, n)
	}
	*s = NewCPUSet(cpus...)
	return nil
}
