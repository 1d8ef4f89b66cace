package config

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/internal/memlimit"
)

// The checks every place that builds inputs or sets thread counts shares: a size a user gives
// (flag, config, an artifact's manifest) is checked before anything is allocated, so a typo
// cannot crash the process with Go's out-of-memory fatal error or a makeslice panic, and a
// thread count is checked before libtorch truncates it to a C int or starts thousands of
// threads.

// dtypeSizes are the bytes per element of the input dtypes torchspeed makes.
var dtypeSizes = map[string]int64{"float32": 4, "float64": 8, "int64": 8, "int32": 4, "uint8": 1, "bool": 1, "int8": 1, "float16": 2, "bfloat16": 2}

// DTypeSize is the bytes per element of a dtype name ("float32", "int64", ...); false when
// the name is unknown.
func DTypeSize(dtype string) (int64, bool) {
	if dtype == "" {
		dtype = "float32"
	}
	n, ok := dtypeSizes[dtype]
	return n, ok
}

// InputBytes is the element count and byte size of a tensor of shape with elemSize-byte
// elements, without overflow: an error when a dimension is negative or either figure does not
// fit in an int64 (or a Go slice).
func InputBytes(shape []int64, elemSize int64) (elems, size int64, err error) {
	elems = 1
	for _, d := range shape {
		if d < 0 {
			return 0, 0, fmt.Errorf("dimension %d is negative", d)
		}
		hi, lo := bits.Mul64(uint64(elems), uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return 0, 0, fmt.Errorf("shape %s has more than %d elements", FormatShape(shape), int64(math.MaxInt))
		}
		elems = int64(lo)
	}
	hi, lo := bits.Mul64(uint64(elems), uint64(elemSize))
	if hi != 0 || lo > math.MaxInt {
		return 0, 0, fmt.Errorf("shape %s needs more than %d bytes", FormatShape(shape), int64(math.MaxInt))
	}
	return elems, int64(lo), nil
}

// copiesPerInput is how many times an input's bytes are held while it is made: the Go
// buffer and libtorch's tensor copied from it.
const copiesPerInput = 2

// AvailableMemory is the memory this process may still allocate, in bytes, and where the
// figure comes from: the smaller of MemAvailable (/proc/meminfo) and the cgroup's limit less
// its usage. 0 when unknown (then only overflow is checked). A variable so tests can set it.
var AvailableMemory = memlimit.Available

// InputSpec is an input to check: a name for messages, a shape and a dtype name.
type InputSpec struct {
	Name  string
	Shape []int64
	DType string
}

// CheckInputs refuses inputs that cannot be allocated: an element count or byte size that
// overflows, or inputs that together need more memory than is available. what names where
// they came from ("--input-shape", "model.inputs", "the manifest of x.pt") for the message.
func CheckInputs(what string, ins []InputSpec) error {
	var total int64
	for i, in := range ins {
		name := in.Name
		if name == "" {
			name = fmt.Sprintf("input %d", i)
		}
		es, ok := DTypeSize(in.DType)
		if !ok {
			return fmt.Errorf("%s: %s: dtype %q is not one of %s", what, name, in.DType, strings.Join(knownDTypes(), ", "))
		}
		_, n, err := InputBytes(in.Shape, es)
		if err != nil {
			return fmt.Errorf("%s: %s: %v: give the real shape, e.g. 1x3x224x224", what, name, err)
		}
		if total > math.MaxInt64-n {
			return fmt.Errorf("%s: the inputs together need more than %d bytes: give the real shapes", what, int64(math.MaxInt64))
		}
		total += n
	}
	avail, source := AvailableMemory()
	if avail > 0 && total > avail/copiesPerInput {
		return fmt.Errorf("%s: the inputs (%s) need %s (x%d while they are made), %s is available (%s): use smaller shapes, e.g. batch 1",
			what, describeInputs(ins), FormatBytes(total), copiesPerInput, FormatBytes(avail), source)
	}
	return nil
}

func knownDTypes() []string {
	return []string{"float32", "float64", "int64", "int32", "uint8", "bool"}
}

func describeInputs(ins []InputSpec) string {
	parts := make([]string, len(ins))
	for i, in := range ins {
		dt := in.DType
		if dt == "" {
			dt = "float32"
		}
		parts[i] = FormatShape(in.Shape) + " " + dt
		if in.Name != "" {
			parts[i] = in.Name + " " + parts[i]
		}
	}
	return strings.Join(parts, ", ")
}

// FormatBytes writes a byte count in binary units, e.g. "1.5 GiB".
func FormatBytes(n int64) string { return memlimit.FormatBytes(n) }

// ParseShape reads a shape written "1x3x224x224" (also "1,3,224,224"). Every dimension is a
// whole number >= 0 that fits an int64.
func ParseShape(s string) ([]int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("empty shape: write it like 1x3x224x224")
	}
	var shape []int64
	for _, p := range strings.FieldsFunc(s, func(r rune) bool { return r == 'x' || r == ',' || r == 'X' }) {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a dimension: write the shape like 1x3x224x224", p)
		}
		shape = append(shape, v)
	}
	return shape, nil
}

// FormatShape writes a shape as ParseShape reads it, e.g. "1x3x224x224".
func FormatShape(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return strings.Join(parts, "x")
}

// AvailableCPUs is the number of CPUs this process may run on (its affinity mask): the most
// threads a count may ask for. A variable so tests can set it.
var AvailableCPUs = runtime.NumCPU

// CheckThreads checks a thread count given under key (a config key or a flag such as
// "--threads"): 1 up to the available CPUs, or 0 when zeroMeans says what 0 stands for
// ("" when 0 is not allowed).
func CheckThreads(key string, n int, zeroMeans string) error {
	avail := AvailableCPUs()
	if n == 0 && zeroMeans != "" {
		return nil
	}
	if n >= 1 && n <= avail {
		return nil
	}
	allowed := fmt.Sprintf("1 to %d (the CPUs this process may use)", avail)
	if zeroMeans != "" {
		allowed = fmt.Sprintf("0 (%s) or %s", zeroMeans, allowed)
	}
	return fmt.Errorf("%s: %d is not allowed: %s", key, n, allowed)
}

// ClampThreads bounds a count read from a file torchspeed wrote on another machine (an
// artifact's manifest) by the CPUs here: it returns the count to use and, when it changed, a
// warning that says so.
func ClampThreads(what string, n int) (int, string) {
	avail := AvailableCPUs()
	switch {
	case n < 0:
		return 0, fmt.Sprintf("%s asks for %d threads; using libtorch's default", what, n)
	case n > avail:
		return avail, fmt.Sprintf("%s asks for %d threads, %d CPUs are available here; using %d", what, n, avail, avail)
	}
	return n, ""
}

// CheckName checks an artifact name (model.name): a file name, not a path, so the artifact
// lands in the output folder and never on top of another file (the input model).
func CheckName(name string) error {
	switch {
	case name == "", name == ".", name == "..":
		return fmt.Errorf("%q is not a file name", name)
	case strings.ContainsAny(name, `/\`):
		return fmt.Errorf("%q has a path separator: give a plain name (the artifact goes into output.dir)", name)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("%q holds a NUL byte", name)
	case len(name) > 200:
		return fmt.Errorf("%q is longer than 200 bytes", name[:40]+"...")
	}
	return nil
}

// CheckRange checks a random integer input's [low, high) range: low < high, the width fits an
// int64, and both ends fit the dtype.
func CheckRange(r []int64, dtype string) error {
	if len(r) == 0 {
		return nil
	}
	if len(r) != 2 || r[0] >= r[1] {
		return errors.New("[low, high) with low < high")
	}
	if r[0] < 0 && r[1] > math.MaxInt64+r[0] {
		return fmt.Errorf("a width high - low of at most %d", int64(math.MaxInt64))
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	switch dtype {
	case "int32":
		lo, hi = math.MinInt32, math.MaxInt32+1
	case "uint8":
		lo, hi = 0, 256
	case "bool":
		lo, hi = 0, 2
	}
	if r[0] < lo || r[1] > hi {
		return fmt.Errorf("within [%d, %d) for %s", lo, hi, dtype)
	}
	return nil
}
