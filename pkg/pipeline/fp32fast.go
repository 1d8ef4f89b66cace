package pipeline

import (
	"fmt"
	"math"
	"slices"
	"strings"

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
// the fastest chain of them (decideFastChain). The artifact saves c's module (stock PyTorch loads it) and lists the passes, which Load
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
// the p50s of that measurement, on which decideFastChain then decides (nil:
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

// decideFastChain keeps, among best and the fast variants built on it (fast_linear, its BF16
// form, fast_conv, each possibly on another), the one with the lowest p50 on the stage
// measurement, with the variants it is built on; a pass whose optimize.* toggle is on is in the
// kept chain whatever its speed. Judging each step alone against its base lost variants that win
// only together: on the digits CNN, fast_linear saves 5 us of a 14 us call once fast_conv has
// replaced ATen's convolutions, and beside the plain graph's 20+ us under load the 5 us hid in
// the noise; Silero VAD v4's fused LSTM was lost the same way. Variants of stages not kept are
// rejected. It returns the candidate that now stands for best.
func (r *run) decideFastChain(best *candidate, p50 map[string]float64) *candidate {
	knobs := map[kind]fastKnob{
		kindFP32Fast: {r.cfg.Optimize.FastLinear, "optimize.fast_linear"},
		kindFP32Conv: {r.cfg.Optimize.FastConv, "optimize.fast_conv"},
		kindFP32BF16: {r.cfg.Optimize.LinearBF16, "optimize.linear_bf16"},
	}
	isFast := func(c *candidate) bool { _, ok := knobs[c.kind]; return ok }
	// links lists c and the fast variants under it, c first, and the stage they all build on.
	links := func(c *candidate) ([]*candidate, *candidate) {
		var l []*candidate
		for ; c != nil && isFast(c); c = c.base {
			l = append(l, c)
		}
		return l, c
	}
	var options []*candidate
	for _, c := range r.cands {
		if !isFast(c) || c.status != stCandidate {
			continue
		}
		l, root := links(c)
		switch {
		case root != best:
			// Its own p50 may beat the kept stage: say that it was never in the running.
			name := "nothing"
			if root != nil {
				name = root.name
			}
			c.status, c.reason = stRejected, fmt.Sprintf("built on %s, which was not kept, so it was not a choice whatever its p50; %s", name, c.reason)
		case slices.ContainsFunc(l[1:], func(b *candidate) bool { return b.status != stCandidate }):
			c.status, c.reason = stRejected, fmt.Sprintf("built on %s, which was not a choice; %s", c.base.name, c.reason)
		default:
			options = append(options, c)
		}
	}
	// A pass set on must be in the chain kept, where some chain has it.
	required := false
	onKinds := map[kind]string{} // the passes set on that some chain has
	for k, kn := range knobs {
		if kn.toggle != config.On {
			continue
		}
		has := func(c *candidate) bool {
			l, _ := links(c)
			return slices.ContainsFunc(l, func(b *candidate) bool { return b.kind == k })
		}
		if slices.ContainsFunc(options, has) {
			options = slices.DeleteFunc(slices.Clone(options), func(c *candidate) bool { return !has(c) })
			required = true
			onKinds[k] = kn.name
		}
	}
	bp := p50[best.name]
	winner, wp := best, bp
	if required { // best itself lacks the pass set on: the fastest chain with it, or the first built
		winner, wp = options[0], p50[options[0].name]
	}
	for _, c := range options {
		if fp := p50[c.name]; fp > 0 && (wp <= 0 || fp < wp) {
			winner, wp = c, fp
		}
	}
	kept, _ := links(winner)
	for _, c := range r.cands {
		if !isFast(c) || c.status != stCandidate {
			continue
		}
		fp := p50[c.name]
		switch {
		case c == winner:
			c.status = stKept
			if required {
				c.reason = fmt.Sprintf("%s is on in the config (%.2fx vs %s, p50 %.3f vs %.3f ms); %s", onKnob(c, kept, knobs), bp/fp, best.name, fp, bp, c.reason)
			} else {
				c.reason = fmt.Sprintf("%.2fx faster than %s (p50 %.3f vs %.3f ms); %s", bp/fp, best.name, fp, bp, c.reason)
			}
		case slices.Contains(kept, c):
			c.status, c.reason = stKept, fmt.Sprintf("kept under %s (p50 %.3f ms; its own %.3f vs %s's %.3f); %s", winner.name, wp, fp, best.name, bp, c.reason)
		case required && !slices.Contains(options, c):
			l, _ := links(c)
			var lacks []string
			for k, name := range onKinds {
				if !slices.ContainsFunc(l, func(b *candidate) bool { return b.kind == k }) {
					lacks = append(lacks, name)
				}
			}
			slices.Sort(lacks)
			c.status, c.reason = stRejected, fmt.Sprintf("the config sets %s on, which this variant lacks (p50 %.3f ms; %s kept, %.3f)", strings.Join(lacks, " and "), fp, winner.name, wp)
		case winner == best:
			c.status, c.reason = stRejected, fmt.Sprintf("not faster than %s (p50 %.3f vs %.3f ms)", best.name, fp, bp)
		default:
			c.status, c.reason = stRejected, fmt.Sprintf("not faster than %s, kept instead (p50 %.3f vs %.3f ms)", winner.name, fp, wp)
		}
		r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("%s: %s", c.name, c.reason))
	}
	return winner
}

// fastKnob is a fast variant's optimize.* toggle and its name.
type fastKnob struct {
	toggle config.Toggle
	name   string
}

// onKnob names the optimize.* toggle set on that keeps c: c's own, else the first one on in
// chain.
func onKnob(c *candidate, chain []*candidate, knobs map[kind]fastKnob) string {
	if kn := knobs[c.kind]; kn.toggle == config.On {
		return kn.name
	}
	for _, b := range chain {
		if kn := knobs[b.kind]; kn.toggle == config.On {
			return kn.name
		}
	}
	return "a pass set on"
}
