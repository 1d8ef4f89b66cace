package report

import (
	"fmt"
	"strings"
)

// writeFallback renders the INT8 fallback: which layer sets were tried, what each measured,
// and the most sensitive layers, so a reader sees why a layer stayed FP32.
func (r *Report) writeFallback(p func(string, ...any)) {
	q := r.Quantize
	if q == nil || len(q.Attempts) == 0 {
		return
	}
	p("\n### INT8 fallback\n\n")
	p("The all-INT8 model is checked first; when it fails a threshold, the most sensitive layers are kept in FP32 one more at a time (at most `quantize.max_fallback_layers`), and the passing sets are timed against each other.\n\n")
	p("| FP32 layers | cosine | result | p50 ms |\n|---|---:|---|---:|\n")
	for _, a := range q.Attempts {
		layers := "none"
		if len(a.FP32Layers) > 0 {
			layers = strings.Join(a.FP32Layers, ", ")
		}
		result := "pass"
		if !a.Passed {
			result = "fail: " + strings.Join(a.Failures, "; ")
		}
		p("| %s | %s | %s | %s |\n", layers, optFloat(a.Cosine, "%.6f"), result, optFloat(a.P50Ms, "%.3f"))
	}
	if v := r.Validation; v != nil && len(v.Layers) > 0 {
		n := min(5, len(v.Layers))
		p("\nMost sensitive layers (cosine with the original when only that layer stays FP32; %d of %d):\n\n", n, len(v.Layers))
		p("| layer | type | cosine | top-1 agreement |\n|---|---|---:|---:|\n")
		for _, l := range v.Layers[:n] {
			p("| %s | %s | %s | %s |\n", l.Layer, l.Type, optFloat(l.Cosine, "%.6f"), optFloat(l.Top1Agreement, "%.4f"))
		}
	}
}

// optFloat formats v, or "-" when it was not measured.
func optFloat(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}
