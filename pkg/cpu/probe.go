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
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/klauspost/cpuid/v2"
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
	// Torch is libtorch's build information when the caller supplied it.
	Torch *TorchInfo `json:"torch,omitempty"`
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
	p := &Probe{Source: "live", Env: map[string]string{}, Torch: opts.Torch}
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

// relevantEnv picks the variables that change threading, placement or allocation.
func relevantEnv(k string) bool {
	for _, pre := range []string{"OMP_", "KMP_", "GOMP_", "MKL_", "DNNL_", "ONEDNN_", "OPENBLAS_", "GOTO_", "MALLOC_CONF", "TCMALLOC_", "LD_PRELOAD", "TORCHSPEED_"} {
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

func liveCPU() (Processor, ISA) {
	c := cpuid.CPU
	proc := Processor{
		Vendor:      c.VendorString,
		Model:       strings.TrimSpace(c.BrandName),
		Family:      c.Family,
		ModelNumber: c.Model,
		Stepping:    c.Stepping,
		Hypervisor:  c.Supports(cpuid.HYPERVISOR),
	}
	// cpuid/v2 already drops AVX and AVX-512 unless XCR0 enables their registers; the
	// AMX tile state (XCR0 bits 17 and 18) it does not check, so that is done here.
	isa := ISA{
		Source:     "cpuid",
		SSE42:      c.Supports(cpuid.SSE42),
		AVX:        c.Supports(cpuid.AVX),
		AVX2:       c.Supports(cpuid.AVX2),
		FMA:        c.Supports(cpuid.FMA3),
		F16C:       c.Supports(cpuid.F16C),
		AVX512F:    c.Supports(cpuid.AVX512F),
		AVX512BW:   c.Supports(cpuid.AVX512BW),
		AVX512VL:   c.Supports(cpuid.AVX512VL),
		AVX512DQ:   c.Supports(cpuid.AVX512DQ),
		AVX512VNNI: c.Supports(cpuid.AVX512VNNI),
		AVXVNNI:    c.Supports(cpuid.AVXVNNI),
		AVX512BF16: c.Supports(cpuid.AVX512BF16),
		AMXTile:    c.Supports(cpuid.AMXTILE),
		AMXInt8:    c.Supports(cpuid.AMXINT8),
		AMXBF16:    c.Supports(cpuid.AMXBF16),
	}
	if xcr0, ok := readXCR0(c.Supports(cpuid.OSXSAVE)); ok {
		isa.XCR0 = fmt.Sprintf("%#x", xcr0)
		const tileState = 1<<17 | 1<<18
		if isa.AMXTile && xcr0&tileState != tileState {
			isa.NotEnabledByOS = append(isa.NotEnabledByOS, "amx_tile", "amx_int8", "amx_bf16")
			isa.AMXTile, isa.AMXInt8, isa.AMXBF16 = false, false, false
		}
	}
	return proc, isa
}

// reader reads files under a root and remembers what it could not read.
type reader struct {
	root  string
	notes []string
}

func (r *reader) path(rel string) string { return filepath.Join(r.root, rel) }

func (r *reader) read(rel string) (string, error) {
	b, err := os.ReadFile(r.path(rel))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (r *reader) readInt(rel string) (int64, error) {
	s, err := r.read(rel)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", r.path(rel), s)
	}
	return n, nil
}

func (r *reader) cpuList(rel string) (CPUSet, error) {
	s, err := r.read(rel)
	if err != nil {
		return nil, err
	}
	set, err := ParseCPUList(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.path(rel), err)
	}
	return set, nil
}

func (r *reader) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// cpuinfoFlags maps /proc/cpuinfo flag names to ISA fields. The kernel hides a flag
// when it has not enabled the feature's register state, so these are OS-enabled too.
var cpuinfoFlags = map[string]func(*ISA) *bool{
	"sse4_2":      func(i *ISA) *bool { return &i.SSE42 },
	"avx":         func(i *ISA) *bool { return &i.AVX },
	"avx2":        func(i *ISA) *bool { return &i.AVX2 },
	"fma":         func(i *ISA) *bool { return &i.FMA },
	"f16c":        func(i *ISA) *bool { return &i.F16C },
	"avx512f":     func(i *ISA) *bool { return &i.AVX512F },
	"avx512bw":    func(i *ISA) *bool { return &i.AVX512BW },
	"avx512vl":    func(i *ISA) *bool { return &i.AVX512VL },
	"avx512dq":    func(i *ISA) *bool { return &i.AVX512DQ },
	"avx512_vnni": func(i *ISA) *bool { return &i.AVX512VNNI },
	"avx_vnni":    func(i *ISA) *bool { return &i.AVXVNNI },
	"avx512_bf16": func(i *ISA) *bool { return &i.AVX512BF16 },
	"amx_tile":    func(i *ISA) *bool { return &i.AMXTile },
	"amx_int8":    func(i *ISA) *bool { return &i.AMXInt8 },
	"amx_bf16":    func(i *ISA) *bool { return &i.AMXBF16 },
}

// cpuinfo reads the processor name and flags of the first CPU in /proc/cpuinfo.
func (r *reader) cpuinfo() (Processor, ISA, error) {
	s, err := r.read("proc/cpuinfo")
	if err != nil {
		return Processor{}, ISA{}, fmt.Errorf("read CPU description: %w", err)
	}
	var proc Processor
	isa := ISA{Source: "cpuinfo"}
	seenFlags := false
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			if strings.TrimSpace(line) == "" && seenFlags {
				break // only the first processor block
			}
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		atoi := func() int { n, _ := strconv.Atoi(v); return n }
		switch k {
		case "vendor_id":
			proc.Vendor = v
		case "model name":
			proc.Model = v
		case "cpu family":
			proc.Family = atoi()
		case "model":
			proc.ModelNumber = atoi()
		case "stepping":
			proc.Stepping = atoi()
		case "flags":
			seenFlags = true
			for _, f := range strings.Fields(v) {
				if f == "hypervisor" {
					proc.Hypervisor = true
				}
				if field, ok := cpuinfoFlags[f]; ok {
					*field(&isa) = true
				}
			}
		}
	}
	if !seenFlags {
		return proc, isa, fmt.Errorf("%s: no flags line; is it a copy of /proc/cpuinfo from an x86 machine?", r.path("proc/cpuinfo"))
	}
	return proc, isa, nil
}

func (r *reader) topology(p *Probe) error {
	t := &p.Topology
	var err error
	t.Possible, _ = r.cpuList("sys/devices/system/cpu/possible")
	t.Online, err = r.cpuList("sys/devices/system/cpu/online")
	if err != nil {
		// Without the online list, each cpuN directory that has a topology is online.
		entries, derr := os.ReadDir(r.path("sys/devices/system/cpu"))
		if derr != nil {
			return fmt.Errorf("read CPU list: %w (is %s a copy of /sys?)", err, r.path("sys"))
		}
		var cpus []int
		for _, e := range entries {
			if n, ok := strings.CutPrefix(e.Name(), "cpu"); ok {
				if c, aerr := strconv.Atoi(n); aerr == nil {
					if _, serr := os.Stat(r.path(fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology", c))); serr == nil {
						cpus = append(cpus, c)
					}
				}
			}
		}
		if len(cpus) == 0 {
			return fmt.Errorf("read CPU list: %w", err)
		}
		t.Online = NewCPUSet(cpus...)
		r.note("no sys/devices/system/cpu/online; took the CPUs that have a topology directory")
	}
	if off, err := r.cpuList("sys/devices/system/cpu/offline"); err == nil {
		t.Offline = off
	} else {
		present, perr := r.cpuList("sys/devices/system/cpu/present")
		if perr == nil {
			t.Offline = present.Minus(t.Online)
		}
	}
	if t.Possible == nil {
		t.Possible = t.Online.Union(t.Offline)
	}
	t.LogicalCPUs = t.Online.Len()

	type key struct{ socket, first int }
	cores := map[key]*Core{}
	sockets := map[int]bool{}
	for _, c := range t.Online {
		dir := fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology/", c)
		socket, err := r.readInt(dir + "physical_package_id")
		if err != nil {
			socket = 0
		}
		coreID, err := r.readInt(dir + "core_id")
		if err != nil {
			coreID = int64(c)
		}
		sib, err := r.cpuList(dir + "thread_siblings_list")
		if err != nil {
			sib, err = r.cpuList(dir + "core_cpus_list")
		}
		if err != nil || !sib.Contains(c) {
			sib = CPUSet{c}
		}
		sib = sib.Intersect(t.Online)
		sockets[int(socket)] = true
		k := key{int(socket), sib[0]}
		if cores[k] == nil {
			cores[k] = &Core{Socket: int(socket), ID: int(coreID), Node: -1}
		}
		cores[k].CPUs = cores[k].CPUs.Union(CPUSet{c})
	}
	for _, c := range cores {
		t.Cores = append(t.Cores, *c)
		t.ThreadsPerCore = max(t.ThreadsPerCore, c.CPUs.Len())
	}
	sort.Slice(t.Cores, func(i, j int) bool { return t.Cores[i].CPUs[0] < t.Cores[j].CPUs[0] })
	t.PhysicalCores = len(t.Cores)
	t.Sockets = len(sockets)
	return nil
}

func (r *reader) numa(p *Probe) {
	entries, err := os.ReadDir(r.path("sys/devices/system/node"))
	if err == nil {
		for _, e := range entries {
			n, ok := strings.CutPrefix(e.Name(), "node")
			if !ok {
				continue
			}
			id, err := strconv.Atoi(n)
			if err != nil {
				continue
			}
			dir := "sys/devices/system/node/" + e.Name() + "/"
			cpus, _ := r.cpuList(dir + "cpulist")
			node := NUMANode{ID: id, CPUs: cpus.Intersect(p.Topology.Online)}
			if mi, err := r.read(dir + "meminfo"); err == nil {
				node.MemTotalBytes = meminfoBytes(mi, "MemTotal")
			}
			p.NUMA = append(p.NUMA, node)
		}
	}
	if len(p.NUMA) == 0 {
		// A kernel without NUMA support has no node directory: one node holds all.
		r.note("no NUMA nodes in sys/devices/system/node; treating the machine as one node")
		node := NUMANode{ID: 0, CPUs: p.Topology.Online}
		if mi, err := r.read("proc/meminfo"); err == nil {
			node.MemTotalBytes = meminfoBytes(mi, "MemTotal")
		}
		p.NUMA = []NUMANode{node}
	}
	sort.Slice(p.NUMA, func(i, j int) bool { return p.NUMA[i].ID < p.NUMA[j].ID })
	for i := range p.Topology.Cores {
		p.Topology.Cores[i].Node = p.NodeOf(p.Topology.Cores[i].CPUs[0])
	}
}

// meminfoBytes finds "key: N kB" in /proc/meminfo or a node's meminfo ("Node 0 key: N kB").
func meminfoBytes(text, key string) int64 {
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(k)
		if len(f) == 0 || f[len(f)-1] != key {
			continue
		}
		vf := strings.Fields(v)
		if len(vf) == 0 {
			return 0
		}
		n, err := strconv.ParseInt(vf[0], 10, 64)
		if err != nil {
			return 0
		}
		if len(vf) > 1 && strings.EqualFold(vf[1], "kB") {
			n *= 1024
		}
		return n
	}
	return 0
}

func (r *reader) caches(p *Probe, live bool) {
	type key struct {
		level int
		typ   string
	}
	kinds := map[key]*Cache{}
	instances := map[key]map[string]bool{}
	for _, c := range p.Topology.Online {
		base := fmt.Sprintf("sys/devices/system/cpu/cpu%d/cache", c)
		entries, err := os.ReadDir(r.path(base))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "index") {
				continue
			}
			dir := base + "/" + e.Name() + "/"
			level, err := r.readInt(dir + "level")
			if err != nil {
				continue
			}
			typ, _ := r.read(dir + "type")
			size, _ := r.read(dir + "size")
			shared, _ := r.cpuList(dir + "shared_cpu_list")
			shared = shared.Intersect(p.Topology.Online)
			k := key{int(level), typ}
			if kinds[k] == nil {
				kinds[k] = &Cache{Level: int(level), Type: typ, SizeBytes: parseSize(size), CPUsPerInstance: shared.Len(), Source: "sysfs"}
				instances[k] = map[string]bool{}
			}
			instances[k][shared.String()] = true
		}
	}
	for k, c := range kinds {
		c.Instances = len(instances[k])
		p.Caches = append(p.Caches, *c)
	}
	if len(p.Caches) == 0 && live {
		// Some VMs (this project's Firecracker sandbox among them) expose no cache
		// directories; CPUID still knows the sizes, if not the sharing.
		cc := cpuid.CPU.Cache
		for _, c := range []struct {
			level int
			typ   string
			size  int
		}{{1, "Data", cc.L1D}, {1, "Instruction", cc.L1I}, {2, "Unified", cc.L2}, {3, "Unified", cc.L3}} {
			if c.size > 0 {
				p.Caches = append(p.Caches, Cache{Level: c.level, Type: c.typ, SizeBytes: int64(c.size), Source: "cpuid"})
			}
		}
	}
	if len(p.Caches) == 0 {
		r.note("no cache information in sys/devices/system/cpu/cpu*/cache")
	}
	sort.Slice(p.Caches, func(i, j int) bool {
		if p.Caches[i].Level != p.Caches[j].Level {
			return p.Caches[i].Level < p.Caches[j].Level
		}
		return p.Caches[i].Type < p.Caches[j].Type
	})
}

// parseSize reads sysfs cache sizes such as "32K", "1024K", "36M".
func parseSize(s string) int64 {
	s = strings.TrimSpace(s)
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return n * mult
}

// statusAffinity reads Cpus_allowed_list from a fixture's proc/self/status.
func (r *reader) statusAffinity() CPUSet {
	s, err := r.read("proc/self/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			set, err := ParseCPUList(v)
			if err != nil {
				r.note("proc/self/status: %v", err)
				return nil
			}
			return set
		}
	}
	return nil
}

func usable(p *Probe) Usable {
	cpus := p.Affinity.Intersect(p.Topology.Online)
	if p.Cgroup.Cpuset != nil {
		cpus = cpus.Intersect(p.Cgroup.Cpuset)
	}
	u := Usable{CPUs: cpus, Count: cpus.Len()}
	nodes := map[int]bool{}
	for _, c := range p.Topology.Cores {
		if len(c.CPUs.Intersect(cpus)) > 0 {
			u.PhysicalCores++
			nodes[c.Node] = true
		}
	}
	u.Cores = u.PhysicalCores
	if q := p.Cgroup.QuotaCPUs; q > 0 {
		// Round down: a thread more than the quota gets throttled for the rest of every
		// period, which shows up as tail latency.
		limit := max(1, int(math.Floor(q+1e-9)))
		u.Count = min(u.Count, limit)
		u.Cores = min(u.Cores, limit)
	}
	for n := range nodes {
		u.Nodes = append(u.Nodes, n)
	}
	slices.Sort(u.Nodes)
	return u
}

func (r *reader) memory(p *Probe) {
	if mi, err := r.read("proc/meminfo"); err == nil {
		p.Memory.TotalBytes = meminfoBytes(mi, "MemTotal")
		p.Memory.HugePageSizeBytes = meminfoBytes(mi, "Hugepagesize")
		p.Memory.HugePagesTotal = meminfoBytes(mi, "HugePages_Total")
		p.Memory.HugePagesFree = meminfoBytes(mi, "HugePages_Free")
	} else {
		r.note("no proc/meminfo")
	}
	p.Memory.THPEnabled = r.selected("sys/kernel/mm/transparent_hugepage/enabled")
	p.Memory.THPDefrag = r.selected("sys/kernel/mm/transparent_hugepage/defrag")
}

// selected returns the bracketed choice of a sysfs mode file: "always [madvise] never".
func (r *reader) selected(rel string) string {
	s, err := r.read(rel)
	if err != nil {
		return ""
	}
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return s
}

// libraries scans proc/self/maps for OpenMP runtimes and allocators. Wheels rename
// them with a hash (libgomp-a34b3233.so.1), so prefixes are matched.
func (r *reader) libraries() (omp, alloc []Library) {
	s, err := r.read("proc/self/maps")
	if err != nil {
		r.note("no proc/self/maps; OpenMP runtime unknown")
		return nil, nil
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || seen[f[5]] {
			continue
		}
		path := strings.Join(f[5:], " ")
		base := filepath.Base(path)
		if !strings.Contains(base, ".so") {
			continue
		}
		seen[f[5]] = true
		name := strings.SplitN(base, ".so", 2)[0]
		stem, _, _ := strings.Cut(name, "-")
		switch stem {
		case "libgomp":
			omp = append(omp, Library{"gnu", path})
		case "libiomp5", "libiomp":
			omp = append(omp, Library{"intel", path})
		case "libomp":
			omp = append(omp, Library{"llvm", path})
		case "libjemalloc":
			alloc = append(alloc, Library{"jemalloc", path})
		case "libtcmalloc", "libtcmalloc_minimal", "libtcmalloc_and_profiler":
			alloc = append(alloc, Library{"tcmalloc", path})
		case "libmimalloc":
			alloc = append(alloc, Library{"mimalloc", path})
		}
	}
	return omp, alloc
}

// exists reports whether a file exists under the root.
func (r *reader) exists(rel string) bool {
	_, err := os.Stat(r.path(rel))
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}
