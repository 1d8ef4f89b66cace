package kernels

import (
	"fmt"
	"math"
)

// Affine is a per-tensor affine quantization: real = Scale * (q - ZeroPoint).
type Affine struct {
	Scale     float64 `json:"scale"`
	ZeroPoint int32   `json:"zero_point"`
}

// QuantizedLinear is a quantized Linear layer as PyTorch stores it
// (quantized::linear packed params, unpacked).
type QuantizedLinear struct {
	In, Out int
	// Weight is Out x In, row-major (PyTorch's layout), qint8.
	Weight []int8
	// WeightScales and WeightZeroPoints have one entry (per-tensor) or Out
	// entries (per-channel along the output axis).
	WeightScales     []float64
	WeightZeroPoints []int32
	// Bias is PyTorch's float bias (optional, Out entries); BiasInt32 is
	// an int32 bias in units of in.Scale*WeightScales[c] (optional). At
	// most one of the two.
	Bias      []float32
	BiasInt32 []int32
	// ReLU fuses a ReLU (quantized::linear_relu): outputs below the zero
	// point are raised to it.
	ReLU bool
}

// QuantizedLinearRef computes a quantized Linear layer's quint8 output for
// rows x In quint8 activations x, as fbgemm/oneDNN do:
//
//	acc[r][c] = sum_k (x[r][k] - in.ZeroPoint) * (W[c][k] - wzp[c])  (+ BiasInt32[c])
//	y[r][c]   = clamp(out.ZeroPoint + round(acc*in.Scale*ws[c]/out.Scale + Bias[c]/out.Scale), 0, 255)
//
// The sum is exact; the scaling is float32 with round-half-even (see
// RequantizeU8). Libraries that add the float bias before dividing by the
// output scale can differ by one quantization step on rounding ties.
func QuantizedLinearRef(x []uint8, rows int, in Affine, l *QuantizedLinear, out Affine) ([]uint8, error) {
	if l == nil {
		return nil, fmt.Errorf("kernels: QuantizedLinearRef: nil layer")
	}
	if rows < 0 || l.In <= 0 || l.Out <= 0 {
		return nil, fmt.Errorf("kernels: QuantizedLinearRef: rows %d, In %d, Out %d: need rows >= 0 and positive sizes", rows, l.In, l.Out)
	}
	if len(x) != rows*l.In {
		return nil, fmt.Errorf("kernels: QuantizedLinearRef: input has %d values, want rows*In = %d*%d", len(x), rows, l.In)
	}
	if len(l.Weight) != l.Out*l.In {
		return nil, fmt.Errorf("kernels: QuantizedLinearRef: weight has %d values, want Out*In = %d*%d", len(l.Weight), l.Out, l.In)
	}
	return qlinearCore("QuantizedLinearRef", x, rows, l.In, in, l.Weight, l.Out,
		l.WeightScales, l.WeightZeroPoints, l.Bias, l.BiasInt32, l.ReLU, out)
}

// qlinearCore is y = requant(A*W^T) for A rows x k (u8) and W n x k (s8).
func qlinearCore(op string, a []uint8, rows, k int, in Affine, w []int8, n int,
	wScales []float64, wZPs []int32, bias []float32, biasI []int32, relu bool, out Affine) ([]uint8, error) {
	if err := checkAffine(op, "input", in, 0, 255); err != nil {
		return nil, err
	}
	if err := checkAffine(op, "output", out, 0, 255); err != nil {
		return nil, err
	}
	if len(wScales) != 1 && len(wScales) != n {
		return nil, fmt.Errorf("kernels: %s: %d weight scales, want 1 (per-tensor) or %d (per-channel)", op, len(wScales), n)
	}
	if len(wZPs) != len(wScales) {
		return nil, fmt.Errorf("kernels: %s: %d weight zero points for %d scales; give one per scale", op, len(wZPs), len(wScales))
	}
	for c := range wScales {
		if err := checkAffine(op, fmt.Sprintf("weight channel %d", c), Affine{wScales[c], wZPs[c]}, -128, 127); err != nil {
			return nil, err
		}
	}
	if len(bias) != 0 && len(bias) != n || len(biasI) != 0 && len(biasI) != n {
		return nil, fmt.Errorf("kernels: %s: bias has %d (float) / %d (int32) entries, want 0 or %d", op, len(bias), len(biasI), n)
	}
	if len(bias) != 0 && len(biasI) != 0 {
		return nil, fmt.Errorf("kernels: %s: both a float and an int32 bias given; give one", op)
	}
	if k > 65536 {
		return nil, fmt.Errorf("kernels: %s: reduction length %d exceeds 65536; int32 accumulators could overflow", op, k)
	}
	ch := func(c int) int {
		if len(wScales) == 1 {
			return 0
		}
		return c
	}

	// The exact sum in plain loops: this is the reference libtorch's kernels are held to, so it
	// shares nothing with any of them. The zero points come out of the inner loop through the
	// row sums of x and the column sums of W:
	//
	//	sum (x-xzp)(w-wzp) = sum xw - wzp sum x - xzp sum w + k xzp wzp
	colSum := make([]int64, n)
	for c := range n {
		for _, v := range w[c*k : (c+1)*k] {
			colSum[c] += int64(v)
		}
	}
	acc := make([]int32, rows*n)
	xzp := int64(in.ZeroPoint)
	for r := 0; r < rows; r++ {
		xr := a[r*k : (r+1)*k]
		var rowSum int64
		for _, v := range xr {
			rowSum += int64(v)
		}
		for c := 0; c < n; c++ {
			wzp := int64(wZPs[ch(c)])
			v := dotU8S8(xr, w[c*k:(c+1)*k]) - wzp*rowSum - xzp*colSum[c] + int64(k)*xzp*wzp
			if len(biasI) != 0 {
				v += int64(biasI[c])
			}
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("kernels: %s: accumulator %d (row %d, channel %d) overflows int32, as it would in libtorch", op, v, r, c)
			}
			acc[r*n+c] = int32(v)
		}
	}
	mult := make([]float32, n)
	off := make([]float32, n)
	for c := 0; c < n; c++ {
		mult[c] = float32(in.Scale * wScales[ch(c)] / out.Scale)
		if len(bias) != 0 {
			off[c] = float32(float64(bias[c]) / out.Scale)
		}
	}
	y := make([]uint8, rows*n)
	if rows == 0 {
		return y, nil
	}
	if err := RequantizeU8(y, acc, n, mult, off, out.ZeroPoint, relu); err != nil {
		return nil, err
	}
	return y, nil
}

// dotU8S8 is sum x[i]*y[i] for len(x) <= 65536: four int32 partial sums of at most 16384
// products each, |x*y| <= 255*128, cannot overflow.
func dotU8S8(x []uint8, y []int8) int64 {
	y = y[:len(x)]
	var s0, s1, s2, s3 int32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += int32(x[i]) * int32(y[i])
		s1 += int32(x[i+1]) * int32(y[i+1])
		s2 += int32(x[i+2]) * int32(y[i+2])
		s3 += int32(x[i+3]) * int32(y[i+3])
	}
	for ; i < len(x); i++ {
		s0 += int32(x[i]) * int32(y[i])
	}
	return int64(s0) + int64(s1) + int64(s2) + int64(s3)
}

func checkAffine(op, what string, q Affine, qmin, qmax int32) error {
	if !(q.Scale > 0) || math.IsInf(q.Scale, 0) {
		return fmt.Errorf("kernels: %s: %s scale %g must be positive and finite", op, what, q.Scale)
	}
	if q.ZeroPoint < qmin || q.ZeroPoint > qmax {
		return fmt.Errorf("kernels: %s: %s zero point %d outside [%d, %d]", op, what, q.ZeroPoint, qmin, qmax)
	}
	return nil
}

// QuantizedConv2d is a quantized Conv2d layer (quantized::conv2d).
type QuantizedConv2d struct {
	InChannels, OutChannels int
	KernelH, KernelW        int
	// Stride, Padding and Dilation are (height, width); a zero stride or
	// dilation means 1.
	Stride, Padding, Dilation [2]int
	// Groups divides the channels; 0 means 1.
	Groups int
	// Weight is OutChannels x InChannels/Groups x KernelH x KernelW (qint8).
	Weight []int8
	// WeightScales, WeightZeroPoints, Bias, BiasInt32 and ReLU are as in
	// QuantizedLinear, per output channel.
	WeightScales     []float64
	WeightZeroPoints []int32
	Bias             []float32
	BiasInt32        []int32
	ReLU             bool
}

// QuantizedConv2dRef computes a quantized Conv2d's quint8 NCHW output for
// the NCHW quint8 input x of the given shape, with the same arithmetic as
// QuantizedLinearRef (padding holds the input zero point, i.e. real 0). It
// returns the output and its shape.
func QuantizedConv2dRef(x []uint8, shape [4]int, in Affine, cv *QuantizedConv2d, out Affine) ([]uint8, [4]int, error) {
	const op = "QuantizedConv2dRef"
	var zero [4]int
	if cv == nil {
		return nil, zero, fmt.Errorf("kernels: %s: nil layer", op)
	}
	g, err := cv.geometry(op, x, shape, in)
	if err != nil {
		return nil, zero, err
	}
	nb, ci, h, w := shape[0], shape[1], shape[2], shape[3]
	groups, cig, cog, k := g.groups, g.cig, g.cog, g.k
	sh, sw, dh, dw, ph, pw, kh, kw, oh, ow := g.sh, g.sw, g.dh, g.dw, g.ph, g.pw, g.kh, g.kw, g.oh, g.ow
	sub := func(c0 int) ([]float64, []int32, []float32, []int32) {
		s, z := cv.WeightScales, cv.WeightZeroPoints
		if len(s) != 1 {
			s, z = s[c0:c0+cog], z[c0:c0+cog]
		}
		var b []float32
		var bi []int32
		if len(cv.Bias) != 0 {
			b = cv.Bias[c0 : c0+cog]
		}
		if len(cv.BiasInt32) != 0 {
			bi = cv.BiasInt32[c0 : c0+cog]
		}
		return s, z, b, bi
	}

	y := make([]uint8, nb*cv.OutChannels*oh*ow)
	cols := make([]uint8, oh*ow*k)
	for b := 0; b < nb; b++ {
		for g := 0; g < groups; g++ {
			// im2col: row (oy, ox), column (c, ky, kx), matching the weight layout.
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					row := cols[(oy*ow+ox)*k:]
					for c := 0; c < cig; c++ {
						plane := x[((b*ci)+g*cig+c)*h*w:]
						for ky := 0; ky < kh; ky++ {
							iy := oy*sh - ph + ky*dh
							for kx := 0; kx < kw; kx++ {
								ix := ox*sw - pw + kx*dw
								v := uint8(in.ZeroPoint)
								if iy >= 0 && iy < h && ix >= 0 && ix < w {
									v = plane[iy*w+ix]
								}
								row[(c*kh+ky)*kw+kx] = v
							}
						}
					}
				}
			}
			s, z, bf, bi := sub(g * cog)
			res, err := qlinearCore(op, cols, oh*ow, k, in, cv.Weight[g*cog*k:(g+1)*cog*k], cog, s, z, bf, bi, cv.ReLU, out)
			if err != nil {
				return nil, zero, err
			}
			for oc := 0; oc < cog; oc++ {
				dst := y[((b*cv.OutChannels)+g*cog+oc)*oh*ow:]
				for p := 0; p < oh*ow; p++ {
					dst[p] = res[p*cog+oc]
				}
			}
		}
	}
	return y, [4]int{nb, cv.OutChannels, oh, ow}, nil
}

// convGeom is a convolution's geometry on one input shape: groups, channels per group, the
// reduction length, strides, dilations, padding, kernel and output sizes.
type convGeom struct {
	groups, cig, cog, k            int
	sh, sw, dh, dw, ph, pw, kh, kw int
	oh, ow                         int
}

// geometry checks cv and the input x of the given shape against each other and returns the
// convolution's geometry, or says what does not fit.
func (cv *QuantizedConv2d) geometry(op string, x []uint8, shape [4]int, in Affine) (convGeom, error) {
	var g convGeom
	nb, ci, h, w := shape[0], shape[1], shape[2], shape[3]
	if nb < 0 || ci <= 0 || h <= 0 || w <= 0 {
		return g, fmt.Errorf("kernels: %s: input shape %v: want N >= 0 and positive C, H, W", op, shape)
	}
	if len(x) != nb*ci*h*w {
		return g, fmt.Errorf("kernels: %s: input has %d values, shape %v needs %d", op, len(x), shape, nb*ci*h*w)
	}
	groups := max(cv.Groups, 1)
	if ci != cv.InChannels || cv.OutChannels <= 0 || ci%groups != 0 || cv.OutChannels%groups != 0 {
		return g, fmt.Errorf("kernels: %s: input channels %d, layer in/out %d/%d, groups %d: channels must match and divide by groups",
			op, ci, cv.InChannels, cv.OutChannels, groups)
	}
	sh, sw := max(cv.Stride[0], 1), max(cv.Stride[1], 1)
	dh, dw := max(cv.Dilation[0], 1), max(cv.Dilation[1], 1)
	ph, pw := cv.Padding[0], cv.Padding[1]
	kh, kw := cv.KernelH, cv.KernelW
	if kh <= 0 || kw <= 0 || ph < 0 || pw < 0 || cv.Stride[0] < 0 || cv.Stride[1] < 0 || cv.Dilation[0] < 0 || cv.Dilation[1] < 0 {
		return g, fmt.Errorf("kernels: %s: kernel %dx%d, stride %v, padding %v, dilation %v: sizes must be positive, the rest not negative",
			op, kh, kw, cv.Stride, cv.Padding, cv.Dilation)
	}
	oh := (h+2*ph-dh*(kh-1)-1)/sh + 1
	ow := (w+2*pw-dw*(kw-1)-1)/sw + 1
	if oh <= 0 || ow <= 0 {
		return g, fmt.Errorf("kernels: %s: kernel %dx%d (dilation %dx%d) is larger than the padded %dx%d input", op, kh, kw, dh, dw, h+2*ph, w+2*pw)
	}
	cig, cog := ci/groups, cv.OutChannels/groups
	k := cig * kh * kw
	if len(cv.Weight) != cv.OutChannels*k {
		return g, fmt.Errorf("kernels: %s: weight has %d values, want %d x %d x %d x %d", op, len(cv.Weight), cv.OutChannels, cig, kh, kw)
	}
	if len(cv.WeightScales) != 1 && len(cv.WeightScales) != cv.OutChannels {
		return g, fmt.Errorf("kernels: %s: %d weight scales, want 1 or %d", op, len(cv.WeightScales), cv.OutChannels)
	}
	if len(cv.WeightZeroPoints) != len(cv.WeightScales) {
		return g, fmt.Errorf("kernels: %s: %d weight zero points for %d scales; give one per scale", op, len(cv.WeightZeroPoints), len(cv.WeightScales))
	}
	if len(cv.Bias) != 0 && len(cv.Bias) != cv.OutChannels || len(cv.BiasInt32) != 0 && len(cv.BiasInt32) != cv.OutChannels {
		return g, fmt.Errorf("kernels: %s: bias has %d (float) / %d (int32) entries, want 0 or %d", op, len(cv.Bias), len(cv.BiasInt32), cv.OutChannels)
	}
	if in.ZeroPoint < 0 || in.ZeroPoint > 255 {
		return g, fmt.Errorf("kernels: %s: input zero point %d outside [0, 255]", op, in.ZeroPoint)
	}
	return convGeom{groups: groups, cig: cig, cog: cog, k: k, sh: sh, sw: sw, dh: dh, dw: dw, ph: ph, pw: pw,
		kh: kh, kw: kw, oh: oh, ow: ow}, nil
}

// RequantizeU8 turns int32 accumulators into quint8 outputs per channel:
// acc is row-major with cols columns (channels), and for column j
//
//	dst = clamp(zeroPoint + roundHalfEven(float32(acc)*mult[j] + off[j]), qmin, 255)
//
// with the product and the sum each rounded to float32 (never fused), and the
// float clamped to ±2^30 before rounding. mult[j] is typically
// x_scale*w_scale[j]/y_scale and off[j] bias[j]/y_scale. qmin is 0, or
// zeroPoint when relu is set (a fused ReLU).
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
	for i, a := range acc {
		j := i % cols
		// float32() forces the product to be rounded before the add, so
		// no platform fuses them into one FMA.
		dst[i] = roundClamp(float32(float32(a)*mult[j])+off[j], zeroPoint, qmin, 255)
	}
	return nil
}

// clampF keeps the float -> int32 conversion in range (the hardware gives
// 0x80000000 for out-of-range values, which would wrap).
const clampF = 0x1p30

// roundClamp rounds t half to even, adds zp and saturates to [qmin, qmax];
// NaN maps to qmin.
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
