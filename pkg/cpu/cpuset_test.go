package cpu

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in, want string
		n        int
		err      string
	}{
		{"", "", 0, ""},
		{"0", "0", 1, ""},
		{"0-3", "0-3", 4, ""},
		{"0-3,8-11\n", "0-3,8-11", 8, ""},
		{"3,1,2,2", "1-3", 3, ""},
		{"0-7:2", "0,2,4,6", 4, ""},
		{" 4 , 5 ", "4-5", 2, ""},
		{"0,,2", "0,2", 2, ""},
		{"a", "", 0, "not a CPU number"},
		{"-1", "", 0, "not a CPU number"},
		{"3-1", "", 0, "not a range"},
		{"0-3:0", "", 0, "bad stride"},
		{"0-9999999999", "", 0, "too large"},
	}
	for _, tc := range tests {
		got, err := ParseCPUList(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseCPUList(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseCPUList(%q): %v", tc.in, err)
			continue
		}
		if got.String() != tc.want || got.Len() != tc.n {
			t.Errorf("ParseCPUList(%q) = %s (%d), want %s (%d)", tc.in, got, got.Len(), tc.want, tc.n)
		}
	}
}

func TestCPUSetOps(t *testing.T) {
	a, b := MustParseCPUList("0-7"), MustParseCPUList("4-11")
	tests := []struct {
		name string
		got  CPUSet
		want string
	}{
		{"intersect", a.Intersect(b), "4-7"},
		{"minus", a.Minus(b), "0-3"},
		{"union", a.Union(b), "0-11"},
		{"empty intersect", a.Intersect(MustParseCPUList("20")), ""},
	}
	for _, tc := range tests {
		if tc.got.String() != tc.want {
			t.Errorf("%s = %s, want %s", tc.name, tc.got, tc.want)
		}
	}
	if !MustParseCPUList("1-2").IsSubsetOf(a) || b.IsSubsetOf(a) || !a.Contains(7) || a.Contains(8) {
		t.Error("subset/contains wrong")
	}
}

func TestCPUSetJSON(t *testing.T) {
	for _, in := range []string{`[0,1,2,8]`, `"0-2,8"`} {
		var s CPUSet
		if err := json.Unmarshal([]byte(in), &s); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if s.String() != "0-2,8" {
			t.Errorf("%s read as %s", in, s)
		}
		b, _ := json.Marshal(s)
		if string(b) != `[0,1,2,8]` {
			t.Errorf("marshal = %s", b)
		}
	}
	b, _ := json.Marshal(CPUSet(nil))
	if string(b) != "[]" {
		t.Errorf("empty set marshals as %s, want []", b)
	}
	var s CPUSet
	if err := json.Unmarshal([]byte(`[1,"x"]`), &s); err == nil {
		t.Error("bad array accepted")
	}
}
