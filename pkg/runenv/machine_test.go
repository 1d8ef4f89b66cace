package runenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

func candidateNames(cs []Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// Huge pages and AVX-512 are candidates only where they can change something: the kernel's
// THP mode (from a fixture's sysfs), glibc's version, the CPU's AVX-512 and libtorch's
// default dispatch.
func TestCandidatesMachine(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libjemalloc.so.2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := Settings{Threads: 2, OpenMP: "gnu"}
	madvise := MachineOf(probeFixture(t, "xeon-2s"))
	if madvise.THP != "madvise" {
		t.Fatalf("xeon-2s fixture: THP %q, want madvise", madvise.THP)
	}
	never := MachineOf(probeFixture(t, "container-v1"))
	if never.THP != "never" || never.HugePagesOK() {
		t.Fatalf("container-v1 fixture: THP %q", never.THP)
	}
	madvise.Glibc, madvise.AVX512, madvise.CPUCapability, madvise.Libtorch = "2.36", true, "AVX2", "1.13.1"
	for _, c := range []struct {
		name string
		m    func(Machine) Machine
		want []string
	}{
		{"glibc 2.36, THP madvise, AVX-512 off in libtorch", func(m Machine) Machine { return m },
			[]string{"jemalloc", "thp", "jemalloc-thp", "avx512"}},
		{"THP always", func(m Machine) Machine { m.THP = "always"; return m }, []string{"thp", "jemalloc-thp", "avx512"}},
		{"THP never", func(m Machine) Machine { m.THP = "never"; return m }, []string{"jemalloc", "avx512"}},
		{"glibc 2.34 has no hugetlb tunable", func(m Machine) Machine { m.Glibc = "2.34"; return m }, []string{"jemalloc-thp", "avx512"}},
		{"not glibc", func(m Machine) Machine { m.Glibc = ""; return m }, []string{"jemalloc-thp"}},
		{"libtorch already dispatches to AVX512", func(m Machine) Machine { m.CPUCapability = "AVX512"; return m }, []string{"thp"}},
		{"no AVX-512", func(m Machine) Machine { m.AVX512 = false; return m }, []string{"thp"}},
	} {
		names := candidateNames(Candidates(s, c.m(madvise), []string{dir}))
		for _, w := range c.want {
			if !slices.Contains(names, w) {
				t.Errorf("%s: candidates %v lack %s", c.name, names, w)
			}
		}
		m := c.m(madvise)
		if has := slices.Contains(names, "thp"); has != m.HugePagesOK() {
			t.Errorf("%s: thp offered %v, HugePagesOK %v", c.name, has, m.HugePagesOK())
		}
		if has := slices.Contains(names, "avx512"); has != (m.AVX512 && m.CPUCapability != "AVX512") {
			t.Errorf("%s: avx512 offered %v", c.name, has)
		}
		if has := slices.Contains(names, "jemalloc-thp"); has != (m.THP != "never") {
			t.Errorf("%s: jemalloc-thp offered %v", c.name, has)
		}
	}
	env := map[string]string{}
	for _, c := range Candidates(s, madvise, []string{dir}) {
		e, err := c.Env("gnu")
		if err != nil {
			t.Fatal(err)
		}
		env[c.Name] = strings.Join(e, " ")
	}
	want := map[string]string{
		"thp":          "GLIBC_TUNABLES=glibc.malloc.hugetlb=1",
		"jemalloc-thp": "MALLOC_CONF=thp:always,metadata_thp:auto LD_PRELOAD=" + filepath.Join(dir, "libjemalloc.so.2"),
		"avx512":       "ATEN_CPU_CAPABILITY=avx512",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s: env %q, want %q", k, env[k], v)
		}
	}
	// A candidate applied on top of settings that carry another's variables replaces them.
	thp, _ := Candidate{Name: "thp", Allocator: "default", HugePages: true}.Apply(s)
	back, err := Candidate{Name: "avx512", CPUCapability: "avx512"}.Apply(thp)
	if err != nil {
		t.Fatal(err)
	}
	if m := varMap(back); m["GLIBC_TUNABLES"] != "" || m["ATEN_CPU_CAPABILITY"] != "avx512" {
		t.Errorf("avx512 over thp: %v", back.Vars)
	}
	// tcmalloc has no huge page switch: nothing is set, and a note says so.
	tc, err := Candidate{Name: "x", Allocator: "tcmalloc", AllocatorPath: "/t.so", HugePages: true}.Apply(s)
	if err != nil || len(tc.Vars) != 0 || !strings.Contains(strings.Join(tc.Notes, " "), "tcmalloc") {
		t.Errorf("tcmalloc with huge pages: %v %v %v", tc.Vars, tc.Notes, err)
	}
	if _, err := (Candidate{Name: "bad", CPUCapability: "avx9"}).Apply(s); err == nil || !strings.Contains(err.Error(), "avx9") {
		t.Errorf("bad capability: %v", err)
	}
}

func TestVersionAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"2.35": true, "2.36": true, "2.4": false, "2.34": false, "3.0": true, "": false, "x.y": false, "2": false, "2.35.1": true} {
		if got := versionAtLeast(v, 2, 35); got != want {
			t.Errorf("versionAtLeast(%q, 2.35) = %v", v, got)
		}
	}
}

// GLIBC_TUNABLES and MALLOC_CONF hold lists a user may already have: ours are merged in, last
// (so they win), and the rest of the user's stays.
func TestListVarsMerge(t *testing.T) {
	s, err := Candidate{Name: "thp", Allocator: "default", HugePages: true}.Apply(Settings{Threads: 2, OpenMP: "gnu"})
	if err != nil {
		t.Fatal(err)
	}
	get := func(env []string, name string) string {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, name+"="); ok {
				return v
			}
		}
		return "(unset)"
	}
	for base, want := range map[string]string{
		"":                         "glibc.malloc.hugetlb=1",
		"glibc.malloc.arena_max=2": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1",
		"glibc.malloc.hugetlb=0:glibc.pthread.x=1": "glibc.pthread.x=1:glibc.malloc.hugetlb=1",
		"glibc.malloc.hugetlb=0":                   "glibc.malloc.hugetlb=1",
	} {
		env := []string{"PATH=/bin"}
		if base != "" {
			env = append(env, "GLIBC_TUNABLES="+base)
		}
		out := s.Environ(env)
		if got := get(out, "GLIBC_TUNABLES"); got != want {
			t.Errorf("GLIBC_TUNABLES %q: merged %q, want %q", base, got, want)
		}
		if !listHas("GLIBC_TUNABLES", get(out, "GLIBC_TUNABLES"), glibcHugeTunable) {
			t.Errorf("%q: merged value lacks ours", base)
		}
	}
	if listHas("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1:glibc.malloc.hugetlb=0", glibcHugeTunable) {
		t.Error("a later entry overrides ours; listHas missed it")
	}
	if got := mergeList("MALLOC_CONF", "narenas:2,thp:never", jemallocTHPConf); got != "narenas:2,"+jemallocTHPConf {
		t.Errorf("MALLOC_CONF merged %q", got)
	}
	if sh := s.ShellExports(); !strings.Contains(sh, `export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}"glibc.malloc.hugetlb=1`) {
		t.Errorf("shell exports:\n%s", sh)
	}
}

// ScrubEnv leaves libtorch's defaults: no ATen ISA override, no jemalloc configuration, and
// no huge page tunable (the user's other tunables stay).
func TestScrubEnvMemoryAndISA(t *testing.T) {
	got := ScrubEnv([]string{"PATH=/bin", "ATEN_CPU_CAPABILITY=avx512", "MALLOC_CONF=thp:always",
		"GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.arena_max=2", "HOME=/h"})
	if s := strings.Join(got, " "); s != "PATH=/bin GLIBC_TUNABLES=glibc.malloc.arena_max=2 HOME=/h" {
		t.Errorf("scrubbed %q", s)
	}
	if got := ScrubEnv([]string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}); len(got) != 0 {
		t.Errorf("a tunables list of only ours: %v", got)
	}
}

func TestCombine(t *testing.T) {
	thp := Candidate{Name: "thp", Allocator: "default", HugePages: true}
	passive := Candidate{Name: "passive", WaitPolicy: "PASSIVE"}
	avx := Candidate{Name: "avx512", CPUCapability: "avx512"}
	c, ok := Combine(thp, passive)
	if !ok || c.Name != "thp+passive" || !c.HugePages || c.WaitPolicy != "PASSIVE" {
		t.Fatalf("thp+passive: %+v %v", c, ok)
	}
	c, ok = Combine(c, avx)
	if !ok || c.Name != "thp+passive+avx512" || c.CPUCapability != "avx512" || !slices.Equal(c.Kinds(), []string{"wait", "memory", "isa"}) {
		t.Fatalf("three: %+v %v", c, ok)
	}
	if _, ok := Combine(thp, Candidate{Name: "jemalloc", Allocator: "jemalloc", AllocatorPath: "/j.so"}); ok {
		t.Error("two allocators combined")
	}
	if _, ok := Combine(thp, Candidate{Name: DefaultCandidate, Allocator: "default"}); ok {
		t.Error("combined with the defaults")
	}
	env, err := c.Env("gnu")
	if err != nil || strings.Join(env, " ") != "OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=0 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 ATEN_CPU_CAPABILITY=avx512" {
		t.Errorf("combined env %v %v", env, err)
	}
}

// OpenBLAS's AVX-512 kernels are a candidate only where OpenBLAS can be told to use them
// (DYNAMIC_ARCH), chose others, and the CPU has the instructions; a manifest's choice is
// dropped on a CPU without them.
func TestOpenBLASCandidate(t *testing.T) {
	const haswell = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
	zen4 := Machine{AVX512: true, CPUCapability: "AVX512", OpenBLAS: haswell}
	for _, c := range []struct {
		name string
		m    Machine
		want bool
	}{
		{"AVX-512 CPU, Haswell kernels", zen4, true},
		{"already Skylake-X kernels", Machine{AVX512: true, OpenBLAS: strings.Replace(haswell, "Haswell", "SkylakeX", 1)}, false},
		{"a build for one core", Machine{AVX512: true, OpenBLAS: "OpenBLAS 0.3.21 NO_AFFINITY Haswell MAX_THREADS=64"}, false},
		{"no AVX-512", Machine{OpenBLAS: haswell}, false},
		{"not OpenBLAS", Machine{AVX512: true}, false},
		{"no core named", Machine{AVX512: true, OpenBLAS: "OpenBLAS 0.3.21 DYNAMIC_ARCH MAX_THREADS=64"}, false},
	} {
		var got *Candidate
		for _, cand := range Candidates(Settings{Threads: 1, OpenMP: "gnu"}, c.m, []string{t.TempDir()}) {
			if cand.BLASCore != "" {
				got = &cand
			}
		}
		if (got != nil) != c.want {
			t.Errorf("%s: offered %v, want %v", c.name, got != nil, c.want)
			continue
		}
		if got == nil {
			continue
		}
		if got.Name != "openblas-avx512" || got.BLASCore != "SkylakeX" || !strings.Contains(got.Why, "Haswell") || !slices.Equal(got.Kinds(), []string{"blas"}) {
			t.Errorf("%s: %+v", c.name, *got)
		}
		env, err := got.Env("gnu")
		if err != nil || strings.Join(env, " ") != "OPENBLAS_CORETYPE=SkylakeX" {
			t.Errorf("%s: env %v %v", c.name, env, err)
		}
		s, err := got.Apply(Settings{Threads: 1, OpenMP: "gnu"})
		if err != nil || s.BLASCore != "SkylakeX" || varMap(s)["OPENBLAS_CORETYPE"] != "SkylakeX" {
			t.Errorf("%s: applied %+v %v", c.name, s, err)
		}
		// Another candidate applied over it takes the variable away.
		if back, err := (Candidate{Name: DefaultCandidate, Allocator: "default"}).Apply(s); err != nil || varMap(back)["OPENBLAS_CORETYPE"] != "" {
			t.Errorf("%s: defaults over it: %v %v", c.name, back.Vars, err)
		}
	}
	blas := Candidate{Name: "openblas-avx512", BLASCore: "SkylakeX"}
	c, ok := Combine(Candidate{Name: "avx512", CPUCapability: "avx512"}, blas)
	if env, err := c.Env("gnu"); !ok || err != nil || strings.Join(env, " ") != "ATEN_CPU_CAPABILITY=avx512 OPENBLAS_CORETYPE=SkylakeX" {
		t.Errorf("avx512+openblas-avx512: %+v %v %v %v", c, ok, env, err)
	}
	if _, err := (Candidate{Name: "bad", BLASCore: "Pentium9"}).Apply(Settings{}); err == nil || !strings.Contains(err.Error(), "Pentium9") {
		t.Errorf("bad core: %v", err)
	}
	// An artifact measured on an AVX-512 machine, run on one without.
	fit, notes := c.Fit(Machine{AVX2: true, Name: "AMD EPYC 7763"}, "AMD EPYC 9B45")
	if fit.BLASCore != "" || fit.CPUCapability != "" || len(notes) != 2 || !strings.Contains(notes[1], "OPENBLAS_CORETYPE=SkylakeX") ||
		!strings.Contains(notes[0], "ATEN_CPU_CAPABILITY=avx512") || !strings.Contains(notes[0], "measured on AMD EPYC 9B45") ||
		!strings.Contains(notes[0], "AMD EPYC 7763") {
		t.Errorf("fit without AVX-512: %+v %v", fit, notes)
	}
	if fit, notes := c.Fit(zen4, ""); fit.BLASCore != "SkylakeX" || len(notes) != 0 {
		t.Errorf("fit with AVX-512: %+v %v", fit, notes)
	}
	if got := ScrubEnv([]string{"PATH=/bin", "OPENBLAS_CORETYPE=SkylakeX"}); strings.Join(got, " ") != "PATH=/bin" {
		t.Errorf("scrubbed %v", got)
	}
	// MachineOf reads OpenBLAS's configuration from the probe's libtorch facts.
	p := probeFixture(t, "xeon-2s")
	p.Torch = &cpu.TorchInfo{Version: "1.13.1", BLAS: &cpu.BLASInfo{Library: "openblas", Config: haswell}}
	if m := MachineOf(p); m.OpenBLAS != haswell {
		t.Errorf("MachineOf: OpenBLAS %q", m.OpenBLAS)
	}
	p.Torch.BLAS.Library = "mkl"
	if m := MachineOf(p); m.OpenBLAS != "" {
		t.Errorf("MachineOf with another BLAS: OpenBLAS %q", m.OpenBLAS)
	}
}
