package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

func TestISAFinding(t *testing.T) {
	avx512 := cpu.ISA{AVX: true, AVX2: true, FMA: true, AVX512F: true, AVX512BW: true, AVX512VL: true, AVX512DQ: true, AVX512VNNI: true}
	avx2 := cpu.ISA{AVX: true, AVX2: true, FMA: true}
	for _, c := range []struct {
		isa  cpu.ISA
		cap  string
		want string
	}{
		{avx512, "AVX2", "offers AVX512 (avx512_core_vnni)"},
		{avx512, "AVX512", ""},
		{avx2, "AVX2", ""},
		{avx2, "DEFAULT", "offers AVX2"},
		{avx512, "", ""},
	} {
		p := &cpu.Probe{ISA: c.isa, Torch: &cpu.TorchInfo{CPUCapability: c.cap}}
		f := isaFinding(p)
		switch {
		case c.want == "" && f != nil:
			t.Errorf("%s on %s: unexpected finding %q", c.cap, c.isa.Level(), f.Message)
		case c.want != "" && (f == nil || !strings.Contains(f.Message, c.want) || f.Code != "libtorch-isa-below-cpu"):
			t.Errorf("%s on %s: finding %+v, want %q", c.cap, c.isa.Level(), f, c.want)
		}
	}
}

func TestEmptyLists(t *testing.T) {
	type inner struct{ L []int }
	v := struct {
		A []string
		M map[string]int
		P *inner
		N *inner
		n []int // unexported: left alone
	}{P: &inner{}}
	emptyLists(&v)
	b, err := json.Marshal(v)
	if err != nil || string(b) != `{"A":[],"M":{},"P":{"L":[]},"N":null}` || v.n != nil {
		t.Errorf("%s %v", b, err)
	}
}
