// Package roofline places a model's measured latency against the machine's compute peak: it
// takes the model's FLOPs at the benchmarked input shape from a counter the caller gives (the
// bindings' Module: convolutions and matrix products, from the ops' shapes) and measures the
// peak with pkg/kernels' in-register loops on the CPUs the model runs on. The optimize
// pipeline and `torchspeed bench` report it.
package roofline

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/torchspeed/torchspeed/pkg/kernels"
)

// PeakDuration is the time MeasurePeak spends on each figure here: the best 2 ms burst of 30 ms
// is within a few percent of a 200 ms measurement, and the whole peak then takes about half a
// second (measured: 0.47 s with 25 ms on a 2-core AVX-512 VNNI machine).
const PeakDuration = 30 * time.Millisecond

var (
	peakMu sync.Mutex
	peaks  = map[string]kernels.PeakResult{}
)

// Peak measures the FP32 and INT8 compute peaks (no memory bandwidth) on the first threads
// CPUs this process may run on (all of them for threads <= 0 or beyond the mask), once per
// CPU set per process.
func Peak(threads int) (kernels.PeakResult, error) {
	cpus := allowedCPUs()
	if threads > 0 && threads < len(cpus) {
		cpus = cpus[:threads]
	}
	key := fmt.Sprint(cpus)
	peakMu.Lock()
	defer peakMu.Unlock()
	if p, ok := peaks[key]; ok {
		return p, nil
	}
	// The all-cores figure runs one goroutine per CPU at once; a runtime setting of
	// GOMAXPROCS below that (bench and launch lower it to keep Go off the inference CPUs) is
	// lifted for the measurement only.
	if n := len(cpus); n > runtime.GOMAXPROCS(0) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	}
	p, err := kernels.MeasurePeak(kernels.PeakOptions{CPUs: cpus, Duration: PeakDuration, SkipMemory: true})
	if err != nil {
		return kernels.PeakResult{}, fmt.Errorf("roofline: measure the compute peak on CPUs %v: %w", cpus, err)
	}
	peaks[key] = p
	return p, nil
}

// IsINT8 tells whether a precision label ("fp32", "int8-static", "int8-dynamic", ...) is held
// against the INT8 peak.
func IsINT8(precision string) bool { return strings.HasPrefix(strings.ToLower(precision), "int8") }

// NoPeakFor says why a model of this precision is not placed against a peak ("" when it is):
// BF16 linears do two multiply-adds per lane and instruction, so the FP32 peak is not their
// ceiling, and no BF16 peak is measured.
func NoPeakFor(precision string) string {
	if strings.EqualFold(precision, "bf16") {
		return "its linears run in BF16 (two multiply-adds per lane and instruction): the measured FP32 peak is not their ceiling, and no BF16 peak is measured"
	}
	return ""
}

// Place computes the roofline of flops per inference run in p50 against peak: the FP32 peak, or
// the INT8 one when int8 is set. countedOn names the model the FLOPs were counted on.
func Place(flops float64, byOp map[string]float64, countedOn string, p50 time.Duration, int8 bool, peak kernels.PeakResult) (*Roofline, error) {
	if flops <= 0 {
		return nil, fmt.Errorf("roofline: %g FLOP counted on %s: no convolution or matrix product to hold against the peak", flops, countedOn)
	}
	place, prec, figs := kernels.Roofline, "fp32", peak.FP32
	if int8 {
		place, prec, figs = kernels.RooflineINT8, "int8", peak.INT8
	}
	pt, err := place(flops, 0, p50, peak)
	if err != nil {
		return nil, fmt.Errorf("roofline: %w", err)
	}
	isa := ""
	best := 0.0
	for _, f := range figs {
		if f.AllCores > best {
			best, isa = f.AllCores, f.ISA
		}
	}
	return &Roofline{
		FLOPs: flops, ByOp: byOp, CountedOn: countedOn, Precision: prec,
		P50Ms: float64(p50) / 1e6, Achieved: pt.Achieved, Peak: pt.Ceiling, PeakISA: isa,
		CPUs: append([]int(nil), peak.CPUs...), Fraction: pt.FractionOfPeak,
	}, nil
}

// FLOPCounter counts the FLOPs of one forward on inputs, in total and by op: *torch.Module with
// T = *torch.Tensor. The interface keeps this package pure Go, so it builds without cgo.
type FLOPCounter[T any] interface {
	OpFLOPs(inputs ...T) (total float64, byOp map[string]float64, err error)
}

// Measure counts flopModel's FLOPs on inputs (one forward), measures the peak on threads CPUs
// and places p50. For an INT8 model pass its FP32 original as flopModel and int8 true: the
// INT8 model does the same multiply-adds, in ops the count does not read.
func Measure[T any](flopModel FLOPCounter[T], countedOn string, inputs []T, p50 time.Duration, int8 bool, threads int) (*Roofline, error) {
	flops, byOp, err := flopModel.OpFLOPs(inputs...)
	if err != nil {
		return nil, fmt.Errorf("roofline: %w", err)
	}
	peak, err := Peak(threads)
	if err != nil {
		return nil, err
	}
	return Place(flops, byOp, countedOn, p50, int8, peak)
}
