package pipeline

import (
	"errors"
	"fmt"

	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/calib"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// quantize is the INT8 stage: static (calibrated) or dynamic quantization of the folded,
// unfrozen model, validated against the original with per-layer FP32 fallback, then measured
// against the best FP32 candidate; INT8 is kept only when faster (or forced).
func (r *run) quantize() error {
	q := r.cfg.Quantize
	mode := q.Mode
	if mode == "none" {
		return r.validateFP32()
	}
	if mode == "auto" {
		mode = quant.ModeDynamic
		convs := r.orig.nodes["aten::_convolution"] + r.orig.nodes["aten::conv2d"] + r.orig.nodes["aten::conv1d"]
		if convs > 0 && (r.cfg.Calibration.Path != "" || r.cfg.Calibration.Kind != "") {
			mode = quant.ModeStatic
		}
		r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("quantize.mode auto: %s (%d convolutions, calibration data %s)", mode, convs, orNone(r.cfg.Calibration.Path)))
	}
	specs := r.inputSpecs()
	var calibB, valB validate.Batches
	var valDesc string
	var synthetic bool
	if mode == quant.ModeStatic {
		ds, err := calib.Open(r.cfg.Calibration, specs)
		if err != nil {
			return fmt.Errorf("calibration data: %w", err)
		}
		calibB = validate.FromDataset(ds)
		synthetic = ds.Synthetic()
		if synthetic {
			r.rep.Warnings = append(r.rep.Warnings, "calibration used random data: the INT8 result is unverified on real inputs")
		}
	}
	if src := r.validationSource(); src != nil {
		ds, err := calib.Open(*src, specs)
		if err != nil {
			return fmt.Errorf("validation data: %w", err)
		}
		valB, valDesc = validate.FromDataset(ds), ds.Describe()
		synthetic = synthetic || ds.Synthetic()
	} else {
		// No data given: validate on the bench inputs (random), and say so.
		arr, err := r.inputArrays()
		if err != nil {
			return err
		}
		if valB, err = validate.FromArrays(arr, nil, nil, 1); err != nil {
			return err
		}
		valDesc, synthetic = "the random bench inputs", true
		r.rep.Warnings = append(r.rep.Warnings, "no validation data: INT8 was checked on random inputs only; set validation.data for a real check")
	}
	opts := quant.Options{
		Mode: mode, Engine: q.Engine, Activation: q.Observer, Percentile: q.Percentile,
		PerChannel: q.PerChannel, ReduceRange: string(q.ReduceRange), Skip: q.Skip,
	}
	if r.opts.Progress != nil {
		opts.Progress = func(done, total int) { r.opts.Progress("calibration", done, total) }
	}
	th := validate.Thresholds{
		MinCosine: r.cfg.Validation.MinCosine, MaxAbsError: r.cfg.Validation.MaxAbsError,
		MinTop1Agreement: r.cfg.Validation.MinTop1Agreement, MaxAccuracyDrop: r.cfg.Validation.MaxAccuracyDrop / 100,
	}
	fb := quant.FallbackOptions{
		Thresholds: th, MaxFP32Layers: q.MaxFallbackLayers, SensitivityBatches: 4,
		Latency: quant.InterleavedLatency(r.inputs, 2, max(5, r.cfg.Bench.StageRuns)),
	}
	if !q.Fallback {
		fb.MaxFP32Layers = -1
	}
	r.logf("quantizing (%s, engine %s, observer %s)", mode, q.Engine, q.Observer)
	var (
		qrep *quant.Report
		qerr error
	)
	c := r.addCandidate("INT8 "+mode, append(append([]string{}, r.unfrozenSteps...), "quantize_"+mode), func() (*candidate, error) {
		m, rep, err := quant.QuantizeChecked(r.ctx, r.unfrozen, calibB, valB, opts, fb)
		qrep, qerr = rep, err
		if err != nil {
			return nil, err
		}
		return &candidate{mod: m, precision: "int8-" + mode, engine: rep.Engine, fp32Layers: rep.FP32Layers}, nil
	})
	if qrep != nil {
		r.rep.Quantize = qrep
		r.rep.Validation = validationOf(qrep, valDesc, synthetic)
	}
	if c == nil {
		var te *quant.ThresholdError
		last := r.cands[len(r.cands)-1]
		if errors.As(qerr, &te) {
			// Validation failed even with fallback: the run fails (exit 3), reports written.
			if r.rep.Validation == nil {
				r.rep.Validation = &report.Validation{Data: valDesc, Synthetic: synthetic}
			}
			r.rep.Validation.Passed = false
			if len(r.rep.Validation.Failures) == 0 {
				r.rep.Validation.Failures = []string{last.reason}
			}
			return nil
		}
		return fmt.Errorf("quantize: %s", last.reason)
	}
	// Guard: INT8 must beat the best FP32 model on this machine.
	fp32 := r.best()
	cmp, err := r.measure(uniq(fp32, c), r.cfg.Bench.StageRuns)
	if err != nil {
		return fmt.Errorf("measuring INT8: %w", err)
	}
	r.extraCmps = append(r.extraCmps, cmp)
	p50 := map[string]bench.Summary{}
	for _, res := range cmp.Results {
		p50[res.Name] = res.Stats
	}
	fpName := fp32.name
	if fp32 == r.orig {
		fpName = "original"
	}
	d := quant.DecideINT8(p50[c.name].P50, p50[fpName].P50, r.cfg.Optimize.MinSpeedup, q.Force)
	r.rep.Decisions = append(r.rep.Decisions, "INT8: "+d.Reason)
	if d.UseINT8 {
		c.status, c.reason = "kept", d.Reason
		if fp32 != r.orig {
			fp32.status = "superseded"
		}
	} else {
		c.status, c.reason = "rejected", d.Reason
		r.rep.Warnings = append(r.rep.Warnings, d.Reason)
		// The artifact is FP32 now: its validation is the FP32 one.
		return r.validateFP32()
	}
	return nil
}

func uniq(a, b *candidate) []*candidate {
	if a.name == "original" || a.status == "baseline" {
		return []*candidate{b}
	}
	return []*candidate{a, b}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// validationOf turns the quantizer's comparison into the report's validation section.
func validationOf(q *quant.Report, data string, synthetic bool) *report.Validation {
	v := &report.Validation{Data: data, Synthetic: synthetic, Passed: len(q.Failures) == 0, Layers: q.Sensitivity}
	if res := q.Validation; res != nil {
		v.Samples = res.Samples
		v.Metrics = map[string]float64{
			"cosine": res.Cosine, "min_sample_cosine": res.MinSampleCosine, "max_abs_error": res.MaxAbsError,
			"mean_abs_error": res.MeanAbsError,
		}
		if res.Top1Agreement >= 0 {
			v.Metrics["top1_agreement"] = res.Top1Agreement
			v.Metrics["kl_divergence"] = res.KLDivergence
		}
		if res.AccuracyDrop >= 0 {
			v.Metrics["top1_fp32"], v.Metrics["top1_int8"] = res.RefTop1, res.Top1
			v.Metrics["top5_fp32"], v.Metrics["top5_int8"] = res.RefTop5, res.Top5
			v.Metrics["accuracy_drop_points"] = res.AccuracyDrop * 100
		}
	}
	for _, f := range q.Failures {
		v.Failures = append(v.Failures, f.String())
	}
	return v
}

// validateFP32 compares the chosen FP32 model with the original on the validation data.
func (r *run) validateFP32() error {
	best := r.best()
	src := r.validationSource()
	if src == nil || best == r.orig {
		r.rep.Validation = &report.Validation{
			Samples: len(r.checks), Data: "the bench inputs", Synthetic: true, Passed: true,
			Metrics: map[string]float64{"max_abs_error": best.maxAbs, "cosine": best.cosine},
		}
		return nil
	}
	ds, err := calib.Open(*src, r.inputSpecs())
	if err != nil {
		return fmt.Errorf("validation data: %w", err)
	}
	// validate runs plain forwards; channels-last weights accept contiguous inputs too.
	res, err := validate.Compare(r.ctx, r.orig.mod, best.mod, validate.FromDataset(ds))
	if err != nil {
		return fmt.Errorf("validating %s: %w", best.name, err)
	}
	v := validationOf(&quant.Report{Validation: res}, ds.Describe(), ds.Synthetic())
	v.Passed = res.MaxAbsError <= r.cfg.Optimize.MaxAbsError && res.Cosine >= r.cfg.Optimize.MinCosine
	if !v.Passed {
		v.Failures = append(v.Failures, fmt.Sprintf("FP32 result moved: max abs error %.3g (allowed %.3g), cosine %.6f (required %.6f)", res.MaxAbsError, r.cfg.Optimize.MaxAbsError, res.Cosine, r.cfg.Optimize.MinCosine))
	}
	r.rep.Validation = v
	return nil
}
