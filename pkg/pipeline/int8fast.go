package pipeline

import (
	"fmt"
	"slices"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/config"
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
	c.reason = fmt.Sprintf("%d quantize_per_tensor/dequantize and %d quantized add call(s) swapped for torchspeed's; outputs exactly %s's on %d check input set(s)", swapped.Quantizes+swapped.Dequantizes, swapped.Adds, q.name, len(r.checks))
	return c
}

// pickFast decides, on the measurement m, between base and fast (built from it; nil: none):
// fast is kept when its p50 is lower, or when optimize.fast_qdq is on. It returns the one
// that stands for base.
func (r *run) pickFast(m *measurement, base, fast *candidate) *candidate {
	return r.pickVariant(m, base, fast, r.cfg.Optimize.FastQDQ == config.On, "optimize.fast_qdq")
}

// pickVariant decides, on the measurement m, between base and v (a variant built from it;
// nil: none): v is kept when its p50 is lower, or when its knob (named knob) is on. It records
// the decision and returns the one that stands for base.
func (r *run) pickVariant(m *measurement, base, v *candidate, on bool, knob string) *candidate {
	if v == nil {
		return base
	}
	a, b := m.result(base.name), m.result(v.name)
	if a == nil || b == nil || a.Stats.P50 <= 0 || b.Stats.P50 <= 0 {
		v.status, v.reason = stRejected, "not measured against "+base.name
		return base
	}
	bp, vp := msOf(a.Stats.P50), msOf(b.Stats.P50)
	switch {
	case on:
		v.reason = fmt.Sprintf("%s is on in the config (%.2fx vs %s, p50 %.3f vs %.3f ms); %s", knob, bp/vp, base.name, vp, bp, v.reason)
	case vp < bp:
		v.reason = fmt.Sprintf("%.2fx faster than %s (p50 %.3f vs %.3f ms); %s", bp/vp, base.name, vp, bp, v.reason)
	default:
		v.status, v.reason = stRejected, fmt.Sprintf("not faster than %s (p50 %.3f vs %.3f ms)", base.name, vp, bp)
	}
	r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("%s: %s", v.name, v.reason))
	if v.status == stRejected {
		return base
	}
	return v
}
