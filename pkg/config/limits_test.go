package config

import (
	"math"
	"strings"
	"testing"
)

func TestInputBytes(t *testing.T) {
	for _, c := range []struct {
		shape       []int64
		size        int64
		elems, want int64
		err         string
	}{
		{[]int64{1, 3, 224, 224}, 4, 150528, 602112, ""},
		{nil, 8, 1, 8, ""},
		{[]int64{0, 5}, 4, 0, 0, ""},
		{[]int64{4611686018427387904, 3, 1, 1}, 4, 0, 0, "more than"},
		{[]int64{1 << 62}, 4, 0, 0, "bytes"},
		{[]int64{math.MaxInt64, math.MaxInt64}, 1, 0, 0, "elements"},
		{[]int64{2, -1}, 4, 0, 0, "negative"},
	} {
		e, n, err := InputBytes(c.shape, c.size)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.shape, err, c.err)
			}
			continue
		}
		if err != nil || e != c.elems || n != c.want {
			t.Errorf("%v: %d elements %d bytes (%v), want %d %d", c.shape, e, n, err, c.elems, c.want)
		}
	}
}

func TestCheckInputsAgainstMemory(t *testing.T) {
	old := AvailableMemory
	t.Cleanup(func() { AvailableMemory = old })
	AvailableMemory = func() (int64, string) { return 1 << 30, "test" }
	small := []InputSpec{{Name: "x", Shape: []int64{1, 3, 224, 224}, DType: "float32"}}
	if err := CheckInputs("--input-shape", small); err != nil {
		t.Fatal(err)
	}
	// 2 x 300 MiB fit in 1 GiB, but not twice over while they are made.
	big := []InputSpec{{Name: "a", Shape: []int64{300 << 20}, DType: "uint8"}, {Name: "b", Shape: []int64{300 << 20}, DType: "bool"}}
	err := CheckInputs("--input-shape", big)
	if err == nil || !strings.Contains(err.Error(), "need 600.0 MiB") || !strings.Contains(err.Error(), "1.0 GiB is available (test)") {
		t.Fatalf("error %v", err)
	}
	if err := CheckInputs("x", []InputSpec{{Shape: []int64{1}, DType: "complex64"}}); err == nil || !strings.Contains(err.Error(), "input 0") {
		t.Fatalf("unknown dtype: %v", err)
	}
	// The machine's own figure is positive here.
	if n, src := old(); n <= 0 || src == "" {
		t.Errorf("available memory unknown: %d %q", n, src)
	}
}

func TestCheckThreads(t *testing.T) {
	withCPUs(t, 4)
	for _, c := range []struct {
		n    int
		zero string
		ok   bool
	}{{0, "auto", true}, {0, "", false}, {1, "", true}, {4, "", true}, {5, "auto", false}, {-3, "auto", false}, {4294967297, "auto", false}} {
		err := CheckThreads("--threads", c.n, c.zero)
		if (err == nil) != c.ok {
			t.Errorf("%d (zero %q): %v", c.n, c.zero, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "--threads: ") {
			t.Errorf("error does not name the flag: %v", err)
		}
	}
	if n, w := ClampThreads("the manifest", 3000); n != 4 || !strings.Contains(w, "3000") {
		t.Errorf("clamp: %d %q", n, w)
	}
	if n, w := ClampThreads("the manifest", 2); n != 2 || w != "" {
		t.Errorf("clamp kept: %d %q", n, w)
	}
}

func TestParseShape(t *testing.T) {
	if s, err := ParseShape("1x3x224x224"); err != nil || FormatShape(s) != "1x3x224x224" {
		t.Fatalf("%v %v", s, err)
	}
	for _, bad := range []string{"", "1xax8", "1x-3", "99999999999999999999x1"} {
		if _, err := ParseShape(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
