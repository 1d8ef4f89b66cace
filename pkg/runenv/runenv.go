// Package runenv turns a machine probe and a few choices into run settings for one or
// more inference instances: which CPUs each uses (one thread per physical core, packed
// within a NUMA node), how many intra- and inter-op threads, which memory node to bind,
// the OpenMP variables for the runtime actually loaded, and an allocator to preload.
// It applies them to this process (affinity, memory policy, re-exec for variables the
// OpenMP runtime reads at start) and prints them as shell exports.
package runenv

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// Mode is a preset that fills the choices left open.
type Mode string

// Modes.
const (
	// ModeDefault uses the given instance count (1), one node's worth of cores per
	// instance, and the OpenMP runtime's own wait policy.
	ModeDefault Mode = ""
	// ModeLatency is for one request at a time: one instance on the physical cores of one
	// NUMA node, one inter-op thread, and the OpenMP runtime's own wait policy (the other
	// policies are Candidates, to be measured: see defaultWaitNote).
	ModeLatency Mode = "latency"
	// ModeThroughput is for many requests: one instance per NUMA node (unless
	// Instances says otherwise), each on all of its node's physical cores, with workers
	// that spin between parallel regions.
	ModeThroughput Mode = "throughput"
)

// ParseMode reads a mode name ("", "default", "latency", "throughput").
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "default":
		return ModeDefault, nil
	case "latency":
		return ModeLatency, nil
	case "throughput":
		return ModeThroughput, nil
	}
	return "", fmt.Errorf("mode %q: want latency, throughput or default", s)
}

// Options are the choices for Compute; the zero value gives one instance with
// torchspeed's defaults.
type Options struct {
	// Instances is the number of instances; 0 means 1, or one per NUMA node in
	// throughput mode.
	Instances int `json:"instances"`
	// CoresPerInstance is the number of physical cores per instance; 0 splits the
	// usable cores evenly.
	CoresPerInstance int `json:"cores_per_instance"`
	// ReserveCores leaves that many physical cores out, from the start of the list
	// (core 0 usually takes most interrupts), for the rest of the process or system.
	ReserveCores int `json:"reserve_cores"`
	// CPUs is an explicit CPU list ("0-7,16"); "" means all usable CPUs.
	CPUs string `json:"cpus"`
	// NUMANodes restricts the CPUs to these nodes; empty means all.
	NUMANodes []int `json:"numa_nodes"`
	// Threads is the intra-op thread count per instance; 0 means one per CPU used.
	Threads int `json:"threads"`
	// InteropThreads is the inter-op thread count per instance; 0 means 1.
	InteropThreads int `json:"interop_threads"`
	// Allocator is "", "default" (glibc malloc), "jemalloc" or "tcmalloc".
	Allocator string `json:"allocator"`
	Mode      Mode   `json:"mode"`
	// WaitPolicy overrides the OpenMP wait policy: "", "active" or "passive".
	WaitPolicy string `json:"wait_policy"`
	// OpenMP names the runtime to write variables for: "" or "auto" (the one the probe
	// found loaded, else GNU), "gnu", "intel" or "llvm".
	OpenMP string `json:"openmp"`
	// UseSMT allows both hardware threads of a core.
	UseSMT bool `json:"use_smt"`
	// NoMemBind leaves the memory policy alone on multi-node machines.
	NoMemBind bool `json:"no_mem_bind"`
	// NoThreadBind leaves out OMP_PROC_BIND/OMP_PLACES (KMP_AFFINITY for Intel): the instance
	// is still confined to its CPUs by affinity. For Go programs: the OpenMP runtime binds the
	// initial thread to the first place before the Go runtime starts, and every Go thread
	// inherits that single CPU.
	NoThreadBind bool `json:"no_thread_bind"`
	// LibDirs are the directories searched for allocator libraries; nil means the
	// system's (see FindAllocator).
	LibDirs []string `json:"-"`
}

// Var is one environment variable.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Settings is how one instance runs.
type Settings struct {
	Instance  int  `json:"instance"`
	Instances int  `json:"instances"`
	Mode      Mode `json:"mode"`
	// CPUs is where the instance's threads may run.
	CPUs cpu.CPUSet `json:"cpus"`
	// Cores is the number of physical cores CPUs covers.
	Cores          int `json:"cores"`
	Threads        int `json:"threads"`
	InteropThreads int `json:"interop_threads"`
	// NUMANode is the node holding CPUs, -1 when they span nodes.
	NUMANode int `json:"numa_node"`
	// MemBind says to bind the instance's memory to NUMANode.
	MemBind bool `json:"mem_bind"`
	// OpenMP is the runtime the variables are written for.
	OpenMP string `json:"openmp"`
	// ThreadBind says OpenMP binds its threads to places (see Options.NoThreadBind).
	ThreadBind bool `json:"thread_bind"`
	// WaitPolicy is "PASSIVE", "ACTIVE", or "" for the runtime's default.
	WaitPolicy string `json:"wait_policy"`
	// SpinCount is, with WaitPolicy PASSIVE and GNU OpenMP, how many times an idle worker
	// polls before it sleeps (GOMP_SPINCOUNT): 0 for an explicit --wait-policy passive,
	// shortSpinCount for the latency preset. The Intel and LLVM runtimes sleep at once
	// (KMP_BLOCKTIME=0): their unit is the millisecond.
	SpinCount int `json:"spin_count,omitempty"`
	// Allocator is "" (glibc malloc), "jemalloc" or "tcmalloc"; AllocatorPath is the
	// library preloaded for it.
	Allocator     string `json:"allocator"`
	AllocatorPath string `json:"allocator_path,omitempty"`
	// HugePages has the allocator ask for transparent huge pages; CPUCapability is
	// ATEN_CPU_CAPABILITY and BLASCore OPENBLAS_CORETYPE (see Candidate).
	HugePages     bool   `json:"huge_pages,omitempty"`
	CPUCapability string `json:"cpu_capability,omitempty"`
	BLASCore      string `json:"blas_core,omitempty"`
	// Vars are the environment variables the instance needs, in a stable order;
	// LD_PRELOAD is not among them (see Env and Environ).
	Vars []Var `json:"env"`
	// Notes say why a choice was made or what was left out.
	Notes []string `json:"notes,omitempty"`
}

// defaultWaitNote says why latency and default modes leave the wait policy to the OpenMP
// runtime. A preset of passive waiting after a short spin (GOMP_SPINCOUNT=3000) was
// measured on a quiet Zen 5 against libtorch's defaults at the same thread count (2): INT8
// resnet18 4.47 vs 3.81 ms, mobilenet_v2 12.05 vs 8.98 ms; it only looked faster when
// compared with libtorch's default of 1 thread. On a busy shared VM the same preset had
// removed tail spikes of spinning workers. No fixed policy wins on both, so the others are
// Candidates that a caller measures on its own machine.
const defaultWaitNote = "wait policy: the OpenMP runtime's default; passive and spinning policies are candidates to measure (runenv.Candidates)"

// shortSpinCount is GOMP_SPINCOUNT for the short-spin candidate: long enough to carry a
// worker from one parallel region to the next within an inference (tens of microseconds),
// short enough that it sleeps soon after the inference ends. Measured with libtorch 1.13,
// resnet18 at 2 threads on 2 CPUs of a busy VM, against sleeping at once
// (GOMP_SPINCOUNT=0), interleaved: p50 13% lower with 1000-3000 spins, 12-19% with
// 10000-30000, which raised p95/p50 from 1.2 to 1.25-1.4.
const shortSpinCount = 3000

// Compute works out the settings of each instance. It checks every choice against the
// probe first and returns an error, and no settings, when one cannot be met. The steps: the
// CPUs asked for (cpuPool), one unit per physical core of them (coreUnits), how many
// instances of how many cores (instanceShape), which cores each gets (placeInstances), and
// each instance's threads, binding, wait policy and variables (instanceSettings).
func Compute(p *cpu.Probe, o Options) ([]Settings, error) {
	if p == nil {
		return nil, errors.New("run settings: no machine probe")
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	pool, explicit, err := cpuPool(p, o)
	if err != nil {
		return nil, err
	}
	units, notes, err := coreUnits(p, o, pool, explicit)
	if err != nil {
		return nil, err
	}
	n, per, shapeNotes, err := instanceShape(o, units)
	if err != nil {
		return nil, err
	}
	notes = append(notes, shapeNotes...)
	groups, err := placeInstances(units, n, per)
	if err != nil {
		return nil, err
	}
	runtimeName, err := pickRuntime(p, o.OpenMP)
	if err != nil {
		return nil, err
	}
	if (o.OpenMP == "" || o.OpenMP == "auto") && p.OpenMPRuntime() == "" {
		notes = append(notes, "no OpenMP runtime loaded in this process; wrote variables for GNU libgomp (what Debian's and PyPI's libtorch use)")
	}
	alloc, allocPath := "", ""
	if o.Allocator != "" && o.Allocator != "default" {
		allocPath, err = FindAllocator(o.Allocator, o.LibDirs)
		if err != nil {
			return nil, err
		}
		alloc = o.Allocator
	}
	out := make([]Settings, n)
	for i, g := range groups {
		s := Settings{
			Instance: i, Instances: n, Mode: o.Mode, Cores: len(g), NUMANode: g[0].node,
			OpenMP: runtimeName, Allocator: alloc, AllocatorPath: allocPath,
			InteropThreads: max(1, o.InteropThreads), Notes: slices.Clone(notes),
		}
		out[i] = instanceSettings(p, o, s, g)
	}
	return out, nil
}

func (o Options) validate() error {
	checks := []struct {
		name string
		v    int
	}{{"--instances", o.Instances}, {"--cores-per-instance", o.CoresPerInstance}, {"--reserve-cores", o.ReserveCores},
		{"--threads", o.Threads}, {"--interop-threads", o.InteropThreads}}
	for _, c := range checks {
		if c.v < 0 {
			return fmt.Errorf("%s %d: must be 0 (automatic) or more", c.name, c.v)
		}
	}
	switch o.Allocator {
	case "", "default", "jemalloc", "tcmalloc":
	default:
		return fmt.Errorf("--allocator %q: want jemalloc, tcmalloc or default", o.Allocator)
	}
	switch o.Mode {
	case ModeDefault, ModeLatency, ModeThroughput:
	default:
		return fmt.Errorf("mode %q: want latency, throughput or default", o.Mode)
	}
	switch strings.ToLower(o.WaitPolicy) {
	case "", "active", "passive":
	default:
		return fmt.Errorf("--wait-policy %q: want active or passive", o.WaitPolicy)
	}
	switch o.OpenMP {
	case "", "auto", "gnu", "intel", "llvm":
	default:
		return fmt.Errorf("--openmp %q: want auto, gnu, intel or llvm", o.OpenMP)
	}
	return nil
}

func pickRuntime(p *cpu.Probe, want string) (string, error) {
	if want != "" && want != "auto" {
		return want, nil
	}
	if rt := p.OpenMPRuntime(); rt != "" {
		return rt, nil
	}
	return "gnu", nil
}

// vars builds the environment for one instance. All three runtimes read OMP_*; the
// Intel runtime's KMP_AFFINITY takes precedence over (and warns about) OMP_PROC_BIND,
// so it gets KMP_AFFINITY alone.
func vars(s Settings, places []string) []Var {
	threads := strconv.Itoa(s.Threads)
	// libtorch's set_num_threads reaches OpenMP and MKL but not OpenBLAS (Debian's libtorch
	// calls it for float matmul), whose pthreads pool would otherwise take every CPU.
	v := []Var{{"OMP_NUM_THREADS", threads}, {"MKL_NUM_THREADS", threads}, {"OPENBLAS_NUM_THREADS", threads}}
	switch {
	case !s.ThreadBind:
	case s.OpenMP == "intel":
		v = append(v, Var{"KMP_AFFINITY", "granularity=fine,compact,1,0"})
	default:
		v = append(v, Var{"OMP_PROC_BIND", "close"}, Var{"OMP_PLACES", strings.Join(places, ",")})
	}
	v = append(v, runtimeVars(s)...)
	node := strconv.Itoa(s.NUMANode)
	v = append(v,
		Var{"TORCHSPEED_INSTANCE", strconv.Itoa(s.Instance)},
		Var{"TORCHSPEED_INSTANCES", strconv.Itoa(s.Instances)},
		Var{"TORCHSPEED_CPUS", s.CPUs.String()},
		Var{"TORCHSPEED_NUMA_NODE", node},
		Var{"TORCHSPEED_INTEROP_THREADS", strconv.Itoa(s.InteropThreads)},
	)
	return v
}

// waitVarNames are the variables waitVars may set.
var waitVarNames = []string{"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"}

// waitVars are the variables of the instance's wait policy; none for the runtime's default.
func waitVars(s Settings) []Var {
	if s.WaitPolicy == "" {
		return nil
	}
	v := []Var{{"OMP_WAIT_POLICY", s.WaitPolicy}}
	switch s.OpenMP {
	case "gnu":
		// libgomp polls GOMP_SPINCOUNT times before sleeping; PASSIVE alone sets it to
		// 0, spell it out so the exports show what happens.
		if s.WaitPolicy == "PASSIVE" {
			v = append(v, Var{"GOMP_SPINCOUNT", strconv.Itoa(s.SpinCount)})
		}
	case "intel", "llvm":
		// KMP_BLOCKTIME counts milliseconds in every version (microseconds only in recent
		// LLVM ones): 1 ms is far longer than the short spin measured with libgomp, and
		// long spins are what gave the tail spikes, so PASSIVE sleeps at once here.
		bt := "0"
		if s.WaitPolicy == "ACTIVE" {
			bt = "infinite"
		}
		v = append(v, Var{"KMP_BLOCKTIME", bt})
	}
	return v
}
