package cpu

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteText writes the probe for a person to read.
func (p *Probe) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	pf := ew.printf
	p.writeHardware(pf)
	p.writeProcess(pf)
	if t := p.Torch; t != nil {
		t.writeText(pf)
	}
	if in := p.Interruptions; in != nil {
		in.writeText(pf)
	}
	if len(p.Env) > 0 {
		keys := make([]string, 0, len(p.Env))
		for k := range p.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			pf("%-12s%s=%s\n", ifStr(i == 0, "Environment"), k, p.Env[k])
		}
	}
	for _, n := range p.Notes {
		pf("Note        %s\n", n)
	}
	if len(p.Findings) == 0 {
		pf("\nFindings: none\n")
	} else {
		pf("\nFindings:\n")
	}
	for _, f := range p.Findings {
		pf("  [%s] %s\n           fix: %s\n", f.Severity, f.Message, f.Fix)
	}
	return ew.err
}

// writeHardware prints the CPU, its ISA, topology, NUMA nodes and caches.
func (p *Probe) writeHardware(pf func(string, ...any)) {
	pf("CPU         %s (%s, family %d model %d stepping %d)%s\n", orUnknown(p.CPU.Model), orUnknown(p.CPU.Vendor),
		p.CPU.Family, p.CPU.ModelNumber, p.CPU.Stepping, ifStr(p.CPU.Hypervisor, ", virtual machine"))
	feats := p.ISA.Features()
	pf("ISA         %s  [%s]\n", p.ISA.Level(), strings.Join(feats, " "))
	var missing []string
	for _, f := range []string{"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8"} {
		if !slices.Contains(feats, f) {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		pf("            missing: %s\n", strings.Join(missing, " "))
	}
	if p.ISA.XCR0 != "" || p.ISA.Source != "" {
		pf("            from %s%s\n", p.ISA.Source, ifStr(p.ISA.XCR0 != "", ", OS-enabled state XCR0="+p.ISA.XCR0))
	}
	t := p.Topology
	pf("Topology    %d socket(s), %d physical cores, %d logical CPUs, %d thread(s)/core\n", t.Sockets, t.PhysicalCores, t.LogicalCPUs, t.ThreadsPerCore)
	pf("            online %s%s\n", t.Online, ifStr(t.Offline.Len() > 0, ", offline "+t.Offline.String()))
	for _, n := range p.NUMA {
		pf("NUMA node %d CPUs %s, %s\n", n.ID, n.CPUs, humanBytes(n.MemTotalBytes))
	}
	for _, c := range p.Caches {
		share := ""
		if c.Instances > 0 {
			share = fmt.Sprintf(" x%d, shared by %d CPU(s)", c.Instances, c.CPUsPerInstance)
		}
		pf("Cache       L%d %-11s %s%s (%s)\n", c.Level, c.Type, humanBytes(c.SizeBytes), share, c.Source)
	}
}

// writeProcess prints what this process may use: cgroup, affinity, usable CPUs, memory, and
// the OpenMP runtime, allocator and C library it loaded.
func (p *Probe) writeProcess(pf func(string, ...any)) {
	cg := p.Cgroup
	switch {
	case cg.Version == 0:
		pf("Cgroup      none found\n")
	default:
		quota := "no CPU quota"
		if cg.QuotaCPUs > 0 {
			quota = fmt.Sprintf("CPU quota %.2f CPUs (%d/%d us)", cg.QuotaCPUs, cg.QuotaUs, cg.PeriodUs)
		}
		set := "no cpuset"
		if cg.Cpuset != nil {
			set = "cpuset " + cg.Cpuset.String()
		}
		pf("Cgroup      v%d, %s, %s\n", cg.Version, quota, set)
	}
	pf("Affinity    %s\n", p.Affinity)
	pf("Usable      CPUs %s on node(s) %s: %d CPU(s) at once, %d physical core(s) -> default %d intra-op thread(s)\n",
		p.Usable.CPUs, joinInts(p.Usable.Nodes), p.Usable.Count, p.Usable.PhysicalCores, p.Usable.Cores)
	m := p.Memory
	pf("Memory      %s, THP enabled=%s defrag=%s, hugepages %d/%d free of %s\n", humanBytes(m.TotalBytes),
		orUnknown(m.THPEnabled), orUnknown(m.THPDefrag), m.HugePagesFree, m.HugePagesTotal, humanBytes(m.HugePageSizeBytes))
	omp := "none loaded"
	if len(p.OpenMP) > 0 {
		var s []string
		for _, l := range p.OpenMP {
			s = append(s, l.Name+" ("+l.Path+")")
		}
		omp = strings.Join(s, ", ")
	}
	pf("OpenMP      %s\n", omp)
	alloc := "glibc malloc"
	if len(p.Allocators) > 0 {
		alloc = p.Allocators[0].Name + " (" + p.Allocators[0].Path + ")"
	}
	pf("Allocator   %s\n", alloc)
	libc := "unknown"
	if p.Libc.Name != "" {
		libc = p.Libc.Name + " " + orUnknown(p.Libc.Version) + " (" + p.Libc.Path + ")"
	}
	pf("C library   %s\n", libc)
}

// writeText prints libtorch's build, engines, threads, oneDNN check and BLAS.
func (t *TorchInfo) writeText(pf func(string, ...any)) {
	pf("libtorch    %s, oneDNN %s, MKL %s, OpenMP %s, CPU capability %s, backend %s\n", t.Version,
		orNone(t.OneDNN), orNone(t.MKL), orNone(t.OpenMP), orUnknown(t.CPUCapability), orUnknown(t.ParallelBackend))
	pf("            quantized engines %s (current %s), threads intra-op %d inter-op %d\n",
		strings.Join(t.QEngines, ","), orUnknown(t.QEngine), t.NumThreads, t.NumInteropThreads)
	switch c := t.OneDNNCheck; c {
	case "":
	case OneDNNPassed:
		pf("            oneDNN check passed (an add, a convolution of a batch of 2: right results)\n")
	default:
		pf("            oneDNN check FAILED: %s\n", c)
	}
	if b := t.BLAS; b != nil && b.Library != "" {
		pf("BLAS        %s, %s, %d thread(s)\n", orUnknown(b.Config), orUnknown(b.Threading), b.Threads)
	}
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

func ifStr(c bool, s string) string {
	if c {
		return s
	}
	return ""
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func humanBytes(n int64) string {
	switch {
	case n <= 0:
		return "unknown size"
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
