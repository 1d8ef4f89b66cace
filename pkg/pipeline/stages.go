package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// addCandidate builds a candidate, times the build, counts its nodes and checks its outputs
// against the original's. A candidate whose outputs moved beyond tolerance is rejected here.
func (r *run) addCandidate(name string, k kind, steps []string, build func() (*candidate, error)) *candidate {
	t0 := time.Now()
	c, err := build()
	var skip skipError
	if errors.As(err, &skip) {
		r.logf("  %-34s skipped: %v", name, err)
		r.skip(name, k, steps, err.Error())
		return nil
	}
	if err != nil {
		r.logf("  %-34s failed: %v", name, err)
		r.cands = append(r.cands, &candidate{name: name, kind: k, status: stFailed, reason: err.Error(), steps: steps})
		return nil
	}
	c.name, c.kind, c.steps, c.wall, c.call = name, k, steps, time.Since(t0), r.call
	if c.precision == "" {
		// Steps that do not quantize keep the input's precision: FP32, or the INT8 of a model
		// PyTorch had quantized already.
		c.precision, c.engine = r.orig.precision, r.orig.engine
	}
	c.nodes, _ = c.mod.NodeCounts()
	c.quantizedOps = quant.QuantizedOps(c.nodes)
	r.closes = append(r.closes, c.close)
	// Held to the original's outputs on every check input unless this step quantized or
	// rounds differently (fuse_conv_add, optimize_for_inference on INT8: validated on their
	// own).
	asInput := c.precision == r.orig.precision && c.kind != kindINT8 && c.kind != kindINT8OFI && c.kind != kindINT8Fuse
	checks, ref := r.checkSet(!asInput)
	got, err := outputsOf(c, checks)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("running it failed: %v", err)
		r.cands = append(r.cands, c)
		return nil
	}
	if len(checks) == len(r.checks) {
		c.checkOuts = got
	}
	c.maxAbs, c.cosine, err = validate.CompareOutputs(ref, got)
	switch {
	case err != nil:
		c.status, c.reason = stRejected, err.Error()
	case asInput && (c.maxAbs > r.cfg.Optimize.MaxAbsError || c.cosine < r.cfg.Optimize.MinCosine):
		c.status = stRejected
		c.reason = fmt.Sprintf("outputs moved beyond tolerance: max abs error %.3g (allowed %.3g), cosine %.6f (required %.6f)",
			c.maxAbs, r.cfg.Optimize.MaxAbsError, c.cosine, r.cfg.Optimize.MinCosine)
	default:
		c.status = stCandidate
	}
	r.logf("  %-34s built in %6.0f ms, max abs err %.2g, cosine %.6f", name, float64(c.wall.Microseconds())/1000, c.maxAbs, c.cosine)
	r.cands = append(r.cands, c)
	return c
}

// checkSet is the check inputs a candidate is compared on (quantized: this run quantized
// it), and the original's outputs on them. INT8 is judged on real data by the quantizer's
// validation; random bench inputs lie outside the calibrated ranges, so they are left out of
// its agreement figures.
func (r *run) checkSet(quantized bool) ([][]*torch.Tensor, [][]float64) {
	if quantized && len(r.checks) > 1 && !r.stream && !r.call.stateful() {
		per := len(r.ref) / len(r.checks)
		return r.checks[1:], r.ref[per:]
	}
	return r.checks, r.ref
}

// fp32Stages builds the FP32 candidates in pipeline order: fold, freeze, freeze +
// optimize_for_inference, channels-last (+ optimize_for_inference).
func (r *run) fp32Stages() error {
	o := r.cfg.Optimize
	r.logf("building FP32 candidates")
	base := r.orig.mod
	var steps []string
	if o.FoldBN {
		c := r.addCandidate("fold conv+bn", kindFold, []string{"fold_bn"}, func() (*candidate, error) {
			m, err := base.FoldConvBN()
			if err != nil {
				return nil, err
			}
			return &candidate{mod: m}, nil
		})
		if c != nil && c.status == stCandidate {
			base, steps = c.mod, []string{"fold_bn"}
		}
	}
	r.unfrozen = base
	r.unfrozenSteps = steps
	if !o.Freeze {
		return nil
	}
	frozenSteps := append(slices.Clone(steps), "freeze")
	frozen := r.addCandidate("freeze", kindFreeze, frozenSteps, func() (*candidate, error) {
		m, err := base.Freeze(r.call.preserve...)
		if err != nil {
			return nil, err
		}
		return &candidate{mod: m}, nil
	})
	if frozen == nil {
		return nil
	}
	broken := r.opts.MKLDNNBroken
	if broken != "" && o.OptimizeForInference != config.Off {
		r.rep.Warnings = append(r.rep.Warnings, "optimize_for_inference skipped: "+broken)
		r.logf("  %-34s skipped: %s", "optimize_for_inference", broken)
	}
	if o.OptimizeForInference != config.Off && broken != "" {
		r.skip("freeze + optimize_for_inference", kindOFI, append(slices.Clone(frozenSteps), "optimize_for_inference"), broken)
	} else if o.OptimizeForInference != config.Off {
		r.addCandidate("freeze + optimize_for_inference", kindOFI, append(slices.Clone(frozenSteps), "optimize_for_inference"), func() (*candidate, error) {
			m, err := frozen.mod.OptimizeForInference()
			if err != nil {
				return nil, err
			}
			return &candidate{mod: m, save: frozen.mod, passes: []string{torchspeed.PassOptimizeForInference}}, nil
		})
	}
	if o.ChannelsLast != config.Off && has4DFloatInput(r.cfg) {
		clSteps := append(slices.Clone(steps), "channels_last", "freeze")
		withOFI := o.OptimizeForInference != config.Off
		if withOFI {
			clSteps = append(clSteps, "optimize_for_inference")
		}
		name := "channels-last + freeze"
		if withOFI {
			name += " + ofi"
		}
		if withOFI && broken != "" {
			r.skip(name, kindChannelsLast, clSteps, broken)
			return nil
		}
		r.addCandidate(name, kindChannelsLast, clSteps, func() (*candidate, error) {
			cl, err := base.Clone()
			if err != nil {
				return nil, err
			}
			n, err := cl.ChannelsLast()
			if err != nil {
				cl.Close()
				return nil, err
			}
			if n == 0 {
				cl.Close()
				return nil, skipError("the model has no 4-D float weights (convolution weights) to convert to channels-last")
			}
			fr, err := cl.Freeze(r.call.preserve...)
			cl.Close()
			if err != nil {
				return nil, err
			}
			if !withOFI {
				return &candidate{mod: fr, channelsLast: true}, nil
			}
			opt, err := fr.OptimizeForInference()
			if err != nil {
				fr.Close()
				return nil, err
			}
			return &candidate{mod: opt, save: fr, passes: []string{torchspeed.PassOptimizeForInference}, channelsLast: true}, nil
		})
	}
	return nil
}

// skipError is a build's way to say its step does not apply to this model: the stage is
// skipped with this reason, not failed.
type skipError string

func (e skipError) Error() string { return string(e) }

// skip records a candidate that is not built, with the reason, as a "skipped" stage row.
func (r *run) skip(name string, k kind, steps []string, reason string) {
	r.cands = append(r.cands, &candidate{name: name, kind: k, status: stSkipped, reason: reason, steps: steps})
}

func has4DFloatInput(cfg *config.Config) bool {
	for _, in := range cfg.Model.Inputs {
		if len(in.Shape) == 4 && in.DType == "float32" {
			return true
		}
	}
	return false
}

func msOf(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// measureStages times every FP32 candidate interleaved with the original, then decides which
// steps to keep: a step is kept when it is on, or auto and at least min_speedup faster than
// the model without it, and its outputs match.
func (r *run) measureStages() error {
	live := r.stageTargets()
	if len(live) == 0 {
		return nil
	}
	r.logf("measuring %d candidates against the original, %d interleaved rounds at %s", len(live), r.cfg.Bench.StageRuns, report.Plural(torch.NumThreads(), "thread"))
	// Fold and freeze are kept on their outputs alone: their p50s are not decisions to wait for,
	// but freeze is the line optimize_for_inference is kept by (the original where not frozen).
	frozen := slices.ContainsFunc(live, func(c *candidate) bool { return c.kind == kindFreeze })
	opts := r.untilSettled(r.stageOptions(r.cfg.Bench.StageRuns), live, func(c *candidate) bool { return c.kind != kindFold }, !frozen)
	m, err := r.measure("stages", live, opts)
	if err != nil {
		return fmt.Errorf("measuring stages: %w", err)
	}
	r.stageMeas = m
	p50 := map[string]float64{}
	for _, res := range m.cmp.Results {
		p50[res.Name] = msOf(res.Stats.P50)
	}
	o := r.cfg.Optimize
	best := r.orig
	bestName := "original"
	decide := func(c *candidate, toggle config.Toggle, step string) {
		if c == nil || c.status != stCandidate {
			return
		}
		ratio := p50[c.name] / p50[bestName]
		at := report.Plural(m.threads, "thread")
		switch {
		case toggle == config.On:
			c.status, c.reason = stKept, fmt.Sprintf("%s is on in the config (%.2fx vs %s at %s)", step, 1/ratio, bestName, at)
		case ratio <= 1/o.MinSpeedup:
			c.status, c.reason = stKept, fmt.Sprintf("%.2fx faster than %s (p50 %.3f vs %.3f ms at %s)", 1/ratio, bestName, p50[c.name], p50[bestName], at)
		default:
			c.status, c.reason = stRejected, fmt.Sprintf("not faster than %s by %.0f%% (p50 %.3f vs %.3f ms at %s, %.2fx)", bestName, (o.MinSpeedup-1)*100, p50[c.name], p50[bestName], at, 1/ratio)
		}
		r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("%s: %s", c.name, c.reason))
		if c.status == stKept {
			best, bestName = c, c.name
		}
	}
	byKind := func(k kind) *candidate {
		for _, c := range r.cands {
			if c.kind == k {
				return c
			}
		}
		return nil
	}
	// Fold and freeze are kept whenever their outputs match: they only remove work, and the
	// later passes need a frozen graph.
	for _, k := range []kind{kindFold, kindFreeze} {
		if c := byKind(k); c != nil && c.status == stCandidate {
			c.status = stKept
			if _, timed := p50[c.name]; !timed {
				c.reason = fmt.Sprintf("outputs match (max abs err %.2g); not timed (quick search: kept on its outputs, and the later steps build on it; %s)", c.maxAbs, fullSearchHint)
				best, bestName = c, c.name
				continue
			}
			c.reason = fmt.Sprintf("outputs match (max abs err %.2g); p50 %.3f ms vs original %.3f ms at %s", c.maxAbs, p50[c.name], p50["original"], report.Plural(m.threads, "thread"))
			if sp := p50["original"] / p50[c.name]; sp < 1 {
				// Kept anyway, and the report says why: a user reading 0.81x next to "kept"
				// deserves the reason.
				key := map[kind]string{kindFold: "optimize.fold_bn", kindFreeze: "optimize.freeze"}[k]
				c.reason += fmt.Sprintf("; kept though %.2fx the original here: %s is on, and every later step (optimize_for_inference, fast_linear, fast_conv, the INT8 passes) builds on it; the final benchmark measures the result against the original, and %s: false leaves it out", sp, key, key)
				r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("%s: %s", c.name, c.reason))
			}
			best, bestName = c, c.name
		}
	}
	decide(byKind(kindOFI), o.OptimizeForInference, "optimize_for_inference")
	for _, c := range r.cands {
		if c.kind == kindChannelsLast {
			decide(c, o.ChannelsLast, "channels_last")
		}
	}
	if r.quick() {
		fast, err := r.fastOnKept(best)
		if err != nil {
			return err
		}
		if fast != nil {
			p50 = fast
		}
	}
	best = r.decideFastChain(best, p50)
	// Only the chain's last kept step stays "kept"; earlier ones are superseded.
	for _, c := range r.cands {
		if c.status == stKept && c != best {
			c.status = stSuperseded
		}
	}
	return nil
}

// stageTargets are the FP32 candidates the stage rounds time.
func (r *run) stageTargets() []*candidate {
	var live []*candidate
	for _, c := range r.cands {
		if c.status == stCandidate {
			live = append(live, c)
		}
	}
	if r.quick() && slices.ContainsFunc(live, func(c *candidate) bool { return c.kind == kindFreeze }) {
		// Fold is kept on its outputs alone and freeze, timed, builds on it: the quick search
		// leaves its p50, a figure no decision reads, out of the rounds (on a CNN it is one
		// of the two slowest models timed).
		live = slices.DeleteFunc(live, func(c *candidate) bool { return c.kind == kindFold })
	}
	return live
}

// stageThreads is the intra-op thread count at which the quick search, when the thread count
// is left to measurement, computes the original's reference outputs and builds, checks and
// times the FP32 stages and their fast variants: the fewest count it tries (0: the count set,
// as in the full search or with a configured count). Those rounds rank graph passes of one
// model against each other, and the thread choice that follows measures the kept one at every
// count; a run at all the CPUs of a loaded machine waits at every operator for an OpenMP
// worker the kernel preempted (docs/architecture.md: resnet50's FP32 forward 3.6 s at 2
// threads against 0.48 s at 1 on the 2-vCPU VM under load), and its spinning workers burn
// that wait as CPU time.
func (r *run) stageThreads() int {
	if !r.quick() || !r.autoThreads() {
		return 0
	}
	return slices.Min(r.opts.AutoThreads)
}

// atStageThreads runs f with the intra-op threads set to stageThreads, then sets the count
// back.
func (r *run) atStageThreads(f func() error) error {
	n, prev := r.stageThreads(), torch.NumThreads()
	if n <= 0 || n == prev {
		return f()
	}
	if err := torch.SetNumThreads(n); err != nil {
		return err
	}
	err := f()
	if serr := torch.SetNumThreads(prev); err == nil {
		err = serr
	}
	return err
}

// autoThreads says whether the thread count is chosen by measurement (runtime.threads: 0).
func (r *run) autoThreads() bool { return r.cfg.Runtime.Threads <= 0 && len(r.opts.AutoThreads) >= 2 }

// chooseThreads measures the best FP32 model at each candidate thread count, interleaved in
// blocks, and keeps the fastest (runtime.threads: 0). quantize chooses again for the INT8
// model (chooseINT8Threads): the two can differ (mobilenet_v2 on 2 CPUs: FP32 fastest at 1
// thread, INT8 at 2).
func (r *run) chooseThreads() error {
	if !r.autoThreads() {
		r.threads = max(r.opts.Threads, r.cfg.Runtime.Threads, torch.NumThreads())
		return nil
	}
	if r.deferFP32Threads() {
		return nil
	}
	return r.chooseFP32Threads(r.best())
}

// chooseFP32Threads measures best, the FP32 model, at each candidate thread count and sets
// the fastest.
func (r *run) chooseFP32Threads(best *candidate) error {
	ch, err := r.pickThreads(func(int) *candidate { return best })
	if err != nil {
		return err
	}
	r.threads, r.fp32Threads, r.fp32Deferred = ch.Threads, ch, false
	r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("threads: %d (measured on %s: %s)", ch.Threads, best.name, ch.Why))
	r.logf("threads: %d (%s)", ch.Threads, ch.Why)
	return nil
}

// pickThreads runs bench.ChooseThreads on the forward of at(n) at each count n; it leaves the
// chosen count set. Each count runs as Predict runs an artifact of that count: more than one on
// the shared inference thread, switched there alone for each block (torch.SetNumThreads per
// block restarted libtorch's pthreadpool each time, whose new threads spun beside the measured
// ones; see ts_set_num_threads), and one on the caller's thread with a one-thread team, with no
// hand-off. Timing 1 through the hand-off too chose 2 threads for the digits CNN by 5% where
// the Go API then ran 1.4x slower than it would have at 1 (the hand-off, ~5 us, outweighed
// the second thread; docs/architecture.md). The chosen count is then set for the process.
func (r *run) pickThreads(at func(n int) *candidate) (bench.ThreadChoice, error) {
	var tg *target
	set := func(n int) error {
		tg = &target{ctx: r.ctx, c: at(n), inputs: r.inputs, oneThread: n == 1}
		var err error
		torch.Do(func() { err = torch.SetNumThreadsOnThisThread(n) })
		return err
	}
	o := bench.ThreadOptions{MinRounds: max(4, r.cfg.Bench.StageRuns/5), Block: 5, MaxTime: fullThreadTime}
	if r.quick() {
		o.MaxTime, o.SeparatedRounds = quickThreadTime, 2
	}
	ch, err := bench.ChooseThreadsWith(r.opts.AutoThreads, set, func() error { return tg.Run() }, o, nil)
	if err != nil {
		return ch, err
	}
	if !ch.Decided && r.quick() {
		ch.Why += fmt.Sprintf(" (quick search: no rounds added after %s; %s adds them for up to %s)", quickThreadTime, fullSearchHint, fullThreadTime)
	}
	return ch, torch.SetNumThreads(ch.Threads)
}

// After its first rounds, a thread choice whose interval does not yet decide adds rounds for
// up to fullThreadTime (quickThreadTime in the quick search), then keeps the count faster in
// the median round. On the loaded 2-vCPU VM the choices that reached the limit were the ones
// the load decided, not the counts: resnet50's FP32 and INT8 choices each ran their 30 s
// there (docs/architecture.md).
const (
	fullThreadTime  = 30 * time.Second
	quickThreadTime = 10 * time.Second
)
