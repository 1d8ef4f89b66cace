package report

import (
	"fmt"
	"strings"
)

// Verdict words a measured speedup so that the words never contradict the figures: a
// difference is called only when the U test is significant (p < 0.05) and the ratio's 95%
// interval excludes 1; otherwise it says there is no clear difference, and why.
func Verdict(speedup, lo, hi, p float64) (string, bool) {
	ci := fmt.Sprintf("%.2fx, 95%% CI [%.2f, %.2f], U test p=%.3g", speedup, lo, hi, p)
	switch {
	case p >= 0.05:
		return "no clear difference (" + ci + ")", false
	case lo <= 1 && hi >= 1:
		return "no clear difference: the interval includes 1 (" + ci + ")", false
	case speedup > 1:
		return "optimized is faster: " + ci, true
	default:
		return fmt.Sprintf("optimized is slower: it takes %.2fx the time (%s)", 1/speedup, ci), true
	}
}

// summaryLines is the plain-language opening of the report: what to deploy, how much faster,
// at what precision and thread count, how accuracy was checked, and any warning.
func (r *Report) summaryLines() []string {
	var out []string
	b, v := r.Bench, r.Validation
	switch {
	case r.Outcome == OutcomeValidationFailed:
		why := ""
		if v != nil && len(v.Failures) > 0 {
			why = ": " + strings.Join(v.Failures, "; ")
		}
		out = append(out, "Do not deploy: the optimized model failed validation"+why+". No artifact was written; earlier outputs in this folder were left as they were.")
	case r.Artifact != nil && b != nil:
		out = append(out, fmt.Sprintf("Deploy `%s`: %s, %s, %s.", *r.Artifact, b.Optimized, r.deployPrecision(b.Precision), Plural(b.Threads, "intra-op thread")))
	}
	if b != nil {
		sp := RoundedSpeedup(b.OriginalP50, b.OptimizedP50)
		if b.Significant {
			out = append(out, fmt.Sprintf("Speed: %.2fx the original at p50 (95%% CI %.2f to %.2f): %s ms vs %s ms; p95 %s ms vs %s ms; %d interleaved runs each.",
				sp, b.SpeedupLo, b.SpeedupHi, ms(b.OptimizedP50), ms(b.OriginalP50), ms(b.OptimizedP95), ms(b.OriginalP95), b.Runs))
		} else {
			out = append(out, fmt.Sprintf("Speed: no clear difference from the original (p50 %s ms vs %s ms, %.2fx, 95%% CI %.2f to %.2f; p95 %s ms vs %s ms; %d interleaved runs each).",
				ms(b.OptimizedP50), ms(b.OriginalP50), sp, b.SpeedupLo, b.SpeedupHi, ms(b.OptimizedP95), ms(b.OriginalP95), b.Runs))
		}
	}
	if v != nil {
		data := v.Data
		if data != "" && (data[0] < '0' || data[0] > '9') {
			data = Plural(v.Samples, "sample") + " of " + data // Describe() already counts them
		}
		how := fmt.Sprintf("Accuracy: %s checked against the original on %s", v.Checked, data)
		if v.Synthetic {
			how += " (random data: unverified on real inputs)"
		}
		if m := metricLine(v.Metrics); m != "" {
			how += ": " + m
		}
		out = append(out, how+": "+passWord(v.Passed)+".")
	}
	if l := r.forcedLine(); l != "" {
		out = append(out, l)
	}
	if q := r.Quantize; q != nil && q.QuantizedOpCount == 0 {
		out = append(out, "INT8: no layer was quantized; the result is not called INT8.")
	}
	// The loudest warning first: a load change makes the figures themselves doubtful.
	first := ""
	for _, w := range r.Warnings {
		if strings.Contains(w, "load changed") {
			first = w
			break
		}
	}
	if first == "" && len(r.Warnings) > 0 {
		first = r.Warnings[0]
	}
	switch n := len(r.Warnings); n {
	case 0:
	case 1:
		out = append(out, "Warning: "+first)
	default:
		out = append(out, fmt.Sprintf("Warnings (%d, listed below): %s", n, first))
	}
	return out
}

// forcedLine says, from the stage table's figures, when quantize.force kept an INT8 stage
// that an FP32 stage beat or came within optimize.min_speedup of: the one decision a reader
// of the summary could not otherwise explain ("" when none). Rows may come from different
// measurements, so they are compared by their speedups over the original, as the table
// prints them.
func (r *Report) forcedLine() string {
	if r.Config == nil || !r.Config.Quantize.Force {
		return ""
	}
	var kept, best *Stage
	for i, s := range r.Stages {
		if s.BaselineP50Ms == nil || s.P50Ms == nil || *s.P50Ms <= 0 {
			continue
		}
		switch {
		case s.Status == StatusKept && strings.HasPrefix(s.Precision, "int8"):
			kept = &r.Stages[i]
		case s.Precision == "fp32" && s.Status != StatusBaseline && (best == nil || rowSpeedup(s) > rowSpeedup(*best)):
			best = &r.Stages[i]
		}
	}
	if kept == nil || best == nil {
		return ""
	}
	ratio := rowSpeedup(*kept) / rowSpeedup(*best)
	need := r.Config.Optimize.MinSpeedup
	if ratio >= need && ratio > 1 {
		return ""
	}
	return fmt.Sprintf("INT8 is kept only because quantize.force is true: FP32 %s measured %.2fx the original, INT8 %s %.2fx "+
		"(%.2fx FP32's; optimize.min_speedup asks %.2fx). Drop force to deploy the FP32 model.",
		best.Name, rowSpeedup(*best), kept.Name, rowSpeedup(*kept), ratio, need)
}

// rowSpeedup is a stage row's speedup as the table prints it.
func rowSpeedup(s Stage) float64 { return RoundedSpeedup(*s.BaselineP50Ms, *s.P50Ms) }

// Plural is n and noun, with an s unless n is 1: "1 thread", "2 threads".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// deployPrecision is precisionWords for the deployed model, saying when its INT8 is the
// input model's own rather than torchspeed's.
func (r *Report) deployPrecision(p string) string {
	if p != "fp32" && p == r.Model.Precision {
		return strings.TrimSuffix(strings.ReplaceAll(precisionWords(p), ", calibrated", ""), ")") + ", as the input model was quantized)"
	}
	return precisionWords(p)
}

func precisionWords(p string) string {
	switch p {
	case "int8-static":
		return "INT8 (static, calibrated)"
	case "int8-dynamic":
		return "INT8 (dynamic)"
	case "fp32":
		return "FP32"
	case "bf16":
		return "BF16 (linear layers' weights and inputs; sums in float)"
	}
	return p
}
