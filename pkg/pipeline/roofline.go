package pipeline

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/torchspeed/torchspeed/pkg/roofline"
)

// roofline adds the final model's FLOP count and its share of the measured compute peak to the
// report. The FLOPs are counted on the original FP32 model at the bench inputs (an INT8 artifact
// does the same multiply-adds, in quantized ops the count does not read), and held against the
// INT8 peak when the final model is INT8. It costs one forward and ~0.5 s of peak measurement;
// a failure is a warning, not a failed run.
func (r *run) roofline() {
	if r.rep.Bench == nil || r.rep.Bench.OptimizedP50 <= 0 {
		return
	}
	if r.call.typed {
		// The FLOP counter runs forward with tensors only.
		r.rep.Warnings = append(r.rep.Warnings, "no roofline: FLOPs are counted on forward with tensor arguments only, and this model is called as "+r.call.method+" with constants")
		return
	}
	if r.orig.precision != "fp32" {
		// The counter reads aten's convolutions and matrix products; a model that arrived INT8
		// does its work in quantized:: ops, whose FLOPs it does not count.
		r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("no roofline: the input model is %s already, and FLOPs are counted on aten convolutions and matrix products only (not its quantized:: operators); optimize the FP32 model to get one", r.orig.precision))
		return
	}
	final := r.best()
	if why := roofline.NoPeakFor(final.precision); why != "" {
		r.logf("no roofline: %s", why)
		return
	}
	p50 := time.Duration(r.rep.Bench.OptimizedP50 * float64(time.Millisecond))
	what := "the FP32 original "
	if r.orig.precision != "fp32" {
		what = "the original (" + r.orig.precision + ") "
	}
	rf, err := roofline.Measure(r.orig.mod, what+filepath.Base(r.cfg.Model.Path), r.inputs, p50,
		roofline.IsINT8(final.precision), r.rep.Bench.Threads)
	if err != nil {
		r.rep.Warnings = append(r.rep.Warnings, "no roofline: "+err.Error())
		return
	}
	r.rep.Roofline = rf
	r.logf("roofline: %s", rf.Summary())
}
