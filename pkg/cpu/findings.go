package cpu

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Severity says how much a finding matters.
type Severity string

// Severities, most serious first.
const (
	Warning Severity = "warning" // costs speed or predictability now
	Info    Severity = "info"    // worth knowing; may cost speed in some setups
)

// Finding is something about the machine or environment that affects inference speed,
// with what to do about it.
type Finding struct {
	Severity Severity `json:"severity"`
	// Code is a stable identifier for scripts ("omp-num-threads-over", ...).
	Code    string `json:"code"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
}

// fewCores is the core count up to which spinning OpenMP workers hurt: measured with
// libtorch 1.13 on 2 cores, two spinning threads gave p95 2-10x the median in 4 ms
// steps, gone with OMP_WAIT_POLICY=PASSIVE.
const fewCores = 4

func findings(p *Probe) []Finding {
	var out []Finding
	add := func(sev Severity, code, fix, format string, args ...any) {
		out = append(out, Finding{Severity: sev, Code: code, Message: fmt.Sprintf(format, args...), Fix: fix})
	}
	addFinding := func(f *Finding) {
		if f != nil {
			out = append(out, *f)
		}
	}
	threadCountFindings(p, add)
	openMPFindings(p, add)
	processFindings(p, add)
	placementFindings(p, add)
	isaFindings(p, add)
	addFinding(atenISAFinding(p))
	addFinding(oneDNNISAFinding(p))
	torchBuildFindings(p, add)
	addFinding(interruptFinding(p.Interruptions))
	if len(p.Allocators) == 0 && p.Source == "live" {
		add(Info, "allocator-default", "try torchspeed launch --allocator jemalloc (apt-get install libjemalloc2) and compare",
			"the process uses glibc malloc; jemalloc or tcmalloc often cut allocation cost and fragmentation for inference servers")
	}

	sort.SliceStable(out, func(i, j int) bool { return out[i].Severity == Warning && out[j].Severity != Warning })
	return out
}

// adder adds one finding: its severity, code, fix, and message (format and args).
type adder func(sev Severity, code, fix, format string, args ...any)

// threadCountFindings checks OMP_NUM_THREADS and MKL_NUM_THREADS against the CPUs the process
// can use and against each other.
func threadCountFindings(p *Probe, add adder) {
	env := p.Env
	n := p.Usable.Count
	if v, ok := env["OMP_NUM_THREADS"]; ok {
		// OMP_NUM_THREADS may be a list for nested levels; the first is the outer pool.
		first, _, _ := strings.Cut(v, ",")
		t, err := strconv.Atoi(strings.TrimSpace(first))
		switch {
		case err != nil || t < 1:
			add(Warning, "omp-num-threads-invalid", "set OMP_NUM_THREADS to a positive number, or unset it",
				"OMP_NUM_THREADS=%q is not a positive number; the runtime ignores it or stops", v)
		case t > n:
			add(Warning, "omp-num-threads-over", fmt.Sprintf("export OMP_NUM_THREADS=%d (or unset it and let torchspeed choose)", p.Usable.Cores),
				"OMP_NUM_THREADS=%d but this process can use %d CPUs; extra threads wait for each other and spike latency", t, n)
		}
	}
	if v, ok := env["MKL_NUM_THREADS"]; ok {
		t, err := strconv.Atoi(strings.TrimSpace(v))
		omp, ompSet := env["OMP_NUM_THREADS"]
		switch {
		case err != nil || t < 1:
			add(Warning, "mkl-num-threads-invalid", "set MKL_NUM_THREADS to a positive number, or unset it",
				"MKL_NUM_THREADS=%q is not a positive number", v)
		case t > n:
			add(Warning, "mkl-num-threads-over", fmt.Sprintf("export MKL_NUM_THREADS=%d", p.Usable.Cores),
				"MKL_NUM_THREADS=%d but this process can use %d CPUs", t, n)
		case ompSet && strings.TrimSpace(omp) != strings.TrimSpace(v):
			add(Warning, "mkl-num-threads-mismatch", "set MKL_NUM_THREADS and OMP_NUM_THREADS to the same value",
				"MKL_NUM_THREADS=%s differs from OMP_NUM_THREADS=%s; MKL and OpenMP regions then run with different pool sizes", v, omp)
		}
	}
}

// openMPFindings checks the OpenMP runtimes loaded and the variables set for them: variables of
// a runtime that is not loaded, several runtimes, and the wait policy on few cores.
func openMPFindings(p *Probe, add adder) {
	env := p.Env
	n := p.Usable.Count
	rt := map[string]bool{}
	for _, l := range p.OpenMP {
		rt[l.Name] = true
	}
	// Variables for a runtime that is not loaded do nothing, and recipes on the web
	// often give Intel's KMP_* variables for builds that use GNU OpenMP.
	if len(rt) > 0 {
		var kmp, gomp []string
		for k := range env {
			if strings.HasPrefix(k, "KMP_") {
				kmp = append(kmp, k)
			}
			if strings.HasPrefix(k, "GOMP_") {
				gomp = append(gomp, k)
			}
		}
		slices.Sort(kmp)
		slices.Sort(gomp)
		if len(kmp) > 0 && !rt["intel"] && !rt["llvm"] {
			add(Warning, "kmp-with-gomp", "use OMP_PROC_BIND, OMP_PLACES, OMP_WAIT_POLICY and GOMP_SPINCOUNT instead (torchspeed launch sets them)",
				"%s set, but the loaded OpenMP runtime is GNU libgomp, which ignores KMP_* variables", strings.Join(kmp, ", "))
		}
		if len(gomp) > 0 && !rt["gnu"] {
			add(Info, "gomp-without-libgomp", "use OMP_WAIT_POLICY or KMP_BLOCKTIME instead",
				"%s set, but libgomp is not loaded (runtime: %s); it has no effect", strings.Join(gomp, ", "), p.OpenMPRuntime())
		}
	}
	if len(p.OpenMP) > 1 {
		var names []string
		for _, l := range p.OpenMP {
			names = append(names, l.Path)
		}
		add(Warning, "openmp-multiple", "make every library use one OpenMP runtime (rebuild or pick packages built against the same one)",
			"%d OpenMP runtimes are loaded (%s); their thread pools compete for the same cores", len(p.OpenMP), strings.Join(names, ", "))
	}

	wait := strings.ToUpper(strings.TrimSpace(env["OMP_WAIT_POLICY"]))
	spinForever := strings.EqualFold(env["GOMP_SPINCOUNT"], "infinite") || strings.EqualFold(env["GOMP_SPINCOUNT"], "infinity") ||
		strings.EqualFold(env["KMP_BLOCKTIME"], "infinite")
	switch {
	case (wait == "ACTIVE" || spinForever) && n <= fewCores:
		add(Warning, "omp-wait-active", "run through torchspeed launch --wait-policy passive (it exports OMP_WAIT_POLICY=PASSIVE), or export OMP_WAIT_POLICY=PASSIVE yourself",
			"OpenMP workers spin while idle (OMP_WAIT_POLICY=%s) on a process with only %d CPUs; spinning threads steal the CPU from the thread with work, which shows as tail spikes", env["OMP_WAIT_POLICY"], n)
	case wait == "" && !spinForever && n <= fewCores && n > 1 && (rt["gnu"] || len(rt) == 0):
		add(Info, "omp-wait-default", "time OMP_WAIT_POLICY=PASSIVE against the default (torchspeed optimize --measure-runtime true does); to use it, run through torchspeed launch --wait-policy passive (it exports OMP_WAIT_POLICY=PASSIVE)",
			"OMP_WAIT_POLICY is unset and the process has %d CPUs; libgomp's default spinning gave p95 2-10x the median with 2 threads here", n)
	case wait != "" && wait != "ACTIVE" && wait != "PASSIVE":
		add(Warning, "omp-wait-invalid", "set OMP_WAIT_POLICY to ACTIVE or PASSIVE",
			"OMP_WAIT_POLICY=%q is not ACTIVE or PASSIVE; the runtime ignores it", env["OMP_WAIT_POLICY"])
	}
}

// processFindings checks the threads libtorch and OpenBLAS will run against the CPUs and the
// cgroup quota the process has.
func processFindings(p *Probe, add adder) {
	n := p.Usable.Count
	if p.Torch != nil && p.Torch.NumThreads > n {
		add(Warning, "torch-threads-over", fmt.Sprintf("set intra-op threads to %d (torchspeed does this by default), or export OMP_NUM_THREADS=%d", p.Usable.Cores, p.Usable.Cores),
			"libtorch will use %d intra-op threads but the process can use %d CPUs (it does not see cgroup CPU quotas)", p.Torch.NumThreads, n)
	}
	if t := p.Torch; t != nil && t.BLAS != nil && t.BLAS.Library == "openblas" && t.BLAS.Threading != "sequential" &&
		t.NumThreads > 0 && t.BLAS.Threads != t.NumThreads {
		add(Warning, "openblas-threads", fmt.Sprintf("export OPENBLAS_NUM_THREADS=%d (torchspeed launch, bench and optimize set it; torchspeed.Load and torch.SetNumThreads set it in process)", t.NumThreads),
			"OpenBLAS runs %d thread(s) and libtorch %d: libtorch's thread setting does not reach OpenBLAS, whose %s pool then competes with libtorch's threads in every float matmul (measured here: a transformer 1.3-1.7x slower at p50 on 1 libtorch thread)",
			t.BLAS.Threads, t.NumThreads, t.BLAS.Threading)
	}
	if q := p.Cgroup.QuotaCPUs; q > 0 && float64(p.Usable.CPUs.Len()) > q {
		add(Info, "cgroup-quota", fmt.Sprintf("use at most %d threads; torchspeed's defaults follow the quota", p.Usable.Count),
			"the cgroup CPU quota allows %.2g CPUs of the %d this process may run on; more busy threads than that get throttled every %d ms", q, p.Usable.CPUs.Len(), p.Cgroup.PeriodUs/1000)
	}
}

// placementFindings checks where the process may run: SMT siblings, NUMA nodes, offline CPUs.
func placementFindings(p *Probe, add adder) {
	var smt []string
	for _, c := range p.Topology.Cores {
		if in := c.CPUs.Intersect(p.Usable.CPUs); in.Len() > 1 {
			smt = append(smt, in.String())
		}
	}
	if len(smt) > 0 {
		add(Info, "smt-siblings", "pin one thread per physical core: torchspeed launch/run does by default (--use-smt to allow siblings)",
			"the process may run on both hardware threads of %d core(s) (e.g. %s); two compute threads on one core share its vector units", len(smt), smt[0])
	}
	if len(p.Usable.Nodes) > 1 {
		add(Warning, "cross-numa", fmt.Sprintf("keep each process on one node: torchspeed launch --numa-node %d, or --instances %d for one instance per node", p.Usable.Nodes[0], len(p.Usable.Nodes)),
			"the process may run on CPUs of NUMA nodes %s; threads on one node read weights and activations from the other's memory", joinInts(p.Usable.Nodes))
	}
	if p.Topology.Offline.Len() > 0 {
		add(Info, "offline-cpus", "bring them online (echo 1 > /sys/devices/system/cpu/cpuN/online) if they should be used",
			"CPUs %s are offline", p.Topology.Offline)
	}
}

// isaFindings checks the CPU's vector instructions and whether the OS enabled them.
func isaFindings(p *Probe, add adder) {
	isa := p.ISA
	switch {
	case !isa.AVX2 || !isa.FMA:
		add(Warning, "isa-no-avx2", "run on a CPU with AVX2 and FMA (Haswell/Zen or newer) for FP32 and INT8 speed",
			"the CPU lacks AVX2/FMA; FP32 and INT8 kernels fall back to SSE/AVX paths, several times slower")
	case !isa.VNNI() && !isa.AMX():
		add(Warning, "isa-no-vnni", "for INT8 speed use a CPU with AVX512-VNNI (Cascade Lake, Zen 4 or newer) or AVX-VNNI (Alder Lake); expect INT8 to gain less over FP32 here",
			"no VNNI instructions (avx512_vnni, avx_vnni): INT8 dot products take three instructions instead of one and can overflow int16 intermediates")
	}
	if len(isa.NotEnabledByOS) > 0 {
		add(Warning, "isa-not-enabled", "use a kernel (5.16+ for AMX) and hypervisor that enable these register states",
			"the CPU has %s but the OS has not enabled them (XCR0=%s)", strings.Join(isa.NotEnabledByOS, ", "), isa.XCR0)
	}
}

// torchBuildFindings checks the libtorch build: oneDNN present and working, and the quantized
// engine.
func torchBuildFindings(p *Probe, add adder) {
	t := p.Torch
	if t == nil {
		return
	}
	if t.OneDNN == "" && t.ShowConfig != "" {
		add(Warning, "torch-no-onednn", "use a libtorch built with USE_MKLDNN=ON (Debian's and the official builds are)",
			"libtorch %s was built without oneDNN; convolutions and INT8 run on slower generic kernels", t.Version)
	}
	if c := t.OneDNNCheck; c != "" && c != OneDNNPassed {
		add(Warning, "onednn-broken", "torchspeed optimize leaves out optimize_for_inference here; compare the model's outputs with another libtorch build before trusting this one, at the batch sizes you serve",
			"%s", c)
	}
	if t.QEngine == "qnnpack" && (t.HasEngine("onednn") || t.HasEngine("x86") || t.HasEngine("fbgemm")) {
		add(Warning, "torch-qengine-qnnpack", "set the quantized engine to onednn, x86 or fbgemm",
			"the quantized engine is qnnpack, 4-5x slower than onednn on x86")
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// capabilityRank orders ATen's CPU dispatch levels (show_config's "CPU capability usage").
var capabilityRank = map[string]int{"DEFAULT": 0, "AVX": 1, "AVX2": 2, "AVX512": 3}

// atenISAFinding says when libtorch's own kernels dispatch below what the CPU offers: the CPU
// has AVX-512 (and maybe VNNI) while ATen runs its AVX2 kernels (libtorch 1.x's default even
// where the build has AVX-512 ones), so ATen's ops leave speed on the table. nil when they
// match or libtorch is not known.
func atenISAFinding(p *Probe) *Finding {
	if p.Torch == nil || p.Torch.CPUCapability == "" {
		return nil
	}
	have, ok := capabilityRank[strings.ToUpper(p.Torch.CPUCapability)]
	if !ok {
		return nil
	}
	best, bestName := 0, "DEFAULT"
	switch {
	case p.ISA.AVX512Core():
		best, bestName = 3, "AVX512"
	case p.ISA.AVX2 && p.ISA.FMA:
		best, bestName = 2, "AVX2"
	case p.ISA.AVX:
		best, bestName = 1, "AVX"
	}
	if have >= best {
		return nil
	}
	fix := "use a libtorch built with " + bestName + " kernels (the official libtorch 2.x CPU build)"
	if p.Torch.Build["PERF_WITH_"+bestName] == "1" {
		// The build has the kernels; ATen only chose not to use them.
		fix = "export ATEN_CPU_CAPABILITY=" + strings.ToLower(bestName) + " (this libtorch has " + bestName + " kernels) and compare with torchspeed bench: on some models it gains nothing"
	}
	if v, ok := p.Env["ATEN_CPU_CAPABILITY"]; ok {
		fix = "ATEN_CPU_CAPABILITY=" + v + " is set in the environment: unset it or set it to " + strings.ToLower(bestName) + ", then compare with torchspeed bench"
	}
	return &Finding{
		Severity: Warning,
		Code:     "libtorch-isa-below-cpu",
		Message: fmt.Sprintf("libtorch dispatches its %s kernels (CPU capability usage: %s) while this CPU offers %s (%s); ONEDNN_VERBOSE=1 shows the ISA oneDNN picks for its own kernels",
			p.Torch.CPUCapability, p.Torch.CPUCapability, bestName, p.ISA.Level()),
		Fix: fix,
	}
}

// oneDNNISAs are oneDNN's ISA names (ONEDNN_MAX_CPU_ISA values, ISA.Level's spelling), lowest
// first.
var oneDNNISAs = []string{"sse41", "avx", "avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx"}

// oneDNNISAFinding says when ONEDNN_MAX_CPU_ISA (or its old name DNNL_MAX_CPU_ISA) keeps oneDNN,
// which runs libtorch's convolutions and INT8 layers, below the CPU's best ISA.
func oneDNNISAFinding(p *Probe) *Finding {
	for _, name := range []string{"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"} {
		v, ok := p.Env[name]
		if !ok {
			continue
		}
		capped := slices.Index(oneDNNISAs, strings.ToLower(strings.TrimSpace(v)))
		level := p.ISA.Level()
		if capped < 0 || capped >= slices.Index(oneDNNISAs, level) {
			return nil // ALL, an unknown name, or no lower than the CPU
		}
		return &Finding{
			Severity: Warning,
			Code:     "onednn-isa-capped",
			Message:  fmt.Sprintf("%s=%s keeps oneDNN (convolutions, INT8 layers) at %s while this CPU offers %s", name, v, strings.ToLower(v), level),
			Fix:      "unset " + name + " (oneDNN then uses the CPU's best ISA)",
		}
	}
	return nil
}
