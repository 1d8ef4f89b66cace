package pipeline

import (
	"fmt"
	"slices"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/report"
)

// deferFP32Threads is the quick search's thread step where INT8 is tried next: FP32's own
// thread choice is left until a decision reads it (fp32ThreadsNow), and calibration, validation
// and INT8's own thread choice run at the fewest count, as the FP32 stages did. Where INT8
// wins by more than any thread count could give FP32 (int8BeatsEveryCount), no decision reads
// it: on resnet50 under load that choice alone took 30 s of 2-thread runs of the FP32 model.
func (r *run) deferFP32Threads() bool {
	n := r.stageThreads()
	if n <= 0 || r.cfg.Quantize.Mode == "none" || r.orig.precision != "fp32" || r.call.method != "forward" {
		return false
	}
	if err := torch.SetNumThreads(n); err != nil {
		return false
	}
	r.threads, r.fp32Deferred = n, true
	r.logf("threads: FP32's count left until INT8 is measured (quick search)")
	return true
}

// fp32ThreadsNow takes FP32's deferred thread choice on fp32 when a decision needs it, then
// sets the count that was set before back (the INT8 model in hand runs at it).
func (r *run) fp32ThreadsNow(fp32 *candidate) error {
	if !r.fp32Deferred {
		return nil
	}
	was := r.threads
	if err := r.chooseFP32Threads(fp32); err != nil {
		return err
	}
	r.threads = was
	return torch.SetNumThreads(was)
}

// int8BeatsEveryCount says whether INT8, at n threads and measured against FP32 at n in the
// same rounds (int8 and fp32 latencies), is faster than FP32 at every count in counts by
// minSpeedup beyond doubt, without FP32 being timed at the others: FP32 at m threads takes
// at least n/m of its time at n (no more than linear scaling) for m > n, and counts below n
// must not be tried, since fewer threads can be faster than more on a loaded machine.
// It returns the bound used ("" when it does not hold).
func int8BeatsEveryCount(int8, fp32 []time.Duration, n int, counts []int, minSpeedup float64, seed uint64) string {
	if n <= 0 || len(counts) == 0 || slices.Min(counts) < n {
		return ""
	}
	most := slices.Max(counts)
	need := minSpeedup * float64(most) / float64(n)
	// The ratio of FP32's p50 to INT8's, and its 95% interval.
	ratio, lo, _, err := bench.RatioOfMediansCI(bench.Floats(int8), bench.Floats(fp32), 0.95, bench.DefaultResamples, seed)
	if err != nil || lo < need {
		return ""
	}
	return fmt.Sprintf("INT8 at %s was %.2fx faster than FP32 at %s (95%% CI from %.2fx), more than the %.2fx FP32 could gain at %s (linear scaling from %d, times optimize.min_speedup)",
		report.Plural(n, "thread"), ratio, report.Plural(n, "thread"), lo, need, report.Plural(most, "thread"), n)
}

// fp32CountsSettled is checkAgainstFP32Threads's answer where FP32's choice was deferred: the
// decision d stands as it is when INT8 beats FP32 at every count (int8BeatsEveryCount),
// otherwise FP32's choice is measured now and d is checked against it.
func (r *run) fp32CountsSettled(d quant.Decision, m *measurement, best8, fp32 *candidate) (quant.Decision, bool, error) {
	if !r.fp32Deferred {
		return d, false, nil
	}
	a, b := m.result(best8.name), m.result(fp32.name)
	if fp32 == r.orig {
		b = m.cmp.Results[0]
	}
	if a != nil && b != nil {
		if why := int8BeatsEveryCount(a.Samples, b.Samples, r.threads, r.opts.AutoThreads, r.cfg.Optimize.MinSpeedup, r.cfg.Bench.Seed); why != "" {
			note := fmt.Sprintf("FP32's own thread count not measured (quick search): %s; %s", why, fullSearchHint)
			d.Reason += "; " + note
			r.rep.Decisions = append(r.rep.Decisions, "threads for FP32: "+note)
			r.logf("threads for FP32: %s", note)
			return d, true, nil
		}
	}
	return d, false, r.fp32ThreadsNow(fp32)
}
