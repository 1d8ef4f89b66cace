package pipeline

import (
	"fmt"
	"math"
	"slices"

	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// fastLinearRelTol bounds how far "<c> + fast_linear"'s outputs may be from c's: max abs diff
// <= fastLinearRelTol x max(1, largest |output| of c). The kernel sums in another order than
// BLAS, so the two differ by float rounding only (1e-6 on the transformer fixtures); anything
// larger is a bug, whatever the config's own tolerance allows.
const fastLinearRelTol = 1e-4

// fp32Fast builds "<c> + fast_linear" for every frozen FP32 candidate c built so far (their
// weights are graph constants, which the pass needs): the same module with its constant-weight
// linears swapped for torchspeed's GEMM over weights packed once. They run in the FP32 stages'
// shuffled rounds; measureStages keeps the one built on the chosen stage when it is faster.
// The artifact saves c's module (stock PyTorch loads it) and lists the pass, which Load applies
// after c's passes.
func (r *run) fp32Fast() error {
	if r.cfg.Optimize.FastLinear == config.Off {
		return nil
	}
	var bases []*candidate
	for _, c := range r.cands {
		if c.status == stCandidate && slices.Contains(c.steps, "freeze") {
			bases = append(bases, c)
		}
	}
	if len(bases) > 0 {
		r.logf("building fast_linear variants")
	}
	for _, base := range bases {
		r.fastLinearOf(base)
	}
	return nil
}

func (r *run) fastLinearOf(base *candidate) {
	name := base.name + " + fast_linear"
	steps := append(slices.Clone(base.steps), torchspeed.PassFastLinear)
	swapped, relus := 0, 0
	c := r.addCandidate(name, kindFP32Fast, steps, func() (*candidate, error) {
		m, n, nr, err := base.mod.FastLinear()
		if err != nil {
			return nil, err
		}
		swapped, relus = n, nr
		save := base.save
		if save == nil {
			save = base.mod
		}
		passes := slices.Clone(base.passes)
		if len(passes) == 0 { // a frozen graph is re-frozen at load (final.go's manifest)
			passes = []string{torchspeed.PassFreeze}
		}
		return &candidate{mod: m, save: save, passes: append(passes, torchspeed.PassFastLinear),
			channelsLast: base.channelsLast, base: base}, nil
	})
	if c == nil || c.status != stCandidate {
		return
	}
	if swapped == 0 {
		c.status, c.reason = stSkipped, "the graph has no linear with a constant float weight (aten::linear, or aten::matmul by a constant 2-D tensor)"
		return
	}
	want, err := outputsOf(base, r.checks)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("running %s for the comparison failed: %v", base.name, err)
		return
	}
	got, err := outputsOf(c, r.checks)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("running it failed: %v", err)
		return
	}
	scale := 1.0
	for _, o := range want {
		for _, v := range o {
			if !math.IsInf(v, 0) && !math.IsNaN(v) {
				scale = max(scale, math.Abs(v))
			}
		}
	}
	maxAbs, _, err := validate.CompareOutputs(want, got)
	if err != nil || maxAbs > fastLinearRelTol*scale {
		c.status, c.reason = stRejected, fmt.Sprintf("outputs differ from %s's by %.3g (allowed %.3g: float rounding only), %v", base.name, maxAbs, fastLinearRelTol*scale, err)
		r.warn(fmt.Sprintf("%s: %s", name, c.reason))
		return
	}
	c.reason = fmt.Sprintf("%d linear(s) swapped for torchspeed's GEMM (%d with a fused relu); outputs within %.2g of %s's on %d check input set(s)", swapped, relus, maxAbs, base.name, len(r.checks))
}

// decideFastLinear keeps best's fast_linear variant (on the stage measurement, p50) when it is
// faster, or when optimize.fast_linear is on, and rejects the variants of stages not kept. It
// returns the candidate that now stands for best.
func (r *run) decideFastLinear(best *candidate, p50 map[string]float64) *candidate {
	for _, c := range r.cands {
		if c.kind != kindFP32Fast || c.status != stCandidate {
			continue
		}
		if c.base != best {
			c.status, c.reason = stRejected, fmt.Sprintf("%s was not kept; %s", c.base.name, c.reason)
			continue
		}
		bp, fp := p50[best.name], p50[c.name]
		switch {
		case r.cfg.Optimize.FastLinear == config.On:
			c.status, c.reason = stKept, fmt.Sprintf("optimize.fast_linear is on in the config (%.2fx vs %s, p50 %.3f vs %.3f ms); %s", bp/fp, best.name, fp, bp, c.reason)
		case fp > 0 && fp < bp:
			c.status, c.reason = stKept, fmt.Sprintf("%.2fx faster than %s (p50 %.3f vs %.3f ms); %s", bp/fp, best.name, fp, bp, c.reason)
		default:
			c.status, c.reason = stRejected, fmt.Sprintf("not faster than %s (p50 %.3f vs %.3f ms)", best.name, fp, bp)
		}
		r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("%s: %s", c.name, c.reason))
		if c.status == stKept {
			best = c
		}
	}
	return best
}
