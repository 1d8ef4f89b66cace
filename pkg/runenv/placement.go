package runenv

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// coreUnit is one physical core an instance may get: its first usable hardware thread, or
// all of them with UseSMT.
type coreUnit struct {
	node int
	cpus cpu.CPUSet
}

// unitCPUs is the union of the units' CPUs.
func unitCPUs(us []coreUnit) cpu.CPUSet {
	var s cpu.CPUSet
	for _, u := range us {
		s = s.Union(u.cpus)
	}
	return s
}

// cpuPool is the usable CPUs narrowed to --cpus and --numa-node; explicit says --cpus chose
// them.
func cpuPool(p *cpu.Probe, o Options) (pool cpu.CPUSet, explicit bool, err error) {
	pool = p.Usable.CPUs
	explicit = strings.TrimSpace(o.CPUs) != ""
	if explicit {
		want, err := cpu.ParseCPUList(o.CPUs)
		if err != nil {
			return nil, false, fmt.Errorf("--cpus: %w", err)
		}
		if len(want) == 0 {
			return nil, false, fmt.Errorf("--cpus %q names no CPU", o.CPUs)
		}
		if bad := want.Minus(pool); len(bad) > 0 {
			return nil, false, fmt.Errorf("--cpus %q: CPU(s) %s are not available to this process (usable: %s; the others are offline, outside the cgroup cpuset or the affinity mask)",
				o.CPUs, bad, pool)
		}
		pool = want
	}
	if len(o.NUMANodes) > 0 {
		var ids []string
		for _, n := range p.NUMA {
			ids = append(ids, strconv.Itoa(n.ID))
		}
		var nodeCPUs cpu.CPUSet
		for _, id := range o.NUMANodes {
			n, ok := p.Node(id)
			if !ok {
				return nil, false, fmt.Errorf("--numa-node %d: no such NUMA node (this machine has node(s) %s)", id, strings.Join(ids, ","))
			}
			if len(n.CPUs.Intersect(pool)) == 0 {
				return nil, false, fmt.Errorf("--numa-node %d: none of its CPUs (%s) is usable by this process (usable: %s)", id, n.CPUs, pool)
			}
			nodeCPUs = nodeCPUs.Union(n.CPUs)
		}
		pool = pool.Intersect(nodeCPUs)
	}
	if len(pool) == 0 {
		return nil, false, fmt.Errorf("no usable CPUs (affinity %s, cgroup cpuset %s, online %s)", p.Affinity, p.Cgroup.Cpuset, p.Topology.Online)
	}
	return pool, explicit, nil
}

// coreUnits is one unit per physical core of pool, ordered by node and CPU, less the
// reserved cores and what the cgroup CPU quota does not cover.
func coreUnits(p *cpu.Probe, o Options, pool cpu.CPUSet, explicit bool) ([]coreUnit, []string, error) {
	var units []coreUnit
	var notes []string
	covered := cpu.CPUSet{}
	for _, c := range p.Topology.Cores {
		in := c.CPUs.Intersect(pool)
		if len(in) == 0 {
			continue
		}
		covered = covered.Union(in)
		if !o.UseSMT && len(in) > 1 {
			if explicit {
				notes = append(notes, fmt.Sprintf("CPU(s) %s share a core with CPU %d: left out, one thread per physical core (UseSMT keeps them)", in[1:], in[0]))
			}
			in = in[:1]
		}
		units = append(units, coreUnit{node: c.Node, cpus: in})
	}
	if rest := pool.Minus(covered); len(rest) > 0 {
		// CPUs with no topology entry (a /sys copy without it): each its own core.
		for _, c := range rest {
			units = append(units, coreUnit{node: p.NodeOf(c), cpus: cpu.CPUSet{c}})
		}
	}
	slices.SortStableFunc(units, func(a, b coreUnit) int {
		if a.node != b.node {
			return a.node - b.node
		}
		return a.cpus[0] - b.cpus[0]
	})
	if o.ReserveCores > 0 {
		if o.ReserveCores >= len(units) {
			return nil, nil, fmt.Errorf("--reserve-cores %d leaves no core: only %d physical core(s) are usable (CPUs %s)", o.ReserveCores, len(units), pool)
		}
		notes = append(notes, fmt.Sprintf("reserved core(s) on CPU(s) %s", unitCPUs(units[:o.ReserveCores])))
		units = units[o.ReserveCores:]
	}
	if q := p.Cgroup.QuotaCPUs; q > 0 {
		// More busy threads than the quota get throttled every period; keep to it.
		limit := max(1, p.Usable.Count)
		total := 0
		for i, u := range units {
			if total+u.cpus.Len() > limit {
				if i == 0 {
					i = 1
				}
				notes = append(notes, fmt.Sprintf("cgroup CPU quota %.2f CPUs: using %d of %d core(s)", q, i, len(units)))
				units = units[:i]
				break
			}
			total += u.cpus.Len()
		}
	}
	return units, notes, nil
}

// instanceShape is the number of instances and of cores per instance: as asked, or one
// instance (one per node in throughput mode) over the units, on one node in latency mode.
func instanceShape(o Options, units []coreUnit) (n, per int, notes []string, err error) {
	nodesUsed := map[int]bool{}
	for _, u := range units {
		nodesUsed[u.node] = true
	}
	n = o.Instances
	if n == 0 {
		n = 1
		if o.Mode == ModeThroughput {
			n = len(nodesUsed)
		}
	}
	if n > len(units) {
		return 0, 0, nil, fmt.Errorf("--instances %d: needs at least %d physical cores, but only %d are usable (CPUs %s)", n, n, len(units), unitCPUs(units))
	}
	per = o.CoresPerInstance
	if per == 0 {
		per = len(units) / n
		if o.Mode == ModeLatency && n == 1 && len(nodesUsed) > 1 {
			// One request at a time is faster on one node than across two.
			per = 0
			for _, u := range units {
				if u.node == units[0].node {
					per++
				}
			}
			notes = append(notes, fmt.Sprintf("latency mode: one instance on node %d only; add --instances for the other node(s)", units[0].node))
		}
	}
	if per*n > len(units) {
		return 0, 0, nil, fmt.Errorf("--instances %d x --cores-per-instance %d = %d physical cores, but only %d are usable (CPUs %s)",
			n, per, per*n, len(units), unitCPUs(units))
	}
	return n, per, notes, nil
}

// placeInstances gives each of n instances per cores, filling node by node so none straddles
// two nodes when the split allows.
func placeInstances(units []coreUnit, n, per int) ([][]coreUnit, error) {
	groups := make([][]coreUnit, 0, n)
	used := make([]bool, len(units))
	for i := 0; i < len(units) && len(groups) < n; {
		j := i
		for j < len(units) && units[j].node == units[i].node {
			j++
		}
		for k := i; k+per <= j && len(groups) < n; k += per {
			groups = append(groups, units[k:k+per])
			for x := k; x < k+per; x++ {
				used[x] = true
			}
		}
		i = j
	}
	if len(groups) < n {
		var rest []coreUnit
		for i, u := range units {
			if !used[i] {
				rest = append(rest, u)
			}
		}
		for k := 0; k+per <= len(rest) && len(groups) < n; k += per {
			groups = append(groups, rest[k:k+per])
		}
	}
	if len(groups) < n {
		return nil, fmt.Errorf("--instances %d of %d cores: could not place them on %d usable cores", n, per, len(units))
	}
	return groups, nil
}

// instanceSettings completes s (the fields every instance shares) for the instance on cores
// g: its CPUs, node, threads, memory and thread binding, wait policy and variables.
func instanceSettings(p *cpu.Probe, o Options, s Settings, g []coreUnit) Settings {
	var places []string
	for _, u := range g {
		s.CPUs = s.CPUs.Union(u.cpus)
		places = append(places, "{"+u.cpus.String()+"}")
		if u.node != s.NUMANode {
			s.NUMANode = -1
		}
	}
	if s.NUMANode < 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("instance %d spans NUMA nodes: CPUs %s", s.Instance, s.CPUs))
	}
	s.Threads = s.CPUs.Len()
	if o.Threads > 0 {
		s.Threads = o.Threads
		if o.Threads > s.CPUs.Len() {
			s.Notes = append(s.Notes, fmt.Sprintf("%d threads on %d CPU(s): threads will wait for each other", o.Threads, s.CPUs.Len()))
		}
	}
	s.MemBind = !o.NoMemBind && s.NUMANode >= 0 && len(p.NUMA) > 1
	s.ThreadBind = !o.NoThreadBind
	switch strings.ToLower(o.WaitPolicy) {
	case "active":
		s.WaitPolicy = "ACTIVE"
	case "passive":
		s.WaitPolicy = "PASSIVE"
	default:
		if o.Mode == ModeThroughput {
			// Instances busy all the time on cores of their own: nothing to yield to.
			s.WaitPolicy = "ACTIVE"
		} else if s.Threads > 1 {
			s.Notes = append(s.Notes, defaultWaitNote)
		}
	}
	s.Vars = vars(s, places)
	return s
}
