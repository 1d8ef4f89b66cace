package kernels

import "math"

// quantImpl is one implementation of the element-wise quantization kernels;
// all take slices of any (matching) length.
//
//	quantize:  dst[i] = byte(clamp(rne(clampf(src[i]*inv, ±2^30)) + zp, qmin, qmax))
//	dequantU8: dst[i] = float32(int32(src[i]) - zp) * scale  (and dequantS8)
//	requant:   dst[i] = byte(clamp(rne(clampf(float32(acc[i])*mult[i] + off[i], ±2^30)) + zp, qmin, qmax))
//
// rne is round half to even; clampf maps NaN to -2^30 (so NaN -> qmin).
// Multiplies and adds are rounded separately (never fused).
type quantImpl struct {
	path      Path
	quantize  func(dst []byte, src []float32, inv float32, zp, qmin, qmax int32)
	dequantU8 func(dst []float32, src []uint8, scale float32, zp int32)
	dequantS8 func(dst []float32, src []int8, scale float32, zp int32)
	requant   func(dst []byte, acc []int32, mult, off []float32, zp, qmin, qmax int32)
}

func quantImpls() []quantImpl {
	return append([]quantImpl{{Generic, quantizeGeneric, dequantU8Generic, dequantS8Generic, requantGeneric}}, asmQuant...)
}

// The float clamp keeps the float -> int32 conversion in range (the
// hardware gives 0x80000000 for out-of-range values, which would wrap).
const clampF = 0x1p30

// roundClamp is the shared tail of quantize and requantize.
func roundClamp(t float32, zp, qmin, qmax int32) byte {
	if !(t >= -clampF) { // also NaN
		t = -clampF
	}
	if t > clampF {
		t = clampF
	}
	q := int32(math.RoundToEven(float64(t))) + zp
	if q < qmin {
		q = qmin
	}
	if q > qmax {
		q = qmax
	}
	return byte(q)
}

func quantizeGeneric(dst []byte, src []float32, inv float32, zp, qmin, qmax int32) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = roundClamp(x*inv, zp, qmin, qmax)
	}
}

func dequantU8Generic(dst []float32, src []uint8, scale float32, zp int32) {
	dst = dst[:len(src)]
	for i, q := range src {
		dst[i] = float32(int32(q)-zp) * scale
	}
}

func dequantS8Generic(dst []float32, src []int8, scale float32, zp int32) {
	dst = dst[:len(src)]
	for i, q := range src {
		dst[i] = float32(int32(q)-zp) * scale
	}
}

func requantGeneric(dst []byte, acc []int32, mult, off []float32, zp, qmin, qmax int32) {
	dst = dst[:len(acc)]
	mult = mult[:len(acc)]
	off = off[:len(acc)]
	for i, a := range acc {
		// float32() forces the product to be rounded before the add, so
		// no platform fuses them into one FMA.
		dst[i] = roundClamp(float32(float32(a)*mult[i])+off[i], zp, qmin, qmax)
	}
}
