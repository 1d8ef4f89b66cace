package pipeline

import (
	"fmt"
	"math"
	"slices"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// fastLinearRelTol bounds how far "<c> + fast_linear"'s and "<c> + fast_conv"'s outputs may be
// from c's: max abs diff <= fastLinearRelTol x max(1, largest |output| of c). The kernel sums in
// another order than BLAS (or ATen's convolution), so the two differ by float rounding only (1e-6
// on the transformer fixtures); anything larger is a bug, whatever the config's own tolerance
// allows.
const fastLinearRelTol = 1e-4

// fastPass is one of the FP32 load-time passes optimize builds variants with.
type fastPass struct {
	pass  string // the load pass (torchspeed.PassFastLinear, PassFastConv)
	kind  kind
	apply func(*torch.Module) (m *torch.Module, swapped, relus int, err error)
	none  string // why a variant that swapped nothing is skipped
	noun  string // what it swaps, one of them ("linear layer")
	what  string // what happened to them ("swapped for torchspeed's GEMM")
}

var (
	fastLinearPass = fastPass{torchspeed.PassFastLinear, kindFP32Fast, (*torch.Module).FastLinear,
		"the graph has no linear with a constant float weight (aten::linear, or aten::matmul by a constant 2-D tensor) and no eval-mode LSTM with constant weights",
		"linear layer", "swapped for torchspeed's GEMM (an LSTM's two per layer for its fused loop)"}
	fastConvPass = fastPass{torchspeed.PassFastConv, kindFP32Conv, (*torch.Module).FastConv,
		"the graph has no 2-D convolution with a constant float weight and groups 1",
		"convolution", "swapped for im2col + torchspeed's GEMM"}
)

// fp32Fast builds "<c> + fast_linear" for every frozen FP32 candidate c built so far (their
// weights are graph constants, which the passes need): the same module with its constant-weight
// linears swapped for torchspeed's GEMM over weights packed once; then "<c> + fast_conv" for those
// candidates and their fast_linear variants (constant-weight convolutions as im2col + the same
// GEMM). They run in the FP32 stages' shuffled rounds; measureStages keeps, on the chosen stage,
// the fast_linear variant and then the fast_conv one built on what it kept, each when it is
// faster. The artifact saves c's module (stock PyTorch loads it) and lists the passes, which Load
// applies after c's passes (fast_linear, then fast_conv).
//
// The quick search builds them later, on the FP32 stage measureStages keeps alone
// (fastOnKept): a variant of a stage not kept was never a choice, and building and checking
// every one (up to nine on a CNN) took minutes.
func (r *run) fp32Fast() error {
	if r.quick() {
		return nil
	}
	var bases []*candidate
	for _, c := range r.cands {
		if c.status == stCandidate && slices.Contains(c.steps, "freeze") {
			bases = append(bases, c)
		}
	}
	r.buildFast(bases)
	return nil
}

// fastOnKept is the quick search's fp32Fast: it builds the variants of best, the FP32 stage
// kept, times them against it (and the original) in a measurement of their own, and returns
// the p50s of that measurement, on which decideFastLinear and decideFastConv then decide (nil:
// no variant to time).
func (r *run) fastOnKept(best *candidate) (map[string]float64, error) {
	if !slices.Contains(best.steps, "freeze") {
		return nil, nil
	}
	n := len(r.cands)
	r.fastSkip = r.fastShares()
	r.buildFast([]*candidate{best})
	var fresh []*candidate
	for _, c := range r.cands[n:] {
		if c.status == stCandidate {
			fresh = append(fresh, c)
		}
	}
	if len(fresh) == 0 {
		return nil, nil
	}
	r.logf("measuring %s of %s against it and the original, %d interleaved rounds (quick search: variants of the kept stage only)", report.Plural(len(fresh), "variant"), best.name, r.cfg.Bench.StageRuns)
	timed := append([]*candidate{best}, fresh...)
	m, err := r.measure("fast variants", timed, r.untilSettled(r.stageOptions(r.cfg.Bench.StageRuns), timed, func(*candidate) bool { return true }, false))
	if err != nil {
		return nil, fmt.Errorf("measuring the fast variants: %w", err)
	}
	p50 := map[string]float64{}
	for _, res := range m.cmp.Results {
		p50[res.Name] = msOf(res.Stats.P50)
	}
	return p50, nil
}

// buildFast builds the fast_linear variants of bases, then the fast_conv variants of bases and
// of the fast_linear variants built.
func (r *run) buildFast(bases []*candidate) {
	if r.cfg.Optimize.FastLinear != config.Off {
		if len(bases) > 0 {
			r.logf("building fast_linear variants")
		}
		n := len(bases)
		for _, base := range bases[:n] {
			if c := r.fastVariantOf(base, fastLinearPass); c != nil && c.status == stCandidate {
				bases = append(bases, c)
			}
		}
		r.buildLinearBF16(bases[n:])
	}
	if r.cfg.Optimize.FastConv != config.Off {
		if len(bases) > 0 {
			r.logf("building fast_conv variants")
		}
		for _, base := range bases {
			r.fastVariantOf(base, fastConvPass)
		}
	}
}

// fastVariantOf builds "<base> + <p.pass>" and checks its outputs against base's.
func (r *run) fastVariantOf(base *candidate, p fastPass) *candidate {
	name := base.name + " + " + p.pass
	steps := append(slices.Clone(base.steps), p.pass)
	if why := r.fastSkip[p.pass]; why != "" {
		r.logf("  %-34s skipped: %s", name, why)
		r.skip(name, p.kind, steps, why)
		return nil
	}
	swapped, relus := 0, 0
	c := r.addCandidate(name, p.kind, steps, func() (*candidate, error) {
		m, n, nr, err := p.apply(base.mod)
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
		return &candidate{mod: m, save: save, passes: append(passes, p.pass),
			channelsLast: base.channelsLast, base: base}, nil
	})
	if c == nil || c.status != stCandidate {
		return c
	}
	if swapped == 0 {
		c.status, c.reason = stSkipped, p.none
		return c
	}
	want, err := r.outputsOnChecks(base)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("running %s for the comparison failed: %v", base.name, err)
		return c
	}
	got, err := r.outputsOnChecks(c)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("running it failed: %v", err)
		return c
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
		return c
	}
	c.reason = fmt.Sprintf("%s %s (%d with a fused relu); outputs within %.2g of %s's on %s", report.Plural(swapped, p.noun), p.what, relus, maxAbs, base.name, report.Plural(len(r.checks), "check input set"))
	return c
}

// decideFastLinear keeps best's fast_linear variant (on the stage measurement, p50) when it is
// faster, or when optimize.fast_linear is on, and rejects the variants of stages not kept. It
// returns the candidate that now stands for best.
func (r *run) decideFastLinear(best *candidate, p50 map[string]float64) *candidate {
	return r.decideFast(best, p50, kindFP32Fast, r.cfg.Optimize.FastLinear, "optimize.fast_linear")
}

// decideFastConv does as decideFastLinear for the fast_conv variants (optimize.fast_conv), on the
// candidate decideFastLinear left standing for best.
func (r *run) decideFastConv(best *candidate, p50 map[string]float64) *candidate {
	return r.decideFast(best, p50, kindFP32Conv, r.cfg.Optimize.FastConv, "optimize.fast_conv")
}

func (r *run) decideFast(best *candidate, p50 map[string]float64, k kind, toggle config.Toggle, knob string) *candidate {
	for _, c := range r.cands {
		if c.kind != k || c.status != stCandidate {
			continue
		}
		if c.base != best {
			// Its own p50 may beat the kept stage: say that it was never in the running.
			c.status, c.reason = stRejected, fmt.Sprintf("built on %s, which was not kept, so it was not a choice whatever its p50; %s", c.base.name, c.reason)
			continue
		}
		bp, fp := p50[best.name], p50[c.name]
		switch {
		case toggle == config.On:
			c.status, c.reason = stKept, fmt.Sprintf("%s is on in the config (%.2fx vs %s, p50 %.3f vs %.3f ms); %s", knob, bp/fp, best.name, fp, bp, c.reason)
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
