//go:build !amd64 || !gc || purego

package kernels

import (
	"math"
	"sync/atomic"
)

// asmBuilt says this build holds no assembly: only the plain-Go peak loops run.
const asmBuilt = false

// Without assembly the peak loops are plain Go: independent scalar chains
// the compiler keeps in registers. They measure what Go code reaches, not
// the machine's SIMD peak, and say so in their name.

// The sinks keep the loops' results alive; atomic because every thread of
// an all-cores run stores to them.
var sinkF32 atomic.Uint32
var sinkI32 atomic.Int32

func peakGoF32(iters int) {
	var a0, a1, a2, a3, a4, a5, a6, a7 float32
	b, c := float32(0.999), float32(1e-7)
	for i := 0; i < iters; i++ {
		a0 = a0*b + c
		a1 = a1*b + c
		a2 = a2*b + c
		a3 = a3*b + c
		a4 = a4*b + c
		a5 = a5*b + c
		a6 = a6*b + c
		a7 = a7*b + c
	}
	sinkF32.Store(math.Float32bits(a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7))
}

func peakGoI32(iters int) {
	var a0, a1, a2, a3, a4, a5, a6, a7 int32
	b, c := int32(3), int32(7)
	for i := 0; i < iters; i++ {
		a0 = a0*b + c
		a1 = a1*b + c
		a2 = a2*b + c
		a3 = a3*b + c
		a4 = a4*b + c
		a5 = a5*b + c
		a6 = a6*b + c
		a7 = a7*b + c
	}
	sinkI32.Store(a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7)
}

func peakLoops() []peakLoop {
	return []peakLoop{
		{"fp32", Generic, "go-scalar (float32 multiply-add)", 16, peakGoF32, 0},
		{"int8", Generic, "go-scalar (int32 multiply-add)", 16, peakGoI32, 0},
	}
}

// Without assembly there is no dependable clock loop (the compiler may
// reorder or fold it); the frequency comes from the OS instead.
func clockCycles(iters int) float64 { return 0 }

const clockMeasured = false

func streamRead(p []byte) uint64 { return streamReadGo(p) }
