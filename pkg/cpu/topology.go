package cpu

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/klauspost/cpuid/v2"
)

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
