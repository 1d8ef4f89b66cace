package bench

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// AddProbe fills the environment's machine fields from a pkg/cpu probe: CPU model and ISA,
// cores, the CPUs and NUMA nodes this process may use, the cgroup CPU limit, the OpenMP runtime
// and allocators loaded. It returns the number of CPUs the process may keep busy (0 when the
// probe does not know).
func (e *Environment) AddProbe(p *cpu.Probe) int {
	if p == nil {
		return 0
	}
	e.CPUModel = p.CPU.Model
	e.ISA = p.ISA.Features()
	e.PhysicalCores = p.Topology.PhysicalCores
	if p.Topology.LogicalCPUs > 0 {
		e.LogicalCPUs = p.Topology.LogicalCPUs
	}
	if len(p.Usable.CPUs) > 0 {
		e.CPUsUsed = p.Usable.CPUs
	}
	if len(p.Usable.Nodes) > 0 {
		ns := make([]string, len(p.Usable.Nodes))
		for i, n := range p.Usable.Nodes {
			ns[i] = strconv.Itoa(n)
		}
		e.NUMANode = strings.Join(ns, ",")
	}
	if p.Cgroup.QuotaCPUs > 0 {
		e.CgroupCPULimit = fmt.Sprintf("%.2f CPUs (quota %dus per %dus)", p.Cgroup.QuotaCPUs, p.Cgroup.QuotaUs, p.Cgroup.PeriodUs)
	}
	e.OpenMPRuntime = p.OpenMPRuntime()
	if len(p.Allocators) > 0 {
		names := make([]string, len(p.Allocators))
		for i, a := range p.Allocators {
			names[i] = a.Name
		}
		e.Allocator = strings.Join(names, ",")
	}
	return p.Usable.Count
}
