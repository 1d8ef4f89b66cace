package pipeline

import (
	"fmt"
	"slices"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// int8Fast builds "<q> + fast_qdq" from the INT8 candidate q (or its optimize_for_inference
// variant): the same module with its quantize_per_tensor, dequantize and quantized add/add_relu
// calls swapped for torchspeed's ops, which give the same tensors bit for bit, vectorized and
// parallel where a libtorch without FBGEMM runs a scalar loop on one thread (or, for the adds,
// one vector width). The artifact saves q's module (stock
// PyTorch loads it) and lists the pass, which Load applies last.
//
// It returns nil when there is nothing to build (the toggle off, q nil, no call to swap) or when
// the candidate failed or its outputs are not exactly q's.
func (r *run) int8Fast(q *candidate) *candidate {
	if q == nil || r.cfg.Optimize.FastQDQ == config.Off {
		return nil
	}
	name := q.name + " + fast_qdq"
	steps := append(slices.Clone(q.steps), torchspeed.PassFastQDQ)
	if !torch.FastQDQApplies() {
		r.skip(name, kindINT8Fast, steps, "libtorch has FBGEMM: its own quantize_per_tensor/dequantize are vectorized already")
		return nil
	}
	var swapped torch.FastQDQCounts
	c := r.addCandidate(name, kindINT8Fast, steps, func() (*candidate, error) {
		m, n, err := q.mod.FastQDQ()
		if err != nil {
			return nil, err
		}
		swapped = n
		save := q.save
		if save == nil {
			save = q.mod
		}
		return &candidate{mod: m, save: save, passes: append(slices.Clone(q.passes), torchspeed.PassFastQDQ),
			channelsLast: q.channelsLast, precision: q.precision, engine: q.engine, fp32Layers: q.fp32Layers}, nil
	})
	if c == nil || c.status != stCandidate {
		return nil
	}
	if swapped.Quantizes+swapped.Dequantizes+swapped.Adds == 0 {
		c.status, c.reason = stSkipped, "the graph calls no aten::quantize_per_tensor, aten::dequantize or quantized::add(_relu)"
		return nil
	}
	// The ops are exact: any difference from q's outputs, on every check input, is a bug.
	want, err := outputsOf(q, r.checks)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("running %s for the comparison failed: %v", q.name, err)
		return nil
	}
	got, err := outputsOf(c, r.checks)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("running it failed: %v", err)
		return nil
	}
	if maxAbs, _, err := validate.CompareOutputs(want, got); err != nil || maxAbs != 0 {
		c.status, c.reason = stRejected, fmt.Sprintf("outputs are not exactly %s's (max abs diff %.3g, %v): torchspeed's quantize/dequantize/add must give the same bits", q.name, maxAbs, err)
		r.warn(fmt.Sprintf("%s: %s", name, c.reason))
		return nil
	}
	c.reason = fmt.Sprintf("%s and %s swapped for torchspeed's; outputs exactly %s's on %s", report.Plural(swapped.Quantizes+swapped.Dequantizes, "quantize_per_tensor/dequantize call"), report.Plural(swapped.Adds, "quantized add call"), q.name, report.Plural(len(r.checks), "check input set"))
	return c
}

// pickFast decides between base and fast (built from it; nil: none), see pickVariant; fast
// is kept anyway when optimize.fast_qdq is on. Its outputs are base's bit for bit (checked when
// built) from fewer operations, so it is kept unless slower beyond doubt: under load the
// interval of a 5% saving (resnet18's input quantize, 0.5 of 10 ms) straddled 1 and it was
// dropped. It returns the one that stands for base.
func (r *run) pickFast(m *measurement, base, fast *candidate) *candidate {
	return r.pickVariant(m, base, fast, r.cfg.Optimize.FastQDQ == config.On, true, "optimize.fast_qdq")
}

// pickVariant decides between base and v (a variant built from it; nil: none) and returns the
// one that stands for base; with its knob (named knob) on, v is kept whatever it measures. On
// auto, v is kept only when it is faster beyond doubt: the 95% interval of the ratio of their
// p50s lies below 1. The measurement m (all candidates, a few runs each) decides when its
// interval excludes 1; otherwise the two run again, alone and interleaved, with more runs
// (confirmPair). Deciding on the p50s of m alone was a coin toss when they were a few percent
// apart: it rejected a variant that then won every alternation of separate processes
// (docs/architecture.md). With sameBits (v gives base's outputs bit for bit with less work), v is
// kept unless it is slower beyond doubt (the interval lies above 1).
func (r *run) pickVariant(m *measurement, base, v *candidate, on, sameBits bool, knob string) *candidate {
	if v == nil {
		return base
	}
	a, b := m.result(base.name), m.result(v.name)
	if a == nil || b == nil || a.Stats.P50 <= 0 || b.Stats.P50 <= 0 {
		v.status, v.reason = stRejected, "not measured against "+base.name
		return base
	}
	bp, vp := msOf(a.Stats.P50), msOf(b.Stats.P50)
	if on {
		v.reason = fmt.Sprintf("%s is on in the config (%.2fx vs %s, p50 %.3f vs %.3f ms); %s", knob, bp/vp, base.name, vp, bp, v.reason)
		return r.recordVariant(v, base)
	}
	where := "in " + m.name
	ratio, lo, hi, err := bench.RatioOfMediansCI(bench.Floats(a.Samples), bench.Floats(b.Samples), 0.95, bench.DefaultResamples, r.cfg.Bench.Seed)
	if err != nil || (lo <= 1 && hi >= 1) {
		p, cerr := r.confirm(base, v)
		if cerr != nil {
			v.status, v.reason = stRejected, fmt.Sprintf("could not be told apart from %s in %s (p50 %.3f vs %.3f ms), and timing the two alone failed: %v", base.name, m.name, vp, bp, cerr)
			return r.recordVariant(v, base)
		}
		ratio, lo, hi, where = p.Ratio, p.RatioLo, p.RatioHi, fmt.Sprintf("timed alone against it, %d runs each, as %s could not tell them apart (p50 %.3f vs %.3f ms)", p.Runs, m.name, vp, bp)
	}
	switch {
	case hi < 1:
		v.reason = fmt.Sprintf("%.2fx faster than %s (p50 ratio %.3f, 95%% CI %.3f-%.3f, %s); %s", 1/ratio, base.name, ratio, lo, hi, where, v.reason)
	case sameBits && lo <= 1:
		v.reason = fmt.Sprintf("not slower than %s beyond doubt (p50 ratio %.3f, 95%% CI %.3f-%.3f, %s), with the same outputs from less work; %s", base.name, ratio, lo, hi, where, v.reason)
	case sameBits:
		v.status, v.reason = stRejected, fmt.Sprintf("slower than %s beyond doubt (p50 ratio %.3f, 95%% CI %.3f-%.3f, %s)", base.name, ratio, lo, hi, where)
	default:
		v.status, v.reason = stRejected, fmt.Sprintf("not faster than %s beyond doubt (p50 ratio %.3f, 95%% CI %.3f-%.3f, %s)", base.name, ratio, lo, hi, where)
	}
	return r.recordVariant(v, base)
}

// recordVariant adds v's decision to the report and returns v, or base when v was rejected.
func (r *run) recordVariant(v, base *candidate) *candidate {
	r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("%s: %s", v.name, v.reason))
	if v.status == stRejected {
		return base
	}
	return v
}

// pairResult is the ratio of v's p50 to base's with its 95% interval, from runs of each.
type pairResult struct {
	Ratio, RatioLo, RatioHi float64
	Runs                    int
}

// confirm times base and v alone, interleaved in shuffled rounds, with confirmRuns(stage
// runs) runs each (tests replace it through r.confirmPair).
func (r *run) confirm(base, v *candidate) (pairResult, error) {
	if r.confirmPair != nil {
		return r.confirmPair(base, v)
	}
	runs := confirmRuns(r.cfg.Bench.StageRuns)
	targets := make([]bench.Target, 0, 2)
	for _, c := range []*candidate{base, v} {
		if err := c.start(); err != nil {
			return pairResult{}, fmt.Errorf("%s: %w", c.name, err)
		}
		targets = append(targets, &target{ctx: r.ctx, name: c.name, c: c, inputs: r.inputs, delay: r.delayFor("confirm", c.name)})
	}
	cmp, err := bench.Compare(targets, r.stageOptions(runs))
	if err != nil {
		return pairResult{}, err
	}
	for _, p := range cmp.Pairs {
		if p.Other == v.name {
			return pairResult{Ratio: p.Ratio, RatioLo: p.RatioLo, RatioHi: p.RatioHi, Runs: runs}, nil
		}
	}
	return pairResult{}, fmt.Errorf("no comparison of %s with %s", v.name, base.name)
}

// confirmRuns is how many runs each side gets when a variant is timed alone against its base:
// four times the stage runs, at least 60 (a 3% difference at this VM's 5-10% spread per run
// needs about that many for an interval of the median ratio that excludes 1).
func confirmRuns(stageRuns int) int { return max(60, 4*stageRuns) }
