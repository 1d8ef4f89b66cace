//go:build gc && !purego

package kernels

// asmBuilt says this build holds the assembly kernels.
const asmBuilt = true

// The stubs below take raw pointers and element counts; the wrappers that
// install them check lengths first, so an assembly kernel never reads or
// writes outside its slices. Each assembly loop handles the largest multiple
// of its vector width; the wrapper finishes the tail with the generic code.

// dotF32AVX2 returns sum x[i]*y[i] for i < n (n a multiple of 8) with four
// ymm accumulators.
//
//go:noescape
func dotF32AVX2(x, y *float32, n int) float32

// dotF32AVX512 is dotF32AVX2 with zmm registers (n a multiple of 16).
//
//go:noescape
func dotF32AVX512(x, y *float32, n int) float32

// gemmF32AVX2 is the 6x16 micro-kernel; see gemmF32Impl for the loop.
//
//go:noescape
func gemmF32AVX2(kc int, a, b, c *float32, ldc int)

// gemmF32AVX512 is the 12x32 micro-kernel; see gemmF32Impl for the loop.
//
//go:noescape
func gemmF32AVX512(kc int, a, b, c *float32, ldc int)

// dotU8S8AVX2 returns sum int32(x[i])*int32(y[i]) for i < n (n a multiple
// of 16), widening to int16 and using vpmaddwd.
//
//go:noescape
func dotU8S8AVX2(x *uint8, y *int8, n int) int32

// dotU8S8AVXVNNI is dotU8S8AVX2 with VEX vpdpbusd (n a multiple of 32).
//
//go:noescape
func dotU8S8AVXVNNI(x *uint8, y *int8, n int) int32

// dotU8S8AVX512 is dotU8S8AVX2 on zmm, AVX-512 BW (n a multiple of 32).
//
//go:noescape
func dotU8S8AVX512(x *uint8, y *int8, n int) int32

// dotU8S8AVX512VNNI uses zmm vpdpbusd (n a multiple of 64).
//
//go:noescape
func dotU8S8AVX512VNNI(x *uint8, y *int8, n int) int32

// gemmU8S8AVX2 is the 6x16 pair-format micro-kernel; see gemmU8S8Impl.
//
//go:noescape
func gemmU8S8AVX2(kg int, a, b *byte, c *int32, ldc int)

// gemmU8S8AVXVNNI is the 6x16 quad-format micro-kernel; see gemmU8S8Impl.
//
//go:noescape
func gemmU8S8AVXVNNI(kg int, a, b *byte, c *int32, ldc int)

// gemmU8S8AVX512 is the 12x32 pair-format micro-kernel; see gemmU8S8Impl.
//
//go:noescape
func gemmU8S8AVX512(kg int, a, b *byte, c *int32, ldc int)

// gemmU8S8AVX512VNNI is the 12x32 quad-format micro-kernel; see gemmU8S8Impl.
//
//go:noescape
func gemmU8S8AVX512VNNI(kg int, a, b *byte, c *int32, ldc int)

// quantizeAVX2 is quantizeGeneric for n a multiple of 8.
//
//go:noescape
func quantizeAVX2(dst *byte, src *float32, n int, inv float32, zp, qmin, qmax int32)

// requantAVX2 is requantGeneric for n a multiple of 8.
//
//go:noescape
func requantAVX2(dst *byte, acc *int32, mult, off *float32, n int, zp, qmin, qmax int32)

// dequantU8AVX2 is dequantU8Generic for n a multiple of 8.
//
//go:noescape
func dequantU8AVX2(dst *float32, src *uint8, n int, scale float32, zp int32)

// dequantS8AVX2 is dequantS8Generic for n a multiple of 8.
//
//go:noescape
func dequantS8AVX2(dst *float32, src *int8, n int, scale float32, zp int32)

// quantizeAVX512 is quantizeGeneric for n a multiple of 16.
//
//go:noescape
func quantizeAVX512(dst *byte, src *float32, n int, inv float32, zp, qmin, qmax int32)

// requantAVX512 is requantGeneric for n a multiple of 16.
//
//go:noescape
func requantAVX512(dst *byte, acc *int32, mult, off *float32, n int, zp, qmin, qmax int32)

// dequantU8AVX512 is dequantU8Generic for n a multiple of 16.
//
//go:noescape
func dequantU8AVX512(dst *float32, src *uint8, n int, scale float32, zp int32)

// dequantS8AVX512 is dequantS8Generic for n a multiple of 16.
//
//go:noescape
func dequantS8AVX512(dst *float32, src *int8, n int, scale float32, zp int32)

func wrapDotF32(width int, fn func(x, y *float32, n int) float32) func(x, y []float32) float32 {
	return func(x, y []float32) float32 {
		y = y[:len(x)]
		n := len(x) / width * width
		var s float32
		if n > 0 {
			s = fn(&x[0], &y[0], n)
		}
		return s + dotF32Generic(x[n:], y[n:])
	}
}

func wrapGemmF32(mr, nr int, fn func(kc int, a, b, c *float32, ldc int)) func(kc int, a, b, c []float32, ldc int) {
	return func(kc int, a, b, c []float32, ldc int) {
		if kc <= 0 {
			return
		}
		_, _, _ = a[kc*mr-1], b[kc*nr-1], c[(mr-1)*ldc+nr-1] // bounds, once
		fn(kc, &a[0], &b[0], &c[0], ldc)
	}
}

func wrapDotU8S8(width int, fn func(x *uint8, y *int8, n int) int32) func(x []uint8, y []int8) int32 {
	return func(x []uint8, y []int8) int32 {
		y = y[:len(x)]
		n := len(x) / width * width
		var s int32
		if n > 0 {
			s = fn(&x[0], &y[0], n)
		}
		return s + dotU8S8Generic(x[n:], y[n:])
	}
}

func wrapGemmU8S8(f packFormat, mr, nr int, fn func(kg int, a, b *byte, c *int32, ldc int)) func(kg int, a, b []byte, c []int32, ldc int) {
	gb := f.groupK() * f.elemBytes()
	return func(kg int, a, b []byte, c []int32, ldc int) {
		if kg <= 0 {
			return
		}
		_, _, _ = a[kg*mr*gb-1], b[kg*nr*gb-1], c[(mr-1)*ldc+nr-1]
		fn(kg, &a[0], &b[0], &c[0], ldc)
	}
}

type quantFns struct {
	width     int
	quantize  func(dst *byte, src *float32, n int, inv float32, zp, qmin, qmax int32)
	requant   func(dst *byte, acc *int32, mult, off *float32, n int, zp, qmin, qmax int32)
	dequantU8 func(dst *float32, src *uint8, n int, scale float32, zp int32)
	dequantS8 func(dst *float32, src *int8, n int, scale float32, zp int32)
}

func wrapQuant(p Path, q quantFns) quantImpl {
	w := q.width
	return quantImpl{
		path: p,
		quantize: func(dst []byte, src []float32, inv float32, zp, qmin, qmax int32) {
			dst = dst[:len(src)]
			n := len(src) / w * w
			if n > 0 {
				q.quantize(&dst[0], &src[0], n, inv, zp, qmin, qmax)
			}
			quantizeGeneric(dst[n:], src[n:], inv, zp, qmin, qmax)
		},
		dequantU8: func(dst []float32, src []uint8, scale float32, zp int32) {
			dst = dst[:len(src)]
			n := len(src) / w * w
			if n > 0 {
				q.dequantU8(&dst[0], &src[0], n, scale, zp)
			}
			dequantU8Generic(dst[n:], src[n:], scale, zp)
		},
		dequantS8: func(dst []float32, src []int8, scale float32, zp int32) {
			dst = dst[:len(src)]
			n := len(src) / w * w
			if n > 0 {
				q.dequantS8(&dst[0], &src[0], n, scale, zp)
			}
			dequantS8Generic(dst[n:], src[n:], scale, zp)
		},
		requant: func(dst []byte, acc []int32, mult, off []float32, zp, qmin, qmax int32) {
			dst, mult, off = dst[:len(acc)], mult[:len(acc)], off[:len(acc)]
			n := len(acc) / w * w
			if n > 0 {
				q.requant(&dst[0], &acc[0], &mult[0], &off[0], n, zp, qmin, qmax)
			}
			requantGeneric(dst[n:], acc[n:], mult[n:], off[n:], zp, qmin, qmax)
		},
	}
}

var (
	asmDotF32 = []dotF32Impl{
		{AVX2, wrapDotF32(8, dotF32AVX2)},
		{AVX512, wrapDotF32(16, dotF32AVX512)},
	}
	asmGemmF32 = []gemmF32Impl{
		{AVX2, 6, 16, wrapGemmF32(6, 16, gemmF32AVX2)},
		{AVX512, 12, 32, wrapGemmF32(12, 32, gemmF32AVX512)},
	}
	asmDotU8S8 = []dotU8S8Impl{
		{AVX2, wrapDotU8S8(16, dotU8S8AVX2)},
		{AVXVNNI, wrapDotU8S8(32, dotU8S8AVXVNNI)},
		{AVX512, wrapDotU8S8(32, dotU8S8AVX512)},
		{AVX512VNNI, wrapDotU8S8(64, dotU8S8AVX512VNNI)},
	}
	asmGemmU8S8 = []gemmU8S8Impl{
		{AVX2, 6, 16, packPair, wrapGemmU8S8(packPair, 6, 16, gemmU8S8AVX2)},
		{AVXVNNI, 6, 16, packQuad, wrapGemmU8S8(packQuad, 6, 16, gemmU8S8AVXVNNI)},
		{AVX512, 12, 32, packPair, wrapGemmU8S8(packPair, 12, 32, gemmU8S8AVX512)},
		{AVX512VNNI, 12, 32, packQuad, wrapGemmU8S8(packQuad, 12, 32, gemmU8S8AVX512VNNI)},
	}
	asmQuant = []quantImpl{
		wrapQuant(AVX2, quantFns{8, quantizeAVX2, requantAVX2, dequantU8AVX2, dequantS8AVX2}),
		wrapQuant(AVX512, quantFns{16, quantizeAVX512, requantAVX512, dequantU8AVX512, dequantS8AVX512}),
	}
)
