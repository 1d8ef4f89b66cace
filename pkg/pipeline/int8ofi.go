package pipeline

import (
	"fmt"
	"slices"

	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// int8OFI builds "INT8 + optimize_for_inference" from the INT8 candidate q when q's graph still
// holds FP32 convolutions or linear layers (quantize.skip, the fallback, dynamic quantization's
// convolutions). Those run on plain NCHW tensors with their weights re-laid-out on every call;
// optimize_for_inference turns the FP32 island into oneDNN (prepacked weights, oneDNN layouts
// up to the quantize_per_tensor that follows) and leaves the quantized operators alone. It is
// saved like the FP32 ofi candidate: q's module, with the pass re-applied at load.
//
// It returns nil when there is nothing to build (no FP32 layer left, the pass off, oneDNN
// broken here: then a skipped row) or when the candidate failed or moved from q; match says
// how its outputs compared with q's.
func (r *run) int8OFI(q *candidate) (ofi *candidate, match string) {
	toggle := r.cfg.Optimize.OptimizeForInference
	fp32 := total(quant.FP32LayerOps(q.nodes))
	if toggle == config.Off || fp32 == 0 {
		return nil, ""
	}
	name := q.name + " + optimize_for_inference"
	steps := append(slices.Clone(q.steps), "optimize_for_inference")
	if broken := r.opts.MKLDNNBroken; broken != "" {
		r.skip(name, kindINT8OFI, steps, broken)
		return nil, ""
	}
	c := r.addCandidate(name, kindINT8OFI, steps, func() (*candidate, error) {
		// quant's convert finalizes (freezes) the INT8 model with the methods it must keep, so
		// the pass works on a frozen graph and keeps them; it would freeze an unfrozen one
		// without preserving anything.
		m, err := q.mod.OptimizeForInference()
		if err != nil {
			return nil, err
		}
		return &candidate{mod: m, save: q.mod, passes: []string{torchspeed.PassOptimizeForInference},
			precision: q.precision, engine: q.engine, fp32Layers: q.fp32Layers}, nil
	})
	if c == nil || c.status != stCandidate {
		return nil, ""
	}
	// Held to the INT8 model it is built from, on the same check inputs, by cosine only: the
	// pass swaps the FP32 layers' kernels for oneDNN's, which round differently, and an
	// activation that lands on the other side of a quantize_per_tensor step moves by a whole
	// step of that scale, so a max abs error across a quantization step measures the scale, not
	// the pass. Outputs of 1 element have no meaningful cosine: max abs error is all there is.
	checks, _ := r.checkSet(true)
	want, err := outputsOf(q, checks)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("running %s for the comparison failed: %v", q.name, err)
		return nil, ""
	}
	got, err := outputsOf(c, checks)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("running it failed: %v", err)
		return nil, ""
	}
	maxAbs, cos, err := validate.CompareOutputs(want, got)
	o := r.cfg.Optimize
	switch {
	case err != nil:
		c.status, c.reason = stRejected, fmt.Sprintf("outputs do not match %s's: %v", q.name, err)
	case cosineMeaningful(want) && !(cos >= o.MinCosine):
		c.status, c.reason = stRejected, fmt.Sprintf("outputs moved from %s's: cosine %.6f (required %.6f) on %s", q.name, cos, o.MinCosine, report.Plural(len(checks), "check input set"))
	case !cosineMeaningful(want) && !(maxAbs <= o.MaxAbsError):
		c.status, c.reason = stRejected, fmt.Sprintf("outputs moved from %s's: max abs error %.3g (allowed %.3g; 1-element outputs have no meaningful cosine) on %s", q.name, maxAbs, o.MaxAbsError, report.Plural(len(checks), "check input set"))
	}
	if c.status != stCandidate {
		r.logf("  %-34s %s", name, c.reason)
		return nil, ""
	}
	match = fmt.Sprintf("outputs match %s's: cosine %.6f, max abs diff %.3g on %s, %s turned to oneDNN", q.name, cos, maxAbs, report.Plural(len(checks), "check input set"), report.Plural(fp32, "FP32 conv/linear layer"))
	return c, match
}

// pickINT8 decides, on the "INT8 vs FP32" measurement m, between the INT8 candidate q and ofi
// (built from it; nil: none): ofi is kept when it is optimize.min_speedup faster than q, or
// when optimize_for_inference is on. It returns the one that stands for INT8 against FP32.
func (r *run) pickINT8(m *measurement, q, ofi *candidate, match string) *candidate {
	if ofi == nil {
		return q
	}
	a, b := m.result(q.name), m.result(ofi.name)
	if a == nil || b == nil || a.Stats.P50 <= 0 || b.Stats.P50 <= 0 {
		ofi.status, ofi.reason = stRejected, "not measured against "+q.name
		return q
	}
	qp, op := msOf(a.Stats.P50), msOf(b.Stats.P50)
	o := r.cfg.Optimize
	switch {
	case o.OptimizeForInference == config.On:
		ofi.reason = fmt.Sprintf("optimize_for_inference is on in the config (%.2fx vs %s, p50 %.3f vs %.3f ms); %s", qp/op, q.name, op, qp, match)
	case qp/op >= o.MinSpeedup:
		ofi.reason = fmt.Sprintf("%.2fx faster than %s (p50 %.3f vs %.3f ms); %s", qp/op, q.name, op, qp, match)
	default:
		ofi.status, ofi.reason = stRejected, fmt.Sprintf("not faster than %s by %.0f%% (p50 %.3f vs %.3f ms, %.2fx)", q.name, (o.MinSpeedup-1)*100, op, qp, qp/op)
	}
	r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("%s: %s", ofi.name, ofi.reason))
	if ofi.status == stRejected {
		return q
	}
	return ofi
}
