package kernels

import (
	"fmt"
	"math"
)

// DotF32 returns the sum of x[i]*y[i]. The summation order depends on the
// path (see the package comment).
func DotF32(x, y []float32) (float32, error) {
	if len(x) != len(y) {
		return 0, fmt.Errorf("kernels: DotF32 lengths differ (x %d, y %d); pass equal-length slices", len(x), len(y))
	}
	return active.Load().dotF32.fn(x, y), nil
}

// DotU8S8 returns the exact sum of int32(x[i])*int32(y[i]), wrapping
// modulo 2^32 (which needs more than 65792 elements).
func DotU8S8(x []uint8, y []int8) (int32, error) {
	if len(x) != len(y) {
		return 0, fmt.Errorf("kernels: DotU8S8 lengths differ (x %d, y %d); pass equal-length slices", len(x), len(y))
	}
	return active.Load().dotU8S8.fn(x, y), nil
}

// checkMatrix reports whether a rows x cols row-major matrix with leading
// dimension ld fits in length elements.
func checkMatrix(op, name string, rows, cols, ld, length int) error {
	if rows < 0 || cols < 0 {
		return fmt.Errorf("kernels: %s: %s is %dx%d; dimensions must not be negative", op, name, rows, cols)
	}
	if ld < max(cols, 1) {
		return fmt.Errorf("kernels: %s: %s leading dimension %d is less than its %d columns", op, name, ld, cols)
	}
	if rows > 0 && cols > 0 && (rows-1)*ld+cols > length {
		return fmt.Errorf("kernels: %s: %s (%dx%d, leading dimension %d) needs %d elements, slice has %d",
			op, name, rows, cols, ld, (rows-1)*ld+cols, length)
	}
	return nil
}

// gemmKC is the k-block: packed panels of the widest kernel stay in L1/L2.
const gemmKC = 256

// GemmF32 computes C = A*B for row-major A (m x k, leading dimension lda),
// B (k x n, ldb) and C (m x n, ldc), with the register-blocked micro-kernel
// of the current path. Each element of C is a sum of FMA chains over blocks
// of 256 k values.
func GemmF32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) error {
	for _, e := range []error{
		checkMatrix("GemmF32", "A", m, k, lda, len(a)),
		checkMatrix("GemmF32", "B", k, n, ldb, len(b)),
		checkMatrix("GemmF32", "C", m, n, ldc, len(c)),
	} {
		if e != nil {
			return e
		}
	}
	ker := active.Load().gemmF32
	mr, nr := ker.mr, ker.nr
	for i := 0; i < m; i++ {
		clear(c[i*ldc : i*ldc+n])
	}
	if m == 0 || n == 0 || k == 0 {
		return nil
	}
	np := (n + nr - 1) / nr * nr
	bp := make([]float32, gemmKC*np)
	ap := make([]float32, gemmKC*mr)
	tile := make([]float32, mr*nr)
	for k0 := 0; k0 < k; k0 += gemmKC {
		kc := min(gemmKC, k-k0)
		// Pack B: for each nr-wide panel, kc rows of nr values (zero-padded).
		for j0 := 0; j0 < n; j0 += nr {
			p := bp[j0*kc : (j0+nr)*kc]
			for kk := 0; kk < kc; kk++ {
				row := b[(k0+kk)*ldb:]
				for j := 0; j < nr; j++ {
					if j0+j < n {
						p[kk*nr+j] = row[j0+j]
					} else {
						p[kk*nr+j] = 0
					}
				}
			}
		}
		for i0 := 0; i0 < m; i0 += mr {
			for kk := 0; kk < kc; kk++ {
				for i := 0; i < mr; i++ {
					if i0+i < m {
						ap[kk*mr+i] = a[(i0+i)*lda+k0+kk]
					} else {
						ap[kk*mr+i] = 0
					}
				}
			}
			for j0 := 0; j0 < n; j0 += nr {
				p := bp[j0*kc : (j0+nr)*kc]
				if i0+mr <= m && j0+nr <= n {
					ker.fn(kc, ap, p, c[i0*ldc+j0:], ldc)
					continue
				}
				// Edge tile: run on a full scratch tile, copy back the valid part.
				rows, cols := min(mr, m-i0), min(nr, n-j0)
				clear(tile)
				for i := 0; i < rows; i++ {
					copy(tile[i*nr:i*nr+cols], c[(i0+i)*ldc+j0:])
				}
				ker.fn(kc, ap, p, tile, nr)
				for i := 0; i < rows; i++ {
					copy(c[(i0+i)*ldc+j0:(i0+i)*ldc+j0+cols], tile[i*nr:])
				}
			}
		}
	}
	return nil
}

// GemmU8S8 computes C = A*B exactly in int32 for row-major u8 A (m x k,
// lda), s8 B (k x n, ldb) and int32 C (m x n, ldc). k must be at most 65536
// so no sum can overflow.
func GemmU8S8(m, n, k int, a []uint8, lda int, b []int8, ldb int, c []int32, ldc int) error {
	for _, e := range []error{
		checkMatrix("GemmU8S8", "A", m, k, lda, len(a)),
		checkMatrix("GemmU8S8", "B", k, n, ldb, len(b)),
		checkMatrix("GemmU8S8", "C", m, n, ldc, len(c)),
	} {
		if e != nil {
			return e
		}
	}
	if k > 65536 {
		return fmt.Errorf("kernels: GemmU8S8: k=%d exceeds 65536, where int32 sums could overflow; split k", k)
	}
	ker := active.Load().gemmU8S8
	mr, nr, f := ker.mr, ker.nr, ker.format
	g, e := f.groupK(), f.elemBytes()
	for i := 0; i < m; i++ {
		clear(c[i*ldc : i*ldc+n])
	}
	if m == 0 || n == 0 || k == 0 {
		return nil
	}
	kgMax := gemmKC / g
	np := (n + nr - 1) / nr * nr
	bp := make([]byte, kgMax*np*g*e)
	ap := make([]byte, kgMax*mr*g*e)
	tile := make([]int32, mr*nr)
	put := func(dst []byte, idx int, v int16) {
		if e == 1 {
			dst[idx] = byte(v)
		} else {
			dst[2*idx] = byte(v)
			dst[2*idx+1] = byte(uint16(v) >> 8)
		}
	}
	for k0 := 0; k0 < k; k0 += gemmKC {
		kc := min(gemmKC, k-k0)
		kg := (kc + g - 1) / g
		for j0 := 0; j0 < n; j0 += nr {
			p := bp[j0*kg*g*e : (j0+nr)*kg*g*e]
			for q := 0; q < kg; q++ {
				for j := 0; j < nr; j++ {
					for t := 0; t < g; t++ {
						kk := q*g + t
						var v int16
						if j0+j < n && kk < kc {
							v = int16(b[(k0+kk)*ldb+j0+j])
						}
						put(p, (q*nr+j)*g+t, v)
					}
				}
			}
		}
		for i0 := 0; i0 < m; i0 += mr {
			for q := 0; q < kg; q++ {
				for i := 0; i < mr; i++ {
					for t := 0; t < g; t++ {
						kk := q*g + t
						var v int16
						if i0+i < m && kk < kc {
							v = int16(a[(i0+i)*lda+k0+kk])
						}
						put(ap, (q*mr+i)*g+t, v)
					}
				}
			}
			for j0 := 0; j0 < n; j0 += nr {
				p := bp[j0*kg*g*e : (j0+nr)*kg*g*e]
				if i0+mr <= m && j0+nr <= n {
					ker.fn(kg, ap, p, c[i0*ldc+j0:], ldc)
					continue
				}
				rows, cols := min(mr, m-i0), min(nr, n-j0)
				clear(tile)
				for i := 0; i < rows; i++ {
					copy(tile[i*nr:i*nr+cols], c[(i0+i)*ldc+j0:])
				}
				ker.fn(kg, ap, p, tile, nr)
				for i := 0; i < rows; i++ {
					copy(c[(i0+i)*ldc+j0:(i0+i)*ldc+j0+cols], tile[i*nr:])
				}
			}
		}
	}
	return nil
}

// checkQuant validates a scale and a zero point for the range [qmin, qmax].
func checkQuant(op string, scale float32, zp, qmin, qmax int32) error {
	if !(scale > 0) || math.IsInf(float64(scale), 0) {
		return fmt.Errorf("kernels: %s: scale %g must be positive and finite", op, scale)
	}
	if zp < qmin || zp > qmax {
		return fmt.Errorf("kernels: %s: zero point %d outside [%d, %d]", op, zp, qmin, qmax)
	}
	return nil
}

// QuantizeU8 sets dst[i] = clamp(zeroPoint + roundHalfEven(src[i] * (1/scale)),
// 0, 255) as PyTorch's quantize_per_tensor does for quint8 (it also
// multiplies by the float32 reciprocal of the scale). NaN maps to 0.
func QuantizeU8(dst []uint8, src []float32, scale float32, zeroPoint int32) error {
	if len(dst) != len(src) {
		return fmt.Errorf("kernels: QuantizeU8: dst has %d elements, src %d; pass equal lengths", len(dst), len(src))
	}
	if err := checkQuant("QuantizeU8", scale, zeroPoint, 0, 255); err != nil {
		return err
	}
	active.Load().quant.quantize(dst, src, 1/scale, zeroPoint, 0, 255)
	return nil
}

// QuantizeS8 is QuantizeU8 for qint8: the range is [-128, 127] and NaN maps
// to -128.
func QuantizeS8(dst []int8, src []float32, scale float32, zeroPoint int32) error {
	if len(dst) != len(src) {
		return fmt.Errorf("kernels: QuantizeS8: dst has %d elements, src %d; pass equal lengths", len(dst), len(src))
	}
	if err := checkQuant("QuantizeS8", scale, zeroPoint, -128, 127); err != nil {
		return err
	}
	active.Load().quant.quantize(int8Bytes(dst), src, 1/scale, zeroPoint, -128, 127)
	return nil
}

// DequantizeU8 sets dst[i] = float32(src[i] - zeroPoint) * scale: the
// integer difference is exact, so the result is the correctly rounded
// product (PyTorch's vectorized path may fuse it differently by one ulp).
func DequantizeU8(dst []float32, src []uint8, scale float32, zeroPoint int32) error {
	if len(dst) != len(src) {
		return fmt.Errorf("kernels: DequantizeU8: dst has %d elements, src %d; pass equal lengths", len(dst), len(src))
	}
	if err := checkQuant("DequantizeU8", scale, zeroPoint, 0, 255); err != nil {
		return err
	}
	active.Load().quant.dequantU8(dst, src, scale, zeroPoint)
	return nil
}

// DequantizeS8 is DequantizeU8 for qint8.
func DequantizeS8(dst []float32, src []int8, scale float32, zeroPoint int32) error {
	if len(dst) != len(src) {
		return fmt.Errorf("kernels: DequantizeS8: dst has %d elements, src %d; pass equal lengths", len(dst), len(src))
	}
	if err := checkQuant("DequantizeS8", scale, zeroPoint, -128, 127); err != nil {
		return err
	}
	active.Load().quant.dequantS8(dst, src, scale, zeroPoint)
	return nil
}

// RequantizeU8 turns int32 accumulators into quint8 outputs per channel:
// acc is row-major with cols columns (channels), and for column j
//
//	dst = clamp(zeroPoint + roundHalfEven(float32(acc)*mult[j] + off[j]), qmin, 255)
//
// with the product and the sum each rounded to float32. mult[j] is
// typically x_scale*w_scale[j]/y_scale and off[j] bias[j]/y_scale. qmin is
// 0, or zeroPoint when relu is set (a fused ReLU).
func RequantizeU8(dst []uint8, acc []int32, cols int, mult, off []float32, zeroPoint int32, relu bool) error {
	if cols <= 0 || len(acc)%cols != 0 {
		return fmt.Errorf("kernels: RequantizeU8: %d accumulators do not split into rows of %d columns", len(acc), cols)
	}
	if len(dst) != len(acc) || len(mult) != cols || len(off) != cols {
		return fmt.Errorf("kernels: RequantizeU8: dst %d, acc %d, mult %d, off %d: want len(dst)=len(acc) and %d multipliers and offsets",
			len(dst), len(acc), len(mult), len(off), cols)
	}
	if zeroPoint < 0 || zeroPoint > 255 {
		return fmt.Errorf("kernels: RequantizeU8: zero point %d outside [0, 255]", zeroPoint)
	}
	qmin := int32(0)
	if relu {
		qmin = zeroPoint
	}
	fn := active.Load().quant.requant
	for r := 0; r < len(acc); r += cols {
		fn(dst[r:r+cols], acc[r:r+cols], mult, off, zeroPoint, qmin, 255)
	}
	return nil
}
