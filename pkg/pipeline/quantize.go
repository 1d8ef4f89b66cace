package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/calib"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/tserr"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// quantize is the INT8 stage: static (calibrated) or dynamic quantization of the folded,
// unfrozen model, validated against the original with per-layer FP32 fallback, then measured
// against the best FP32 candidate; INT8 is kept only when it quantized something, passed, and
// is faster (or forced).
func (r *run) quantize() error {
	mode, instead := r.quantizeMode()
	if instead != nil {
		return instead()
	}
	in, err := r.quantInputs(mode)
	if err != nil {
		return err
	}
	th := r.thresholds()
	name := "INT8 " + mode
	c, qrep, qerr := r.buildINT8(mode, in, th)
	if c != nil && total(quant.AddedOps(r.orig.quantizedOps, c.quantizedOps)) == 0 {
		return r.quantizedNoLayer(c, name)
	}
	if c == nil || c.status != stCandidate {
		return r.int8Failed(c, qerr, mode, in)
	}
	return r.measureINT8(c, qrep, in.val, th)
}

// quantizeMode resolves quantize.mode for this model (auto: static for convolutions with
// calibration data, dynamic otherwise). Where nothing is to be quantized, it returns the step
// that takes quantization's place instead.
func (r *run) quantizeMode() (mode string, instead func() error) {
	mode = r.cfg.Quantize.Mode
	if r.orig.precision != "fp32" && mode != quant.ModeStatic && mode != quant.ModeDynamic {
		// Quantizing a quantized model again adds nothing (its layers are quantized:: ops the
		// passes do not see as layers); what it can still gain are the INT8 passes.
		if mode == "auto" {
			r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("quantize.mode auto: not quantized again, the input model is %s already", r.orig.precision))
		}
		return "", r.int8Input
	}
	if mode == "none" {
		return "", r.validateFP32
	}
	if r.call.method != "forward" {
		// The graph-mode passes insert observers into, and rewrite, forward alone.
		why := fmt.Sprintf("INT8 skipped: quantization rewrites forward only, and model.method is %s", r.call.method)
		r.skip("INT8 "+mode, kindINT8, nil, why)
		r.warn(why)
		return "", r.validateFP32
	}
	if mode == "auto" {
		mode = quant.ModeDynamic
		convs := r.orig.nodes["aten::_convolution"] + r.orig.nodes["aten::conv2d"] + r.orig.nodes["aten::conv1d"]
		if convs > 0 && (r.cfg.Calibration.Path != "" || r.cfg.Calibration.Kind != "") {
			mode = quant.ModeStatic
		}
		r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("quantize.mode auto: %s (%d convolutions, calibration data %s)", mode, convs, orNone(r.cfg.Calibration.Path)))
	}
	return mode, nil
}

// quantInputs is the data INT8 is calibrated and validated on.
type quantInputs struct {
	calib, val validate.Batches
	// valDesc says where the validation data came from; synthetic is set when calibration or
	// validation used generated data.
	valDesc   string
	synthetic bool
}

// quantInputs opens the calibration data (static mode) and the validation data, warning when
// either is random.
func (r *run) quantInputs(mode string) (*quantInputs, error) {
	in := &quantInputs{}
	if mode == quant.ModeStatic {
		specs, err := r.inputSpecs(r.cfg.Calibration)
		if err != nil {
			return nil, err
		}
		ds, err := calib.Open(r.cfg.Calibration, specs)
		if err != nil {
			return nil, tserr.BadInput(fmt.Errorf("calibration data: %w", err))
		}
		if err := r.checkCalibration(ds, specs); err != nil {
			return nil, err
		}
		in.calib = r.batches(ds, r.cfg.Calibration.Sequence)
		in.synthetic = ds.Synthetic()
		if in.synthetic {
			r.warn("calibration used random data: the INT8 result is unverified on real inputs")
		}
	}
	val, desc, synth, random, err := r.validationBatches()
	if err != nil {
		return nil, err
	}
	in.val, in.valDesc, in.synthetic = val, desc, in.synthetic || synth
	if random {
		r.warn("no validation data: INT8 was checked on random inputs only; set validation.data for a real check")
	}
	return in, nil
}

// buildINT8 quantizes the unfrozen model as the INT8 candidate (validated, with per-layer FP32
// fallback) and records what quantization did in the report. The candidate is nil, or not
// stCandidate, when it failed; qerr is the quantizer's error.
func (r *run) buildINT8(mode string, in *quantInputs, th validate.Thresholds) (c *candidate, qrep *quant.Outcome, qerr error) {
	q := r.cfg.Quantize
	opts := quant.Options{
		Mode: mode, Engine: q.Engine, Observer: q.Observer, Percentile: q.Percentile,
		PerChannel: q.PerChannel, ReduceRange: string(q.ReduceRange), Skip: q.Skip, Preserve: r.call.preserve,
		// Calibrate at every CPU whatever runtime.threads is, so the INT8 model (and the
		// decisions taken on it) does not change with the thread count the run measures at.
		CalibrationThreads: torch.AvailableCPUs(),
	}
	if n := r.stageThreads(); n > 0 {
		// The quick search calibrates at its stage count (one thread), a fixed count too: on the
		// loaded 2-vCPU VM resnet50's 16 calibration passes took 8 s each at 2 threads. The
		// full search's INT8 model can then differ from this one by a rounding step of a range
		// (quant.Options.CalibrationThreads); both are validated the same way.
		opts.CalibrationThreads = n
	}
	if r.opts.Progress != nil {
		opts.Progress = func(done, total int) { r.opts.Progress("calibration", done, total) }
	}
	fb := quant.FallbackOptions{
		Thresholds: th, MaxFP32Layers: q.MaxFallbackLayers, SensitivityBatches: 4,
		Latency: r.latency(2, max(5, r.cfg.Bench.StageRuns)),
	}
	if !q.Fallback {
		fb.MaxFP32Layers = -1
	}
	r.logf("quantizing (%s, engine %s, observer %s)", mode, q.Engine, q.Observer)
	name := "INT8 " + mode
	c = r.addCandidate(name, kindINT8, append(append([]string{}, r.unfrozenSteps...), "quantize_"+mode), func() (*candidate, error) {
		m, rep, err := quant.QuantizeChecked(r.ctx, r.unfrozen, in.calib, in.val, opts, fb)
		qrep, qerr = rep, err
		if err != nil {
			return nil, err
		}
		return &candidate{mod: m, precision: "int8-" + mode, engine: rep.Engine, fp32Layers: rep.FP32Layers}, nil
	})
	if qrep != nil {
		if len(qrep.Unchanged) > 0 {
			r.warn(qrep.Warnings[len(qrep.Warnings)-1])
		}
		r.rep.Quantize = quantizeInfo(qrep)
		v := validationOf(qrep, in.valDesc, in.synthetic, cosineMeaningful(r.ref))
		v.Checked, v.CheckedPrecision = name, "int8-"+mode
		r.rep.Validation = v
	}
	return c, qrep, qerr
}

// quantizedNoLayer rejects an INT8 candidate that added no quantized operator (a model that was
// INT8 already keeps its own, which are not this step's work): what it built is not
// torchspeed's INT8, whatever it passed.
func (r *run) quantizedNoLayer(c *candidate, name string) error {
	c.status, c.precision, c.engine = stRejected, r.orig.precision, r.orig.engine
	c.reason = "no layer quantized: the graph holds no quantized operator (every layer stayed FP32)"
	if r.orig.precision != "fp32" {
		c.reason = fmt.Sprintf("no layer quantized: quantization added no quantized operator to the %s the input model holds already (%s)",
			report.Plural(total(r.orig.quantizedOps), "quantized operator"), r.orig.precision)
	}
	r.warn(fmt.Sprintf("%s quantized no layer: %s; the result is not used. %s", name, strings.TrimPrefix(c.reason, "no layer quantized: "), r.noLayerAdvice()))
	if r.orig.precision != "fp32" {
		return r.int8Input()
	}
	return r.validateFP32()
}

// int8Failed handles an INT8 candidate that failed to build or to validate: the FP32 result
// stands with a warning, unless quantize.force requires INT8.
func (r *run) int8Failed(c *candidate, qerr error, mode string, in *quantInputs) error {
	q := r.cfg.Quantize
	name := "INT8 " + mode
	valDesc, synthetic := in.valDesc, in.synthetic
	var te *quant.ThresholdError
	last := r.cands[len(r.cands)-1]
	if (errors.As(qerr, &te) || (c != nil && c.status == stRejected)) && !q.Force {
		// Validation failed even with fallback, but the FP32 chain passed its own checks:
		// the FP32 result stands (exit 0), as when INT8 is not faster, and the warning says
		// what INT8 missed. The attempts stay in the report's quantize section.
		why := last.reason
		if r.rep.Validation != nil && len(r.rep.Validation.Failures) > 0 {
			why = strings.Join(r.rep.Validation.Failures, "; ")
		}
		if c != nil {
			c.status = stRejected
		}
		r.warn(fmt.Sprintf("%s failed validation on %s (%s): the artifact stays floating point (the best FP32 result, with BF16 linears where optimize.linear_bf16 won). Set quantize.force to require INT8 (the run then fails with exit 3), or raise quantize.max_fallback_layers, or try another quantize.observer", name, valDesc, why))
		return r.validateFP32()
	}
	if errors.As(qerr, &te) || (c != nil && c.status == stRejected) {
		// INT8 is required (quantize.force) and failed validation even with fallback: the
		// run fails (tserr.ErrAccuracy), reports written.
		if r.rep.Validation == nil {
			r.rep.Validation = &report.Validation{Data: valDesc, Synthetic: synthetic, Checked: name, CheckedPrecision: "int8-" + mode}
		}
		r.rep.Validation.Passed = false
		if len(r.rep.Validation.Failures) == 0 {
			r.rep.Validation.Failures = []string{last.reason}
		}
		return nil
	}
	// A quantizer failure (libtorch's passes or engines reject some graphs) comes after the
	// FP32 candidates are built and measured: unless INT8 is required (quantize.force), the
	// FP32 result stands, with the reason in words a user can act on.
	why := quantizeFailure(name, r.quantEngine(q.Engine), last.reason)
	if q.Force {
		return fmt.Errorf("quantize: %s; quantize.force requires INT8, so nothing is written: drop force (or use quantize.mode none) to keep the FP32 result", why)
	}
	r.warn(fmt.Sprintf("%s; the artifact stays floating point: FP32, with BF16 linears where optimize.linear_bf16 won (quantize.mode %s)", why, q.Mode))
	return r.validateFP32()
}

// measureINT8 measures the INT8 candidate, its optimize_for_inference, fast_qdq and
// fuse_conv_add variants and the best FP32 candidate in the same rounds, and decides whether
// INT8 stands: it must beat the best FP32 model on this machine.
func (r *run) measureINT8(c *candidate, qrep *quant.Outcome, valB validate.Batches, th validate.Thresholds) error {
	q := r.cfg.Quantize
	fp32 := r.best()
	ofi, match := r.int8OFI(c)
	if err := r.chooseINT8Threads(c, ofi); err != nil {
		return err
	}
	// fast_qdq and fuse_conv_add variants of both run in the same rounds: no extra measurement.
	fastQ, fastOFI := r.int8Fast(c), r.int8Fast(ofi)
	var int8Val *validate.Result
	if qrep != nil {
		int8Val = qrep.Validation
	}
	fuseQ := r.int8Fuse(firstOf(fastQ, c), valB, th, int8Val)
	var fuseOFI *candidate
	if ofi != nil {
		fuseOFI = r.int8Fuse(firstOf(fastOFI, ofi), valB, th, int8Val)
	}
	cands := uniq(fp32, c)
	for _, x := range []*candidate{ofi, fastQ, fastOFI, fuseQ, fuseOFI} {
		if x != nil {
			cands = append(cands, x)
		}
	}
	// Every pair of these decides, or might: the INT8 form against FP32, optimize_for_inference
	// and the fast variants against their bases; the original only where FP32 kept nothing.
	opts := r.untilSettled(r.stageOptions(r.cfg.Bench.StageRuns), cands, func(*candidate) bool { return true }, fp32 == r.orig)
	m, err := r.measure("INT8 vs FP32", cands, opts)
	if err != nil {
		return fmt.Errorf("measuring INT8: %w", err)
	}
	if shift := r.baselineShift(m); shift != "" {
		r.warn("the machine's load changed during the run: " + shift + "; rows from different measurements are not comparable")
	}
	var fp32P50 = m.baselineP50()
	if res := m.result(fp32.name); fp32 != r.orig && res != nil {
		fp32P50 = res.Stats.P50
	}
	picked := r.pickINT8(m, c, ofi, match)
	best8 := picked
	for _, p := range []struct{ base, fast, fuse *candidate }{{c, fastQ, fuseQ}, {ofi, fastOFI, fuseOFI}} {
		if p.base == picked {
			best8 = r.pickFuse(m, r.pickFast(m, picked, p.fast), p.fuse)
			continue
		}
		for _, x := range []*candidate{p.fast, p.fuse} {
			if x != nil {
				x.status, x.reason = stRejected, fmt.Sprintf("built on %s, which %s stands for", p.base.name, picked.name)
			}
		}
	}
	d := quant.DecideINT8(m.result(best8.name).Stats.P50, fp32P50, r.cfg.Optimize.MinSpeedup, q.Force)
	if d.UseINT8 && !q.Force {
		d2, settled, err := r.fp32CountsSettled(d, m, best8, fp32)
		if err != nil {
			return err
		}
		if d = d2; !settled {
			d = r.checkAgainstFP32Threads(d, m.result(best8.name).Stats.P50)
		}
	}
	dec := &int8Decision{c: c, picked: picked, best8: best8, fp32: fp32, ofi: ofi, match: match, meas: m,
		int8Threads: r.threads, int8Val: r.rep.Validation, forced: q.Force}
	dec.reject = func() string {
		return quant.DecideINT8(m.result(c.name).Stats.P50, fp32P50, r.cfg.Optimize.MinSpeedup, false).Reason
	}
	dec.snapshot(r)
	r.int8 = dec
	return r.applyINT8(dec, d)
}

// uniqCands is cs without repeats, in order.
func uniqCands(cs ...*candidate) []*candidate {
	var out []*candidate
	for _, c := range cs {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// uniq is the INT8 measurement's candidates: the best FP32 one (unless it is the original,
// which every measurement runs first) and the INT8 one.
func uniq(fp32, int8 *candidate) []*candidate {
	if fp32.kind == kindOriginal {
		return []*candidate{int8}
	}
	return []*candidate{fp32, int8}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// quantizeInfo is the report's record of the INT8 step.
func quantizeInfo(q *quant.Outcome) *report.Quantize {
	n := 0
	for _, v := range q.QuantizedOps {
		n += v
	}
	out := &report.Quantize{Mode: q.Mode, Engine: q.Engine, ReduceRange: q.ReduceRange, Activation: q.Activation, Weight: q.Weight,
		FP32Layers: q.FP32Layers, QuantizedOps: q.QuantizedOps, QuantizedOpCount: n, DurationMs: msOf(q.Duration), Warnings: q.Warnings}
	if q.CalibrationSamples > 0 {
		out.CalibrationSamples = intp(q.CalibrationSamples)
	}
	for _, a := range q.Attempts {
		fa := report.FallbackAttempt{FP32Layers: a.FP32Layers, Cosine: f64(a.Cosine), Passed: a.Passed}
		for _, f := range a.Failures {
			fa.Failures = append(fa.Failures, f.String())
		}
		if a.Latency > 0 {
			fa.P50Ms = f64(msOf(a.Latency))
		}
		out.Attempts = append(out.Attempts, fa)
	}
	return out
}

// validationOf turns a comparison with the original into the report's validation section.
// On random data a threshold that could not be measured fails: random inputs cannot vouch for
// it, and a figure that was never measured must not read as a pass.
func validationOf(q *quant.Outcome, data string, synthetic, cosOK bool) *report.Validation {
	v := &report.Validation{Data: data, Synthetic: synthetic, Passed: len(q.Failures) == 0}
	for _, l := range q.Sensitivity {
		v.Layers = append(v.Layers, report.Layer{Layer: l.Layer, Type: l.Type, Cosine: f64(l.Cosine), MeanAbsError: f64(l.MeanAbsError), Top1Agreement: f64(l.Top1Agreement)})
	}
	if res := q.Validation; res != nil {
		v.Samples = res.Samples
		v.Metrics = metricsOf(res)
		if res.Top1Tied > 0 {
			v.Notes = append(v.Notes, fmt.Sprintf("%s of the validation data have an FP32 top-1 that is a tie at float precision (top two scores within %g of the largest |score|): top-1 agreement counts neither way on them, and is over the other %d",
				report.Plural(res.Top1Tied, "sample"), validate.TieTolerance, res.Top1Counted))
		}
		if !cosOK {
			v.Metrics.Cosine, v.Metrics.MinSampleCosine = nil, nil
			v.Notes = append(v.Notes, "the output has 1 element per sample: a cosine over it is only the sign's agreement, not meaningful; judged by max_abs_error")
		}
	}
	for _, f := range q.Failures {
		v.Failures = append(v.Failures, f.String())
	}
	for _, f := range q.Unchecked {
		if f.Reason != "" && !synthetic {
			v.Notes = append(v.Notes, f.String())
		}
	}
	if synthetic {
		for _, f := range q.Unchecked {
			v.Failures = append(v.Failures, f.String()+" (random data cannot check it: set validation.data to real samples)")
			v.Passed = false
		}
	}
	return v
}

func metricsOf(res *validate.Result) report.Metrics {
	m := report.Metrics{
		Cosine: f64(res.Cosine), MinSampleCosine: f64(res.MinSampleCosine),
		MaxAbsError: f64(res.MaxAbsError), MeanAbsError: f64(res.MeanAbsError),
	}
	if res.ClassOutput != "" {
		m.KLDivergence = f64(res.KLDivergence)
		m.Top1Counted, m.Top1Tied = intp(res.Top1Counted), intp(res.Top1Tied)
	}
	if res.Top1Agreement >= 0 {
		m.Top1Agreement = f64(res.Top1Agreement)
	}
	if res.AccuracyDrop >= 0 {
		m.Top1Original, m.Top1Checked = f64(res.RefTop1), f64(res.Top1)
		m.Top5Original, m.Top5Checked = f64(res.RefTop5), f64(res.Top5)
		m.AccuracyDropPoints = f64(res.AccuracyDrop * 100)
	}
	return m
}

// validateFP32 compares the chosen FP32 model with the original on the validation data.
func (r *run) validateFP32() error {
	best := r.best()
	if r.fp32Deferred {
		// INT8 was tried and the artifact stays FP32: its thread count is measured now.
		if err := r.chooseFP32Threads(best); err != nil {
			return err
		}
	}
	if best == r.orig {
		r.rep.Validation = &report.Validation{
			Checked: best.name, CheckedPrecision: best.precision, Data: "none needed", Passed: true,
			Notes: []string{"no step was kept: the artifact is the original model, so there is nothing to compare"},
		}
		return nil
	}
	src := r.validationSource()
	if src == nil && !r.stream {
		v := &report.Validation{
			Checked: best.name, CheckedPrecision: best.precision, Samples: len(r.checks), Data: "the random bench inputs", Synthetic: true,
			Metrics: report.Metrics{MaxAbsError: f64(best.maxAbs)},
		}
		if cosineMeaningful(r.ref) {
			v.Metrics.Cosine = f64(best.cosine)
		} else {
			v.Notes = append(v.Notes, "the output has 1 element: a cosine over it is not meaningful; judged by max_abs_error")
		}
		v.Passed = best.maxAbs <= r.cfg.Optimize.MaxAbsError && (!cosineMeaningful(r.ref) || best.cosine >= r.cfg.Optimize.MinCosine)
		if best.precision != "fp32" {
			// An INT8 input's passes (fuse_conv_add) round once where the original rounds twice:
			// held to the INT8 thresholds, as a quantized model is.
			v.Passed = !cosineMeaningful(r.ref) || best.cosine >= r.cfg.Validation.MinCosine
		}
		if !v.Passed {
			v.Failures = append(v.Failures, fmt.Sprintf("FP32 result moved on the bench inputs: max abs error %.3g (allowed %.3g), cosine %.6f (required %.6f)",
				best.maxAbs, r.cfg.Optimize.MaxAbsError, best.cosine, r.cfg.Optimize.MinCosine))
		}
		r.rep.Validation = v
		return nil
	}
	data, desc, synth := r.streamBatches(), r.streamDesc(), false
	if src != nil {
		var err error
		if data, desc, synth, err = r.openValidation(*src); err != nil {
			return err
		}
	}
	// validate runs plain forwards; channels-last weights accept contiguous inputs too.
	res, err := validate.Compare(r.ctx, r.orig.mod, best.mod, data)
	if err != nil {
		return fmt.Errorf("validating %s: %w", best.name, err)
	}
	cosOK := cosineMeaningful(r.ref)
	v := validationOf(&quant.Outcome{Validation: res}, desc, synth, cosOK)
	v.Checked, v.CheckedPrecision = best.name, best.precision
	v.Passed = finite(res.MaxAbsError) && res.MaxAbsError <= r.cfg.Optimize.MaxAbsError && (!cosOK || res.Cosine >= r.cfg.Optimize.MinCosine)
	switch {
	case best.precision != "fp32":
		// An INT8 input's passes (fuse_conv_add) round once where the original rounds twice:
		// held to the INT8 thresholds, as a quantized model is.
		failed, _ := r.thresholds().Check(res)
		v.Passed = len(failed) == 0
		for _, f := range failed {
			v.Failures = append(v.Failures, fmt.Sprintf("%s result moved from the original: %s", best.precision, f.String()))
		}
	case !v.Passed:
		v.Failures = append(v.Failures, fmt.Sprintf("FP32 result moved: max abs error %.3g (allowed %.3g), cosine %.6f (required %.6f)", res.MaxAbsError, r.cfg.Optimize.MaxAbsError, res.Cosine, r.cfg.Optimize.MinCosine))
	}
	r.rep.Validation = v
	return nil
}

// openValidation opens the validation data src names, checked against the model's inputs and
// its labels against the output size: the batches, their description and whether they are
// random.
func (r *run) openValidation(src calib.Source) (validate.Batches, string, bool, error) {
	specs, err := r.inputSpecs(src)
	if err != nil {
		return nil, "", false, err
	}
	ds, err := calib.Open(src, specs)
	if err != nil {
		return nil, "", false, tserr.BadInput(fmt.Errorf("validation data: %w", err))
	}
	if err := r.checkLabels(ds, "validation data"); err != nil {
		return nil, "", false, err
	}
	return r.batches(ds, src.Sequence), ds.Describe(), ds.Synthetic(), nil
}

// chooseINT8Threads chooses the thread count for the INT8 model as chooseThreads did for the
// best FP32 one, and leaves it set: INT8 is compared with FP32 at that count, and ships with
// it. FP32's best count can differ (mobilenet_v2 on 2 CPUs: FP32 fastest at 1 thread, INT8 at
// 2), and judging INT8 at FP32's count rejected it there.
//
// libtorch 1.13's oneDNN INT8 kernels keep the thread count of their module's first forward:
// at another count the forward fails ("could not create a primitive descriptor for a reorder
// primitive", mobilenet_v2 onednn). So each count is measured on a fresh clone of q that runs
// at that count only, and when the choice is not the count q has run at, q (and ofi, rebuilt
// from it) become the chosen count's fresh modules.
func (r *run) chooseINT8Threads(q, ofi *candidate) error {
	if !r.autoThreads() {
		return nil
	}
	ran := r.threads // q was validated at this count
	fresh := map[int]*candidate{}
	defer func() {
		for _, f := range fresh {
			f.mod.Close()
		}
	}()
	for _, n := range r.opts.AutoThreads {
		m, err := q.mod.Clone()
		if err != nil {
			return fmt.Errorf("choosing threads for %s: %w", q.name, err)
		}
		f := *q
		f.mod, f.save = m, nil
		fresh[n] = &f
	}
	ch, err := r.pickThreads(func(n int) *candidate { return fresh[n] })
	if err != nil {
		return fmt.Errorf("choosing threads for %s: %w", q.name, err)
	}
	r.threads = ch.Threads
	r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("threads for %s: %d (measured on it: %s); it is compared with FP32 at %s", q.name, ch.Threads, ch.Why, report.Plural(ch.Threads, "thread")))
	r.logf("threads for %s: %d (%s)", q.name, ch.Threads, ch.Why)
	if ch.Threads == ran {
		return nil
	}
	// The modules that ran at the other count stay open until the run ends (the report's
	// quantizer outcome may still refer to them).
	old := q.mod
	r.closes = append(r.closes, func() { old.Close() })
	q.mod = fresh[ch.Threads].mod
	delete(fresh, ch.Threads)
	if ofi != nil {
		m, err := q.mod.OptimizeForInference()
		if err != nil {
			return fmt.Errorf("%s at %d thread(s): %w", ofi.name, ch.Threads, err)
		}
		oldOFI := ofi.mod
		r.closes = append(r.closes, func() { oldOFI.Close() })
		ofi.mod, ofi.save = m, q.mod
	}
	return nil
}

// checkAgainstFP32Threads holds INT8, kept at its own thread count, to FP32 at FP32's own
// count too: the thread choice measured FP32 there (p50 from that measurement, taken
// earlier in the run), and INT8 must beat that as well.
func (r *run) checkAgainstFP32Threads(d quant.Decision, int8P50 time.Duration) quant.Decision {
	fp := r.fp32Threads
	if !r.autoThreads() || fp.Threads == 0 || fp.Threads == r.threads {
		return d
	}
	own := quant.DecideINT8(int8P50, fp.Stats[fp.Threads].P50, r.cfg.Optimize.MinSpeedup, false)
	if own.UseINT8 {
		d.Reason += fmt.Sprintf(" at %s; against FP32 at its own %s (thread choice): %s", report.Plural(r.threads, "thread"), report.Plural(fp.Threads, "thread"), own.Reason)
		return d
	}
	own.Reason = fmt.Sprintf("against FP32 at its own %s (thread choice), INT8 at %d: %s", report.Plural(fp.Threads, "thread"), r.threads, own.Reason)
	return own
}

// fp32ThreadsBack sets FP32's thread choice again when INT8, measured at another count, is
// not kept (taking the choice on fp32 first where the quick search left it).
func (r *run) fp32ThreadsBack(fp32 *candidate) error {
	if err := r.fp32ThreadsNow(fp32); err != nil {
		return err
	}
	fp := r.fp32Threads.Threads
	if !r.autoThreads() || fp == 0 || fp == r.threads {
		return nil
	}
	if err := torch.SetNumThreads(fp); err != nil {
		return err
	}
	r.threads = fp
	r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("threads: %d again, FP32's choice (the artifact stays FP32)", fp))
	return nil
}

// firstOf is the first of cs that is not nil (nil if all are).
func firstOf(cs ...*candidate) *candidate {
	for _, c := range cs {
		if c != nil {
			return c
		}
	}
	return nil
}

// quantEngine is the quantized engine a run used: the configured one, or libtorch's current
// one for auto.
func (r *run) quantEngine(configured string) string {
	if configured != "" && configured != "auto" {
		return configured
	}
	if e, err := torch.QEngine(); err == nil {
		return e
	}
	return configured
}

// quantizeFailure says in plain words what could not be quantized and why, keeping the end of
// libtorch's message for a bug report.
func quantizeFailure(name, engine, reason string) string {
	raw := reason
	if i := strings.LastIndex(raw, "Error: "); i >= 0 {
		raw = raw[i+len("Error: "):]
	}
	raw = torch.Clip(strings.TrimSpace(raw))
	var what string
	switch {
	case strings.Contains(reason, "descriptor for a matmul primitive") || strings.Contains(reason, "descriptor for a inner product primitive"):
		what = fmt.Sprintf("the quantized engine %s cannot run the INT8 matrix multiply of a quantized Linear or LSTM/GRU layer of this model on this CPU (its first call failed)", engine)
	case strings.Contains(reason, "validate: candidate model"):
		what = fmt.Sprintf("the quantized model (engine %s) fails when called on the validation inputs", engine)
	case strings.Contains(reason, "Could not run 'quantized::") || strings.Contains(reason, "Could not run 'aten::"):
		what = fmt.Sprintf("an operator of the quantized model has no kernel for the tensors it gets (engine %s)", engine)
	default:
		what = "libtorch's quantization passes could not convert this model"
	}
	return fmt.Sprintf("%s could not be used: %s (libtorch says: %s)", name, what, raw)
}

// thresholds are the configured validation thresholds.
func (r *run) thresholds() validate.Thresholds {
	return validate.Thresholds{
		MinCosine: r.cfg.Validation.MinCosine, MaxAbsError: r.cfg.Validation.MaxAbsError,
		MinTop1Agreement: r.cfg.Validation.MinTop1Agreement, MaxAccuracyDrop: r.cfg.Validation.MaxAccuracyDrop / 100,
	}
}

// validationBatches is the data INT8 is validated on: validation.data (or the calibration
// data), else a stream's calls, else the random bench inputs (random true).
func (r *run) validationBatches() (b validate.Batches, desc string, synthetic, random bool, err error) {
	if src := r.validationSource(); src != nil {
		b, desc, synthetic, err = r.openValidation(*src)
		return b, desc, synthetic, false, err
	}
	if r.stream {
		return r.streamBatches(), r.streamDesc(), false, false, nil
	}
	arr, err := r.inputArrays()
	if err != nil {
		return nil, "", false, false, err
	}
	if b, err = validate.FromArrays(arr, nil, nil, 1); err != nil {
		return nil, "", false, false, err
	}
	if r.call.typed || r.call.stateful() {
		b = callBatches{Batches: b, k: r.call}
	}
	return b, "the random bench inputs", true, true, nil
}

// noLayerAdvice is what to do when quantization quantized no layer, by what the input holds.
func (r *run) noLayerAdvice() string {
	switch {
	case r.orig.precision != "fp32":
		return "The input model was quantized before torchspeed saw it: drop quantize.mode static/dynamic (auto keeps its INT8 and offers torchspeed's INT8 passes), or give torchspeed the FP32 model to quantize"
	case r.orig.nodes["prepacked::conv2d_clamp_run"]+r.orig.nodes["prepacked::linear_clamp_run"] > 0:
		return fmt.Sprintf("The model's convolutions and linears are XNNPACK prepacked ops (prepacked::conv2d_clamp_run: %d, prepacked::linear_clamp_run: %d; torch.utils.mobile_optimizer.optimize_for_mobile made them), which graph-mode quantization cannot see: re-export the model without optimize_for_mobile (torch.jit.script or torch.jit.trace of the nn.Module, then torch.jit.save)",
			r.orig.nodes["prepacked::conv2d_clamp_run"], r.orig.nodes["prepacked::linear_clamp_run"])
	}
	return fmt.Sprintf("Check the calibration data (%s)", orNone(r.cfg.Calibration.Path))
}
