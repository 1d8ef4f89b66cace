package bench

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// OpCall is one top-level op of one profiled forward.
type OpCall struct {
	Op     string
	Shapes string
	// Module is the dotted path of the submodule that ran it ("layer1.0.conv1"), "" if unknown.
	Module string
	Time   time.Duration
}

// OpRun is one profiled forward: its total time and its ops in the order they ran.
type OpRun struct {
	Total time.Duration
	Ops   []OpCall
}

// OpProfile is where a model's forward spends its time, op by op, from several profiled
// forwards: every figure is a median over them.
type OpProfile struct {
	Model string `json:"model"`
	Runs  int    `json:"runs"`
	// Total is the median profiled forward; profiling adds a callback to every op, so it is
	// above the unprofiled median.
	Total time.Duration `json:"total_p50_ns"`
	// Unattributed is the median of a forward's time outside its listed ops: the interpreter,
	// and ops that do not go through the dispatcher (list and tuple construction).
	Unattributed time.Duration `json:"unattributed_p50_ns"`
	Kinds        []OpKind      `json:"kinds"`
	Nodes        []OpNode      `json:"nodes"`
	// Varying is true when forwards ran different op sequences (control flow): a node is then
	// the k-th call of its op kind, and its median is over the runs that reached it.
	Varying bool `json:"varying"`
}

// OpKind is the time of all calls of one op kind in a forward.
type OpKind struct {
	Op string `json:"op"`
	// Count is the number of calls per forward (the largest over the runs).
	Count int           `json:"count"`
	Time  time.Duration `json:"p50_ns"`
	// Share is Time over the profile's Total.
	Share float64 `json:"share"`
}

// OpNode is one op call of a forward: the Occurrence-th call (from 1) of Op, with the input
// shapes and submodule of its first run.
type OpNode struct {
	Index      int           `json:"index"`
	Op         string        `json:"op"`
	Occurrence int           `json:"occurrence"`
	Shapes     string        `json:"shapes"`
	Module     string        `json:"module"`
	Time       time.Duration `json:"p50_ns"`
	Share      float64       `json:"share"`
	// Runs is how many forwards reached this node (all of them unless Varying).
	Runs int `json:"runs"`
}

// SummarizeOps turns profiled forwards into medians per op kind and per node. Kinds are
// ordered by time, most first; nodes in the order they ran.
func SummarizeOps(model string, runs []OpRun) (*OpProfile, error) {
	if len(runs) == 0 {
		return nil, fmt.Errorf("op profile of %q: no profiled forward; run at least one", model)
	}
	p := &OpProfile{Model: model, Runs: len(runs)}
	type nodeKey struct {
		op string
		k  int
	}
	nodeTimes := map[nodeKey][]float64{}
	nodeShapes, nodeModule := map[nodeKey]string{}, map[nodeKey]string{}
	var order []nodeKey
	kindTimes := map[string][]float64{}
	kindCount := map[string]int{}
	totals := make([]float64, 0, len(runs))
	others := make([]float64, 0, len(runs))
	for i, r := range runs {
		if i > 0 && !sameSequence(r.Ops, runs[0].Ops) {
			p.Varying = true
		}
		seen := map[string]int{}
		sum := map[string]float64{}
		var opsTotal float64
		for _, c := range r.Ops {
			seen[c.Op]++
			k := nodeKey{c.Op, seen[c.Op]}
			if _, ok := nodeTimes[k]; !ok {
				order = append(order, k)
				nodeShapes[k], nodeModule[k] = c.Shapes, c.Module
			}
			nodeTimes[k] = append(nodeTimes[k], float64(c.Time))
			sum[c.Op] += float64(c.Time)
			opsTotal += float64(c.Time)
		}
		for op, n := range seen {
			kindCount[op] = max(kindCount[op], n)
		}
		// A kind a run did not reach took no time in it.
		for op := range kindCount {
			kindTimes[op] = append(kindTimes[op], sum[op])
		}
		totals = append(totals, float64(r.Total))
		others = append(others, max(0, float64(r.Total)-opsTotal))
	}
	for op, ts := range kindTimes {
		// Runs before the kind first appeared took no time in it either.
		for len(ts) < len(runs) {
			ts = append(ts, 0)
		}
		kindTimes[op] = ts
	}
	p.Total = medianDuration(totals)
	p.Unattributed = medianDuration(others)
	for op, ts := range kindTimes {
		d := medianDuration(ts)
		p.Kinds = append(p.Kinds, OpKind{Op: op, Count: kindCount[op], Time: d, Share: share(d, p.Total)})
	}
	sort.Slice(p.Kinds, func(i, j int) bool {
		a, b := p.Kinds[i], p.Kinds[j]
		if a.Time != b.Time {
			return a.Time > b.Time
		}
		return a.Op < b.Op
	})
	for i, k := range order {
		d := medianDuration(nodeTimes[k])
		p.Nodes = append(p.Nodes, OpNode{Index: i + 1, Op: k.op, Occurrence: k.k, Shapes: nodeShapes[k], Module: nodeModule[k], Time: d,
			Share: share(d, p.Total), Runs: len(nodeTimes[k])})
	}
	return p, nil
}

func sameSequence(a, b []OpCall) bool {
	return slices.EqualFunc(a, b, func(x, y OpCall) bool { return x.Op == y.Op })
}

// medianDuration is the median of xs (reordered), as Percentile computes it.
func medianDuration(xs []float64) time.Duration {
	slices.Sort(xs)
	return time.Duration(Percentile(xs, 0.5) + 0.5)
}

// KindCounts is the number of calls per forward of each op kind.
func (p *OpProfile) KindCounts() map[string]int {
	m := make(map[string]int, len(p.Kinds))
	for _, k := range p.Kinds {
		m[k.Op] = k.Count
	}
	return m
}
