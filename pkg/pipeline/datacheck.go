package pipeline

import (
	"fmt"
	"math"
	"slices"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/calib"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/tserr"
)

const (
	// minCalibrationSamples: observers fed fewer samples than this set scales from a handful of
	// values; the result is warned about.
	minCalibrationSamples = 8
	// outlierRatio: a largest |value| this many times the 99.9th percentile means a minmax
	// observer spends its whole 8-bit range on a few values (one 1e30 quantized nothing).
	outlierRatio = 1000
	// statSample caps how many values per input the percentile is taken over.
	statSample = 1 << 20
)

// checkCalibration refuses calibration data INT8 scales cannot come from (non-finite values,
// an input with zero range) and warns about data they should not come from (extreme
// outliers, too few samples).
func (r *run) checkCalibration(ds *calib.Dataset, specs []calib.InputSpec) error {
	src := orNone(r.cfg.Calibration.Path)
	if n := ds.Len(); n < minCalibrationSamples && !ds.Synthetic() {
		r.warn(fmt.Sprintf("calibration data %s holds %s, fewer than %d: INT8 scales from so few may not fit real inputs; give more (calibration.limit, calibration.path)",
			src, report.Plural(n, "sample"), minCalibrationSamples))
	}
	if err := r.checkLabels(ds, "calibration data"); err != nil {
		return err
	}
	for i, spec := range specs {
		if spec.DType != "float32" && spec.DType != "float64" {
			continue
		}
		var vals []float64
		lo, hi := math.Inf(1), math.Inf(-1)
		nonFinite, seen := 0, 0
		for b := range ds.Batches() {
			if i >= len(b.Inputs) {
				break
			}
			forEachFloat(b.Inputs[i], func(v float64) {
				if !finite(v) {
					nonFinite++
					return
				}
				lo, hi = min(lo, v), max(hi, v)
				seen++
				if len(vals) < statSample {
					vals = append(vals, math.Abs(v))
				}
			})
		}
		if nonFinite > 0 {
			return tserr.BadInput(fmt.Errorf("calibration data %s: input %s holds %d NaN or infinite value(s): INT8 scales cannot come from them; clean the data", src, spec.Name, nonFinite))
		}
		if seen == 0 {
			continue
		}
		if hi == lo {
			return tserr.BadInput(fmt.Errorf("calibration data %s: input %s has the value %g everywhere (zero range): INT8 scales from it are degenerate and nothing would be quantized; give real samples (calibration.path)", src, spec.Name, lo))
		}
		slices.Sort(vals)
		p999 := vals[min(len(vals)-1, int(0.999*float64(len(vals))))]
		if top := vals[len(vals)-1]; top > outlierRatio*max(p999, 1e-12) {
			r.warn(fmt.Sprintf("calibration data %s: input %s has extreme outliers (largest |value| %.3g, 99.9th percentile %.3g): a minmax observer spends its range on them; clean the data or use quantize.observer histogram or percentile",
				src, spec.Name, top, p999))
		}
	}
	return nil
}

func forEachFloat(a *npy.Array, f func(float64)) {
	switch d := a.Data.(type) {
	case []float32:
		for _, v := range d {
			f(float64(v))
		}
	case []float64:
		for _, v := range d {
			f(v)
		}
	}
}

// checkLabels refuses labels outside the model's classes: they would count every sample as a
// miss on both sides and let top-1 "agree" at 0.
func (r *run) checkLabels(ds *calib.Dataset, what string) error {
	labels := ds.Labels()
	if len(labels) == 0 {
		return nil
	}
	classes, err := r.classCount()
	if err != nil || classes < 2 {
		return nil // no class-score output: the labels are not used
	}
	for i, l := range labels {
		if l < 0 || l >= int64(classes) {
			return tserr.BadInput(fmt.Errorf("%s: label %d of %s is outside the model's %d classes (0 to %d): fix the labels file", what, l, ds.SampleName(i), classes, classes-1))
		}
	}
	return nil
}

// classCount is the width of the original's first 2-D output (N x classes), or 0.
func (r *run) classCount() (int, error) {
	outs, err := r.orig.forward(r.inputs)
	if err != nil {
		return 0, err
	}
	defer torch.CloseOutputs(outs)
	for _, o := range outs {
		if s := o.Tensor.Shape(); len(s) == 2 {
			return int(s[1]), nil
		}
	}
	return 0, nil
}
