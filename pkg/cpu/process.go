package cpu

import (
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

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
