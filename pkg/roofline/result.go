package roofline

import (
	"fmt"
	"strings"
)

// Roofline places a model's measured latency against this machine's measured compute peak:
// how much of what the CPUs can physically do the model gets.
type Roofline struct {
	// Model names the measured model (bench reports; empty in an optimize report).
	Model string `json:"model,omitempty"`
	// FLOPs is the work of one inference at the benchmarked input shape: 2 per multiply-add of
	// the convolutions and matrix products, from the ops' shapes. An INT8 model does the same
	// multiply-adds as its FP32 original, as 8-bit operations: the count comes from the original.
	FLOPs float64            `json:"flops"`
	ByOp  map[string]float64 `json:"flops_by_op,omitempty"`
	// CountedOn says which model the FLOPs were counted on.
	CountedOn string `json:"counted_on"`
	// Precision is "fp32" or "int8": which peak the model is held against.
	Precision string  `json:"precision"`
	P50Ms     float64 `json:"p50_ms"`
	// Achieved is FLOPs / p50 (FLOP/s, or OP/s for INT8).
	Achieved float64 `json:"achieved_per_s"`
	// Peak is the best all-cores rate of pkg/kernels' in-register loop for Precision on CPUs
	// (FMA for fp32, u8 x s8 dot products for int8), measured in this process; PeakISA names it.
	Peak     float64 `json:"peak_per_s"`
	PeakISA  string  `json:"peak_isa"`
	CPUs     []int   `json:"cpus"`
	Fraction float64 `json:"fraction_of_peak"`
}

// si writes v with three significant digits and a metric prefix (k, M, G, T).
func si(v float64) string {
	for _, p := range []struct {
		f float64
		s string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= p.f {
			return fmt.Sprintf("%.3g %s", v/p.f, p.s)
		}
	}
	return fmt.Sprintf("%.3g ", v)
}

// Summary is the roofline in one line, e.g. "3.63 GFLOP per inference (counted on the
// original) at p50 12.1 ms: 300 GFLOP/s, 65% of the measured FP32 peak (464 GFLOP/s,
// avx512-fma, 2 CPUs)".
func (r *Roofline) Summary() string {
	unit := r.unit()
	counted := ""
	if r.CountedOn != "" {
		counted = " (counted on " + r.CountedOn + ")"
	}
	return fmt.Sprintf("%s%s per inference%s at p50 %.3g ms: %s%s/s, %.1f%% of the measured %s peak (%s%s/s, %s, %d CPU%s)",
		si(r.FLOPs), unit, counted, r.P50Ms, si(r.Achieved), unit, 100*r.Fraction, strings.ToUpper(r.Precision),
		si(r.Peak), unit, r.PeakISA, len(r.CPUs), plural(len(r.CPUs)))
}

// Work writes an amount of work (FLOPs, or OPs for INT8) with three significant digits and a
// metric prefix, e.g. "3.63 GFLOP".
func (r *Roofline) Work(v float64) string { return si(v) + r.unit() }

// unit is FLOP, or OP for INT8 (8-bit multiply-adds are not floating point).
func (r *Roofline) unit() string {
	if r.Precision == "int8" {
		return "OP"
	}
	return "FLOP"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
