package cpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// libtorch's ATen kernels dispatching below the CPU's best ISA is a warning whose fix fits the
// build: the variable when the build has the kernels, another build when it has not.
func TestATenISAFinding(t *testing.T) {
	avx512 := ISA{AVX: true, AVX2: true, FMA: true, AVX512F: true, AVX512BW: true, AVX512VL: true, AVX512DQ: true, AVX512VNNI: true}
	avx2 := ISA{AVX: true, AVX2: true, FMA: true}
	withKernels := map[string]string{"PERF_WITH_AVX2": "1", "PERF_WITH_AVX512": "1"}
	for _, c := range []struct {
		isa          ISA
		cap          string
		build, env   map[string]string
		want, wantFx string
	}{
		{avx512, "AVX2", nil, nil, "offers AVX512 (avx512_core_vnni)", "use a libtorch built with AVX512 kernels"},
		{avx512, "AVX2", withKernels, nil, "offers AVX512", "export ATEN_CPU_CAPABILITY=avx512"},
		{avx512, "AVX2", withKernels, map[string]string{"ATEN_CPU_CAPABILITY": "avx2"}, "offers AVX512", "ATEN_CPU_CAPABILITY=avx2 is set"},
		{avx512, "AVX512", nil, nil, "", ""},
		{avx2, "AVX2", nil, nil, "", ""},
		{avx2, "DEFAULT", nil, nil, "offers AVX2", "AVX2 kernels"},
		{avx512, "", nil, nil, "", ""},
	} {
		p := &Probe{ISA: c.isa, Env: c.env, Torch: &TorchInfo{CPUCapability: c.cap, Build: c.build}}
		f := atenISAFinding(p)
		switch {
		case c.want == "" && f != nil:
			t.Errorf("%s on %s: unexpected finding %q", c.cap, c.isa.Level(), f.Message)
		case c.want != "" && (f == nil || !strings.Contains(f.Message, c.want) || !strings.Contains(f.Fix, c.wantFx) || f.Code != "libtorch-isa-below-cpu" || f.Severity != Warning):
			t.Errorf("%s on %s (build %v, env %v): finding %+v, want %q / %q", c.cap, c.isa.Level(), c.build, c.env, f, c.want, c.wantFx)
		}
	}
	// Detect reports it among the findings: Debian's libtorch 1.13 (AVX2 dispatch, AVX-512
	// kernels built in) on an AVX-512 VNNI Xeon; ATEN_CPU_CAPABILITY is read from the
	// environment.
	show, err := os.ReadFile("testdata/torch-1.13-debian.show_config.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range [][]string{nil, {"ATEN_CPU_CAPABILITY=avx2"}} {
		p, err := Detect(Options{Root: filepath.Join("testdata", "xeon-2s"), Env: env, Torch: &TorchInfo{ShowConfig: string(show)}})
		if err != nil {
			t.Fatal(err)
		}
		want := "export ATEN_CPU_CAPABILITY=avx512"
		if env != nil {
			want = "ATEN_CPU_CAPABILITY=avx2 is set"
		}
		if f := findingOf(p, "libtorch-isa-below-cpu"); f == nil || !strings.Contains(f.Fix, want) {
			t.Errorf("env %v: libtorch-isa-below-cpu finding %+v, want a fix with %q (all: %+v)", env, f, want, p.Findings)
		}
	}
}

// A failed oneDNN check is a warning finding carrying its reason, and printed with libtorch;
// a passed or absent one is neither.
func TestOneDNNBrokenFinding(t *testing.T) {
	reason := "libtorch's oneDNN (MKLDNN) kernels failed a check on this machine: mkldnn check: libtorch's FP32 convolution of a batch of 2 with 17 input channels gives wrong results here"
	for _, c := range []struct {
		check, line string
		want        bool
	}{
		{reason, "oneDNN check FAILED: " + reason, true},
		{OneDNNPassed, "oneDNN check passed", false},
		{"", "", false},
	} {
		p := &Probe{Torch: &TorchInfo{Version: "2.6.0", OneDNN: "v3.7.2", ShowConfig: "oneDNN v3.7.2", OneDNNCheck: c.check}}
		p.Findings = findings(p)
		f := findingOf(p, "onednn-broken")
		if (f != nil) != c.want || f != nil && (f.Severity != Warning || f.Message != reason || !strings.Contains(f.Fix, "optimize_for_inference")) {
			t.Errorf("check %q: finding %+v, want one: %v", c.check, f, c.want)
		}
		var b strings.Builder
		if err := p.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if c.line != "" && !strings.Contains(b.String(), c.line) || c.line == "" && strings.Contains(b.String(), "oneDNN check") {
			t.Errorf("check %q: text lacks %q or shows a check that did not run:\n%s", c.check, c.line, b.String())
		}
	}
}

// ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) below the CPU's level is a warning; ALL, an equal
// or higher level, or an unknown name is not.
func TestOneDNNISAFinding(t *testing.T) {
	vnni := ISA{AVX: true, AVX2: true, FMA: true, AVX512F: true, AVX512BW: true, AVX512VL: true, AVX512DQ: true, AVX512VNNI: true}
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"ONEDNN_MAX_CPU_ISA": "AVX2"}, true},
		{map[string]string{"DNNL_MAX_CPU_ISA": "avx512_core"}, true},
		{map[string]string{"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, false},
		{map[string]string{"ONEDNN_MAX_CPU_ISA": "ALL"}, false},
		{map[string]string{"ONEDNN_MAX_CPU_ISA": "bogus"}, false},
		{nil, false},
	} {
		f := oneDNNISAFinding(&Probe{ISA: vnni, Env: c.env})
		if (f != nil) != c.want || f != nil && (f.Code != "onednn-isa-capped" || !strings.Contains(f.Message, "avx512_core_vnni")) {
			t.Errorf("env %v: finding %+v, want one: %v", c.env, f, c.want)
		}
	}
}

func findingOf(p *Probe, code string) *Finding {
	for i := range p.Findings {
		if p.Findings[i].Code == code {
			return &p.Findings[i]
		}
	}
	return nil
}
