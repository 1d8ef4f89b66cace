package runenv

import (
	"fmt"
	"slices"
	"strings"
)

// Candidate is one runtime setting to measure against the OpenMP runtime's own defaults at
// the same thread count: an OpenMP wait policy (with GNU's spin count) and an allocator.
// Settings the runtime reads at start differ only between processes, so a caller measures a
// candidate in a process started with Apply's settings (Settings.Environ), interleaved with
// one started with the defaults, and keeps it only when it wins at p50 without a worse p95.
type Candidate struct {
	// Name identifies the candidate in reports: "default" is the runtime's own.
	Name string `json:"name"`
	// WaitPolicy is "", "PASSIVE" or "ACTIVE"; SpinCount is GOMP_SPINCOUNT with PASSIVE
	// and GNU OpenMP.
	WaitPolicy string `json:"wait_policy"`
	SpinCount  int    `json:"spin_count,omitempty"`
	// Allocator is "" (keep the settings' own), "default" (glibc), "jemalloc" or "tcmalloc";
	// AllocatorPath is the library to preload.
	Allocator     string `json:"allocator,omitempty"`
	AllocatorPath string `json:"allocator_path,omitempty"`
	// HugePages has the allocator back its memory with transparent huge pages: glibc malloc
	// through GLIBC_TUNABLES=glibc.malloc.hugetlb=1, jemalloc through MALLOC_CONF (see
	// memoryVars). CPUCapability is ATEN_CPU_CAPABILITY: the instruction set of ATen's
	// vectorized kernels ("avx512"), "" for libtorch's choice.
	HugePages     bool   `json:"huge_pages,omitempty"`
	CPUCapability string `json:"cpu_capability,omitempty"`
	// BLASCore is OPENBLAS_CORETYPE: the kernels OpenBLAS runs float matmul with
	// ("SkylakeX"), "" for the ones it chooses for the CPU. OpenBLAS forces it without asking
	// the CPU: give it only to machines that have the instructions (Fit).
	BLASCore string `json:"blas_core,omitempty"`
	// Why says what the candidate is for.
	Why string `json:"why"`
}

// DefaultCandidate is the OpenMP runtime's own behaviour: always one of the candidates, and
// the one to keep unless another is measured faster.
const DefaultCandidate = "default"

// Candidates lists the runtime settings worth measuring for s on machine m, the defaults
// first. With one thread the wait policy has nothing to wait for, so only allocators vary.
// Allocators are offered when their library is found (libDirs nil: the system's); huge pages
// when the kernel's transparent huge pages can be asked for (m.HugePagesOK; for jemalloc, with
// jemalloc); ATen's AVX-512 kernels when the CPU has them and libtorch leaves them off;
// OpenBLAS's AVX-512 kernels when the CPU has them and OpenBLAS chose others.
func Candidates(s Settings, m Machine, libDirs []string) []Candidate {
	var jemallocTHP *Candidate
	out := []Candidate{{Name: DefaultCandidate, Allocator: "default", Why: "the OpenMP runtime's own wait policy and glibc malloc, as plain libtorch runs"}}
	if s.Threads > 1 {
		switch s.OpenMP {
		case "gnu", "":
			out = append(out,
				Candidate{Name: "passive-short-spin", WaitPolicy: "PASSIVE", SpinCount: shortSpinCount,
					Why: "workers spin briefly between parallel regions, then sleep: removed tail spikes on a busy shared VM"},
				Candidate{Name: "passive", WaitPolicy: "PASSIVE", SpinCount: 0,
					Why: "workers sleep at once: frees the CPUs between requests, costs a wake-up per parallel region"})
		default:
			out = append(out, Candidate{Name: "passive", WaitPolicy: "PASSIVE",
				Why: "workers sleep at once (KMP_BLOCKTIME=0): frees the CPUs between requests"})
		}
		out = append(out, Candidate{Name: "active", WaitPolicy: "ACTIVE",
			Why: "workers never sleep: for cores that serve nothing else"})
	}
	for _, a := range []string{"jemalloc", "tcmalloc"} {
		if path, err := FindAllocator(a, libDirs); err == nil {
			out = append(out, Candidate{Name: a, Allocator: a, AllocatorPath: path,
				Why: "preloaded " + a + ": fewer page faults on large activations"})
			if a == "jemalloc" && m.thpOn() {
				jemallocTHP = &Candidate{Name: "jemalloc-thp", Allocator: a, AllocatorPath: path, HugePages: true,
					Why: "preloaded jemalloc backing its memory with transparent huge pages (MALLOC_CONF " + jemallocTHPConf + ")"}
			}
		}
	}
	if m.HugePagesOK() {
		out = append(out, Candidate{Name: "thp", Allocator: "default", HugePages: true,
			Why: "glibc malloc asks for transparent huge pages (GLIBC_TUNABLES " + glibcHugeTunable + "): fewer TLB misses on large weights and activations; measured 2x faster on an INT8 resnet50, slower on mobilenet_v2"})
	}
	if jemallocTHP != nil {
		out = append(out, *jemallocTHP)
	}
	if m.AVX512Available() {
		out = append(out, Candidate{Name: "avx512", CPUCapability: "avx512",
			Why: "ATen's vectorized kernels (elementwise, softmax, norms, pooling, quantize) in AVX-512, which " + m.libtorchName() + " leaves off by default"})
	}
	if m.OpenBLASAVX512Available() {
		// Measured with libtorch 1.13.1 and OpenBLAS 0.3.21 on an AMD EPYC with AVX-512, one
		// thread, processes interleaved: digits 37 -> 25 us, transformer_traced 214 -> 181 us,
		// INT8-dynamic transformer_scripted 195 -> 175 us; outputs within float rounding.
		out = append(out, Candidate{Name: "openblas-avx512", BLASCore: openBLASAVX512Core,
			Why: "OpenBLAS's AVX-512 (" + openBLASAVX512Core + ") kernels, with its small-matrix sgemm, for float matmul (linear, bmm, small convolutions) in place of the " + m.openBLASCore() + " ones it chose for this CPU: measured 1.1-1.5x faster on sub-millisecond FP32 models"})
	}
	return out
}

// Apply returns s with the candidate's wait policy and allocator in place of its own (the
// CPUs, thread counts and bindings are kept). Start a process with the result's Environ: the
// OpenMP runtime reads these variables when it starts.
func (c Candidate) Apply(s Settings) (Settings, error) {
	switch c.WaitPolicy {
	case "", "PASSIVE", "ACTIVE":
	default:
		return s, fmt.Errorf("runtime candidate %q: wait policy %q: want \"\", PASSIVE or ACTIVE", c.Name, c.WaitPolicy)
	}
	if c.SpinCount < 0 {
		return s, fmt.Errorf("runtime candidate %q: spin count %d: must be >= 0", c.Name, c.SpinCount)
	}
	if c.CPUCapability != "" && !slices.Contains(cpuCapabilities, c.CPUCapability) {
		return s, fmt.Errorf("runtime candidate %q: CPU capability %q: want one of %s", c.Name, c.CPUCapability, strings.Join(cpuCapabilities, ", "))
	}
	if c.BLASCore != "" && !slices.Contains(openBLASCores, c.BLASCore) {
		return s, fmt.Errorf("runtime candidate %q: OpenBLAS core %q: want one of %s", c.Name, c.BLASCore, strings.Join(openBLASCores, ", "))
	}
	out := s
	out.Notes = slices.Clone(s.Notes)
	out.WaitPolicy, out.SpinCount = c.WaitPolicy, 0
	if c.WaitPolicy == "PASSIVE" {
		out.SpinCount = c.SpinCount
	}
	switch c.Allocator {
	case "":
	case "default":
		out.Allocator, out.AllocatorPath = "", ""
	default:
		if c.AllocatorPath == "" {
			return s, fmt.Errorf("runtime candidate %q: allocator %s without a library path: take candidates from runenv.Candidates", c.Name, c.Allocator)
		}
		out.Allocator, out.AllocatorPath = c.Allocator, c.AllocatorPath
	}
	out.HugePages, out.CPUCapability, out.BLASCore = c.HugePages, c.CPUCapability, c.BLASCore
	if out.HugePages && out.Allocator == "tcmalloc" {
		out.Notes = append(out.Notes, "huge pages not applied: tcmalloc has no switch for them")
	}
	// Replace the candidate's variables where they were (or where they go: before
	// TORCHSPEED_*), so the exports keep their order.
	at := -1
	vars := make([]Var, 0, len(s.Vars)+4)
	for _, v := range s.Vars {
		if slices.Contains(candidateVarNames, v.Name) {
			if at < 0 {
				at = len(vars)
			}
			continue
		}
		if at < 0 && v.Name == "TORCHSPEED_INSTANCE" {
			at = len(vars)
		}
		vars = append(vars, v)
	}
	if at < 0 {
		at = len(vars)
	}
	out.Vars = slices.Insert(vars, at, runtimeVars(out)...)
	out.Notes = append(out.Notes, "runtime candidate: "+c.Name)
	return out, nil
}

// Fit returns the candidate without what machine m cannot run, and a note for each thing left
// out, naming the setting, the CPU it was measured on (from, "" when unknown) and this one. A
// candidate read from an artifact may come from another machine: ATen's AVX-512 kernels
// (libtorch 1.13 dispatches to whatever ATEN_CPU_CAPABILITY names, without asking the CPU) and
// OpenBLAS's forced cores stop the process on an illegal instruction where the CPU lacks them,
// and huge pages asked of a kernel or C library that cannot give them change nothing but the
// figures the artifact claims.
func (c Candidate) Fit(m Machine, from string) (Candidate, []string) {
	var notes []string
	drop := func(setting, why string) {
		where := "this CPU"
		if m.Name != "" {
			where = "this CPU (" + m.Name + ")"
		}
		measured := ""
		if from != "" {
			measured = " (measured on " + from + ")"
		}
		notes = append(notes, fmt.Sprintf("runtime candidate %s: %s left out%s: %s %s", c.Name, setting, measured, where, why))
	}
	switch {
	case c.CPUCapability == "avx512" && !m.AVX512:
		drop("ATEN_CPU_CAPABILITY=avx512", "lacks AVX-512 F/BW/VL/DQ; ATen's default kernels run instead")
		c.CPUCapability = ""
	case c.CPUCapability == "avx2" && !m.AVX2:
		drop("ATEN_CPU_CAPABILITY=avx2", "lacks AVX2 and FMA; ATen's default kernels run instead")
		c.CPUCapability = ""
	}
	switch {
	case c.BLASCore == "":
	case slices.Contains(openBLASAVX512Cores, c.BLASCore) && !m.AVX512:
		drop("OPENBLAS_CORETYPE="+c.BLASCore, "lacks AVX-512 F/BW/VL/DQ; OpenBLAS chooses its own kernels")
		c.BLASCore = ""
	case !slices.Contains(openBLASAVX512Cores, c.BLASCore) && !m.AVX2:
		drop("OPENBLAS_CORETYPE="+c.BLASCore, "lacks AVX2 and FMA; OpenBLAS chooses its own kernels")
		c.BLASCore = ""
	}
	if c.HugePages {
		switch {
		case c.Allocator == "jemalloc" && !m.thpOn():
			drop("huge pages", "has transparent huge pages "+orUnknown(m.THP)+", so jemalloc cannot get them")
			c.HugePages = false
		case (c.Allocator == "" || c.Allocator == "default") && !m.HugePagesOK():
			drop("huge pages", "has transparent huge pages "+orUnknown(m.THP)+" and glibc "+orUnknown(m.Glibc)+" (glibc malloc needs 2.35 or newer and THP always or madvise)")
			c.HugePages = false
		}
	}
	return c, notes
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Env returns the variables a process started for the candidate needs on top of libtorch's
// defaults ("NAME=value"): the wait policy's, for the OpenMP runtime named (as in
// Settings.OpenMP), the huge pages', ATen's and OpenBLAS's, and LD_PRELOAD with the allocator. The
// default candidate needs none. Environ adds them to an environment.
func (c Candidate) Env(openmp string) ([]string, error) {
	s, err := c.Apply(Settings{OpenMP: openmp})
	if err != nil {
		return nil, err
	}
	return s.Env(), nil
}

// Environ returns base with the candidate's variables (Env) set, merged into the lists a user
// may already have (GLIBC_TUNABLES, MALLOC_CONF, LD_PRELOAD). Give it ScrubEnv's result, so
// that the candidates differ in these variables alone.
func (c Candidate) Environ(openmp string, base []string) ([]string, error) {
	s, err := c.Apply(Settings{OpenMP: openmp})
	if err != nil {
		return nil, err
	}
	return s.Environ(base), nil
}

// ScrubEnv returns base (as from os.Environ) without the variables that change how libtorch's
// threads run (OpenMP, MKL, OpenBLAS), how memory is allocated (a preloaded allocator, its
// MALLOC_CONF, glibc's huge page tunable: GLIBC_TUNABLES keeps its other entries), which
// kernels ATen and OpenBLAS dispatch to (ATEN_CPU_CAPABILITY, OPENBLAS_CORETYPE), or that carry torchspeed's settings and
// configuration (TORCHSPEED_*): a process started with it runs with libtorch's defaults
// unless it applies settings itself.
func ScrubEnv(base []string) []string {
	out := make([]string, 0, len(base))
	for _, kv := range base {
		name, value, _ := strings.Cut(kv, "=")
		if slices.Contains(scrubbedNames, name) || slices.ContainsFunc(scrubbedPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		if name == "GLIBC_TUNABLES" {
			if value = dropListEntry(name, value, glibcHugeTunableName); value == "" {
				continue
			}
			kv = name + "=" + value
		}
		out = append(out, kv)
	}
	return out
}

var (
	scrubbedPrefixes = []string{"OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "GOTO_", "TORCHSPEED_"}
	scrubbedNames    = []string{"LD_PRELOAD", "MALLOC_CONF", "ATEN_CPU_CAPABILITY"}
)

// Resolve fills in the allocator library of a candidate read back from a manifest (which
// names the allocator, not the path on the machine that measured it), searching libDirs (nil:
// the system's).
func (c Candidate) Resolve(libDirs []string) (Candidate, error) {
	if c.Allocator == "" || c.Allocator == "default" || c.AllocatorPath != "" {
		return c, nil
	}
	path, err := FindAllocator(c.Allocator, libDirs)
	if err != nil {
		return c, fmt.Errorf("runtime candidate %q: %w", c.Name, err)
	}
	c.AllocatorPath = path
	return c, nil
}

// Kinds are what a candidate changes: "wait" (the wait policy), "memory" (the allocator or
// its huge pages), "isa" (ATen's kernels), "blas" (OpenBLAS's kernels); none for the defaults.
func (c Candidate) Kinds() []string {
	var k []string
	if c.WaitPolicy != "" {
		k = append(k, "wait")
	}
	if c.HugePages || (c.Allocator != "" && c.Allocator != "default") {
		k = append(k, "memory")
	}
	if c.CPUCapability != "" {
		k = append(k, "isa")
	}
	if c.BLASCore != "" {
		k = append(k, "blas")
	}
	return k
}

// Combine returns a with what b changes added ("thp+passive"); ok is false when they change
// the same kind of setting (Kinds), which one candidate cannot hold twice.
func Combine(a, b Candidate) (c Candidate, ok bool) {
	ka, kb := a.Kinds(), b.Kinds()
	if len(ka) == 0 || len(kb) == 0 || slices.ContainsFunc(kb, func(k string) bool { return slices.Contains(ka, k) }) {
		return a, false
	}
	c = a
	c.Name, c.Why = a.Name+"+"+b.Name, "the winners "+a.Name+" and "+b.Name+" together"
	for _, k := range kb {
		switch k {
		case "wait":
			c.WaitPolicy, c.SpinCount = b.WaitPolicy, b.SpinCount
		case "memory":
			c.Allocator, c.AllocatorPath, c.HugePages = b.Allocator, b.AllocatorPath, b.HugePages
		case "isa":
			c.CPUCapability = b.CPUCapability
		case "blas":
			c.BLASCore = b.BLASCore
		}
	}
	return c, true
}
