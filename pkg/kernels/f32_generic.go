package kernels

import (
	"math"
	"math/big"
)

// dotF32Impl is one implementation of the FP32 dot product; fn takes
// equal-length slices of any length.
type dotF32Impl struct {
	path Path
	fn   func(x, y []float32) float32
}

// gemmF32Impl is one FP32 GEMM micro-kernel. fn adds the mr x nr product
// of two packed panels into c:
//
//	for i < mr, j < nr: s := 0; for k < kc: s = fma(a[k*mr+i], b[k*nr+j], s)
//	                    c[i*ldc+j] += s
//
// a holds kc*mr values, b kc*nr, c at least (mr-1)*ldc+nr.
type gemmF32Impl struct {
	path   Path
	mr, nr int
	fn     func(kc int, a, b, c []float32, ldc int)
}

func dotF32Impls() []dotF32Impl {
	return append([]dotF32Impl{{Generic, dotF32Generic}}, asmDotF32...)
}

func gemmF32Impls() []gemmF32Impl {
	return append([]gemmF32Impl{{Generic, 4, 8, func(kc int, a, b, c []float32, ldc int) {
		gemmF32MicroGeneric(4, 8, kc, a, b, c, ldc)
	}}}, asmGemmF32...)
}

// dotF32Generic sums x[i]*y[i] in index order with four partial sums (so the
// loop is not latency bound); the explicit float32 conversion keeps the
// compiler from fusing the multiply and add.
func dotF32Generic(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float32(x[i] * y[i])
		s1 += float32(x[i+1] * y[i+1])
		s2 += float32(x[i+2] * y[i+2])
		s3 += float32(x[i+3] * y[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float32(x[i] * y[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// gemmF32MicroGeneric is the reference micro-kernel: any mr x nr, exact
// FMA chains, then one rounded add into c (what the assembly does).
func gemmF32MicroGeneric(mr, nr, kc int, a, b, c []float32, ldc int) {
	a = a[:kc*mr]
	b = b[:kc*nr]
	for i := 0; i < mr; i++ {
		row := c[i*ldc : i*ldc+nr]
		for j := range row {
			var s float32
			for k := 0; k < kc; k++ {
				s = fma32(a[k*mr+i], b[k*nr+j], s)
			}
			row[j] += s
		}
	}
}

// fma32 returns a*b+c rounded once to float32 (round-half-even), as the
// hardware vfmadd231ps does. math.FMA rounds to float64 first; that second
// rounding can only change the result when the float64 value lies exactly
// halfway between two float32 values, and then the exact sum decides.
func fma32(a, b, c float32) float32 {
	r := math.FMA(float64(a), float64(b), float64(c))
	r32 := float32(r)
	if float64(r32) == r || math.IsInf(r, 0) || math.IsNaN(r) || math.IsInf(float64(r32), 0) {
		return r32
	}
	// Neighbours of r in float32: r32 and the next one away from r32 toward r.
	other := math.Nextafter32(r32, float32(math.Copysign(math.Inf(1), r-float64(r32))))
	if (float64(r32)+float64(other))/2 != r {
		return r32 // not a midpoint: one rounding from r is already correct
	}
	exact := new(big.Float).SetPrec(1100).SetFloat64(float64(a))
	exact.Mul(exact, new(big.Float).SetPrec(1100).SetFloat64(float64(b)))
	exact.Add(exact, new(big.Float).SetPrec(1100).SetFloat64(float64(c)))
	switch exact.Cmp(big.NewFloat(r)) {
	case 0:
		return r32 // a true tie: Go's conversion already rounded half to even
	case 1:
		if other > r32 {
			return other
		}
		return r32
	default:
		if other < r32 {
			return other
		}
		return r32
	}
}
