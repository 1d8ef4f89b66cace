package kernels

import (
	"fmt"
	"time"
)

// RooflinePoint places one measured run on the roofline.
type RooflinePoint struct {
	// Ops is the work (FLOP or INT8 OP) and Bytes the memory traffic of one run.
	Ops   float64 `json:"ops"`
	Bytes float64 `json:"bytes"`
	// Latency is the time of one run.
	Latency time.Duration `json:"latency_ns"`
	// Achieved is Ops/Latency (ops/s).
	Achieved float64 `json:"achieved"`
	// Intensity is Ops/Bytes (ops per byte); 0 when Bytes is 0.
	Intensity float64 `json:"intensity"`
	// Ceiling is min(peak compute, Intensity*bandwidth): the best rate the
	// roofline allows at this intensity.
	Ceiling float64 `json:"ceiling"`
	// Bound is "compute" or "memory": which roof is lower here.
	Bound string `json:"bound"`
	// FractionOfPeak is Achieved / peak compute; FractionOfCeiling is
	// Achieved / Ceiling.
	FractionOfPeak    float64 `json:"fraction_of_peak"`
	FractionOfCeiling float64 `json:"fraction_of_ceiling"`
}

// Roofline places an FP32 run (flops, bytes moved, latency) against the
// all-cores FP32 peak and read bandwidth in peak.
func Roofline(flops, bytes float64, latency time.Duration, peak PeakResult) (RooflinePoint, error) {
	return RooflineAt(flops, bytes, latency, peak.BestFP32, memBW(peak))
}

// RooflineINT8 is Roofline for a quantized run against the INT8 peak.
func RooflineINT8(ops, bytes float64, latency time.Duration, peak PeakResult) (RooflinePoint, error) {
	return RooflineAt(ops, bytes, latency, peak.BestINT8, memBW(peak))
}

func memBW(p PeakResult) float64 {
	if p.Memory == nil {
		return 0
	}
	return p.Memory.ReadAllCores
}

// RooflineAt is Roofline with explicit roofs (ops/s, bytes/s), e.g. for a
// run on fewer threads than the peak used. A zero bandwidth (or zero bytes)
// leaves only the compute roof.
func RooflineAt(ops, bytes float64, latency time.Duration, peakOps, bandwidth float64) (RooflinePoint, error) {
	if ops < 0 || bytes < 0 || latency <= 0 {
		return RooflinePoint{}, fmt.Errorf("kernels: roofline: ops %g, bytes %g, latency %v: need ops, bytes >= 0 and a positive latency", ops, bytes, latency)
	}
	if peakOps <= 0 || bandwidth < 0 {
		return RooflinePoint{}, fmt.Errorf("kernels: roofline: peak %g ops/s, bandwidth %g B/s: the peak must be measured (positive)", peakOps, bandwidth)
	}
	p := RooflinePoint{Ops: ops, Bytes: bytes, Latency: latency, Bound: "compute", Ceiling: peakOps}
	p.Achieved = ops / latency.Seconds()
	if bytes > 0 {
		p.Intensity = ops / bytes
		if bandwidth > 0 && p.Intensity*bandwidth < peakOps {
			p.Ceiling, p.Bound = p.Intensity*bandwidth, "memory"
		}
	}
	p.FractionOfPeak = p.Achieved / peakOps
	if p.Ceiling > 0 {
		p.FractionOfCeiling = p.Achieved / p.Ceiling
	}
	return p, nil
}
