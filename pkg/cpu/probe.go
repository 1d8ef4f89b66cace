// Package cpu finds out what an x86 machine offers to an inference process: the
// instruction sets that decide which kernels run, the topology (sockets, physical cores,
// SMT siblings, NUMA nodes, caches), the share of it the process may actually use
// (affinity mask, cgroup cpuset and CPU quota, online CPUs), memory settings, the OpenMP
// runtime and allocator loaded, and how libtorch was built. It ends with findings: what
// in the environment hurts speed, and what to do about it.
//
// Everything read from files goes through Options.Root, so the same code runs on the live
// machine ("/") and on fixture copies of /sys and /proc in tests.
package cpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Options say where and how to probe.
type Options struct {
	// Root is the directory that holds the sys/ and proc/ trees; "" means "/".
	Root string
	// FromFiles takes the instruction sets from Root/proc/cpuinfo and the affinity mask
	// from Root/proc/self/status instead of the CPUID instruction and sched_getaffinity.
	// It is implied when Root is not "/": a fixture tree describes another machine.
	FromFiles bool
	// Env is the environment judged by the findings, as "NAME=value" strings; nil means
	// os.Environ().
	Env []string
	// Torch is libtorch's build information, filled by a caller that has loaded it.
	Torch *TorchInfo
	// Interruptions is what MeasureInterruptions saw, filled by a caller that measured it.
	Interruptions *Interruptions
}

// Probe is what the machine offers to this process.
type Probe struct {
	// Source is "live" or "files:<root>".
	Source   string     `json:"source"`
	CPU      Processor  `json:"cpu"`
	ISA      ISA        `json:"isa"`
	Topology Topology   `json:"topology"`
	NUMA     []NUMANode `json:"numa_nodes"`
	Caches   []Cache    `json:"caches"`
	Cgroup   Cgroup     `json:"cgroup"`
	// Affinity is the mask of CPUs the process may run on (sched_getaffinity).
	Affinity CPUSet `json:"affinity"`
	Usable   Usable `json:"usable"`
	Memory   Memory `json:"memory"`
	// OpenMP lists the OpenMP runtimes mapped into the process; more than one means two
	// thread pools fighting for the same cores.
	OpenMP []Library `json:"openmp_runtimes"`
	// Allocators lists malloc replacements mapped into the process (jemalloc, tcmalloc).
	Allocators []Library `json:"allocators"`
	// Libc is the C library mapped into the process: its malloc is the default allocator, and
	// glibc 2.35 or newer can back it with transparent huge pages.
	Libc Libc `json:"libc"`
	// Torch is libtorch's build information when the caller supplied it.
	Torch *TorchInfo `json:"torch,omitempty"`
	// Interruptions is what the machine takes from running threads, when the caller measured it.
	Interruptions *Interruptions `json:"interruptions,omitempty"`
	// Env holds the environment variables that steer threading and allocation.
	Env      map[string]string `json:"env"`
	Findings []Finding         `json:"findings"`
	// Notes are things the probe could not read, so a reader knows what is a guess.
	Notes []string `json:"notes,omitempty"`
}

// Processor names the CPU.
type Processor struct {
	Vendor      string `json:"vendor"`
	Model       string `json:"model"`
	Family      int    `json:"family"`
	ModelNumber int    `json:"model_number"`
	Stepping    int    `json:"stepping"`
	// Hypervisor is set when the CPU says it runs under one (a VM).
	Hypervisor bool `json:"hypervisor"`
}

// Topology is the shape of the CPUs that are online.
type Topology struct {
	Sockets        int `json:"sockets"`
	PhysicalCores  int `json:"physical_cores"`
	LogicalCPUs    int `json:"logical_cpus"`
	ThreadsPerCore int `json:"threads_per_core"`
	// Possible, Online and Offline are the kernel's CPU lists.
	Possible CPUSet `json:"possible"`
	Online   CPUSet `json:"online"`
	Offline  CPUSet `json:"offline"`
	// Cores are the physical cores, ordered by their first CPU.
	Cores []Core `json:"cores"`
}

// Core is one physical core and its hardware threads.
type Core struct {
	Socket int `json:"socket"`
	ID     int `json:"core_id"`
	// Node is the NUMA node of the core, -1 when unknown.
	Node int `json:"node"`
	// CPUs are the core's online hardware threads (SMT siblings); the first one is the
	// one torchspeed pins a thread to.
	CPUs CPUSet `json:"cpus"`
}

// NUMANode is one memory node.
type NUMANode struct {
	ID            int    `json:"id"`
	CPUs          CPUSet `json:"cpus"`
	MemTotalBytes int64  `json:"mem_total_bytes"`
}

// Cache is one kind of cache (level and type) and how it is shared.
type Cache struct {
	Level int    `json:"level"`
	Type  string `json:"type"` // Data, Instruction, Unified
	// SizeBytes is the size of one instance.
	SizeBytes int64 `json:"size_bytes"`
	// Instances is how many separate caches of this kind there are (0 when unknown).
	Instances int `json:"instances"`
	// CPUsPerInstance is how many logical CPUs share one instance (0 when unknown).
	CPUsPerInstance int `json:"cpus_per_instance"`
	// Source is "sysfs" or "cpuid".
	Source string `json:"source"`
}

// Cgroup is what the process's control groups allow.
type Cgroup struct {
	// Version is 1 or 2 for the hierarchy that holds the cpu controller, 0 if none.
	Version int `json:"version"`
	// CPUDir and CpusetDir are the cgroup directories read (under Root).
	CPUDir    string `json:"cpu_dir,omitempty"`
	CpusetDir string `json:"cpuset_dir,omitempty"`
	// QuotaUs and PeriodUs are the tightest CPU bandwidth limit on the path to the root
	// (cpu.max or cpu.cfs_quota_us/cpu.cfs_period_us); QuotaUs 0 means no limit.
	QuotaUs  int64 `json:"quota_us"`
	PeriodUs int64 `json:"period_us"`
	// QuotaCPUs is QuotaUs/PeriodUs, 0 when unlimited.
	QuotaCPUs float64 `json:"quota_cpus"`
	// Cpuset is the effective cpuset, nil when none was found.
	Cpuset CPUSet `json:"cpuset"`
}

// Usable is the share of the machine this process may really use.
type Usable struct {
	// CPUs is affinity ∩ cpuset ∩ online.
	CPUs CPUSet `json:"cpus"`
	// PhysicalCores is how many physical cores CPUs touches.
	PhysicalCores int `json:"physical_cores"`
	// Count is len(CPUs), lowered to the CPU quota (rounded down, at least 1): the
	// number of threads that can run at once without being throttled.
	Count int `json:"count"`
	// Cores is PhysicalCores lowered the same way: the default intra-op thread count.
	Cores int `json:"cores"`
	// Nodes are the NUMA nodes CPUs touches.
	Nodes []int `json:"nodes"`
}

// Memory is the memory and page settings.
type Memory struct {
	TotalBytes int64 `json:"total_bytes"`
	// THPEnabled and THPDefrag are the selected transparent huge page modes
	// ("always", "madvise", "never"...), "" when unknown.
	THPEnabled string `json:"thp_enabled"`
	THPDefrag  string `json:"thp_defrag"`
	// HugePageSizeBytes, HugePagesTotal and HugePagesFree describe the default-size
	// hugetlb pool from /proc/meminfo.
	HugePageSizeBytes int64 `json:"hugepage_size_bytes"`
	HugePagesTotal    int64 `json:"hugepages_total"`
	HugePagesFree     int64 `json:"hugepages_free"`
}

// Libc names the C library: Name "glibc" with its Version ("2.36") read from the library's
// ELF version definitions, or "" when it is another libc or could not be read (Notes say why).
type Libc struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Path    string `json:"path"`
}

// Library is a shared library mapped into the process.
type Library struct {
	// Name is "gnu", "intel" or "llvm" for OpenMP runtimes, "jemalloc", "tcmalloc" or
	// "mimalloc" for allocators.
	Name string `json:"name"`
	Path string `json:"path"`
}

// Detect reads the machine. It fails only when the CPU description or the CPU lists
// cannot be read; other missing files become Notes.
func Detect(opts Options) (*Probe, error) {
	root := opts.Root
	if root == "" {
		root = "/"
	}
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("probe root %q: not a readable directory; give the directory that holds sys/ and proc/", root)
	}
	live := !opts.FromFiles && filepath.Clean(root) == "/"
	r := &reader{root: root}
	p := &Probe{Source: "live", Env: map[string]string{}, Torch: opts.Torch, Interruptions: opts.Interruptions}
	if !live {
		p.Source = "files:" + root
	}

	if live {
		p.CPU, p.ISA = liveCPU()
	} else {
		var err error
		p.CPU, p.ISA, err = r.cpuinfo()
		if err != nil {
			return nil, err
		}
	}
	if err := r.topology(p); err != nil {
		return nil, err
	}
	r.numa(p)
	r.caches(p, live)
	r.cgroup(p)
	if live {
		p.Affinity = liveAffinity()
	} else {
		p.Affinity = r.statusAffinity()
	}
	if p.Affinity == nil {
		p.Notes = append(p.Notes, "affinity mask unknown; assuming all online CPUs")
		p.Affinity = p.Topology.Online
	}
	p.Usable = usable(p)
	r.memory(p)
	p.OpenMP, p.Allocators = r.libraries()
	p.Libc = r.libc()
	p.Notes = append(p.Notes, r.notes...)

	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if relevantEnv(k) {
			p.Env[k] = v
		}
	}
	if p.Torch != nil {
		p.Torch.parse()
	}
	p.Findings = findings(p)
	return p, nil
}

// relevantEnv picks the variables that change threading, placement, allocation or the ISA
// kernels dispatch to.
func relevantEnv(k string) bool {
	for _, pre := range []string{"OMP_", "KMP_", "GOMP_", "MKL_", "DNNL_", "ONEDNN_", "OPENBLAS_", "GOTO_", "MALLOC_CONF", "TCMALLOC_", "LD_PRELOAD", "TORCHSPEED_", "ATEN_CPU_CAPABILITY"} {
		if strings.HasPrefix(k, pre) {
			return true
		}
	}
	return false
}

// OpenMPRuntime is the name of the first OpenMP runtime loaded ("gnu", "intel",
// "llvm"), or "" when none is.
func (p *Probe) OpenMPRuntime() string {
	if len(p.OpenMP) == 0 {
		return ""
	}
	return p.OpenMP[0].Name
}

// NodeOf returns the NUMA node that holds cpu, -1 if none does.
func (p *Probe) NodeOf(cpu int) int {
	for _, n := range p.NUMA {
		if n.CPUs.Contains(cpu) {
			return n.ID
		}
	}
	return -1
}

// Node returns the NUMA node with the given id.
func (p *Probe) Node(id int) (NUMANode, bool) {
	for _, n := range p.NUMA {
		if n.ID == id {
			return n, true
		}
	}
	return NUMANode{}, false
}

// CoreOf returns the physical core that holds cpu.
func (p *Probe) CoreOf(cpu int) (Core, bool) {
	for _, c := range p.Topology.Cores {
		if c.CPUs.Contains(cpu) {
			return c, true
		}
	}
	return Core{}, false
}
