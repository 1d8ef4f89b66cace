package int8check_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/kernels"
)

// arith is the u8 x s8 arithmetic a reference models.
type arith int

const (
	// exactSums: every product summed exactly into int32 (VNNI's vpdpbusd, or any kernel when
	// activations stay below 128). pkg/kernels' QuantizedLinearRef and QuantizedConv2dRef.
	exactSums arith = iota
	// pairSat: the products of two neighbouring reduction elements (consecutive input features
	// of a linear; consecutive input channels at one kernel tap of a conv) are added into
	// int16 with saturation, then the pair sums into int32: vpmaddubsw + vpmaddwd, what
	// oneDNN's and fbgemm's x86 INT8 kernels do on CPUs without VNNI. The activations enter
	// raw (0..255); the input zero point is subtracted afterwards (exactly) as a compensation
	// term, and padded taps contribute nothing.
	pairSat
)

func (a arith) String() string {
	if a == pairSat {
		return "int16 pair saturation"
	}
	return "exact sums"
}

func sat16(v int32) int32 { return max(-32768, min(32767, v)) }

// pairSatLinearAcc is the pairSat accumulator of x (rows x k, u8) times w^T (w: n x k, s8
// with zero point 0): acc[r][c] = sum_j sat16(x[2j]w[2j] + x[2j+1]w[2j+1]) - xzp * sum_k w.
func pairSatLinearAcc(x []uint8, rows, k int, xzp int32, w []int8, n int) []int32 {
	acc := make([]int32, rows*n)
	for r := 0; r < rows; r++ {
		xr := x[r*k : (r+1)*k]
		for c := 0; c < n; c++ {
			wc := w[c*k : (c+1)*k]
			var s, ws int32
			for j := 0; j < k; j += 2 {
				p := int32(xr[j]) * int32(wc[j])
				ws += int32(wc[j])
				if j+1 < k {
					p += int32(xr[j+1]) * int32(wc[j+1])
					ws += int32(wc[j+1])
				}
				s += sat16(p)
			}
			acc[r*n+c] = s - xzp*ws
		}
	}
	return acc
}

// pairSatConvAcc is the pairSat accumulator of a conv on NCHW u8 input x: per output, for each
// kernel tap inside the input, input channels (2j, 2j+1) of the group form the saturating
// pairs. It returns the accumulators as [N][OH*OW][OC] (rows of channels, for
// kernels.RequantizeU8) and the output shape.
func pairSatConvAcc(x []uint8, shape [4]int, xzp int32, cv *kernels.QuantizedConv2d) ([]int32, [4]int) {
	nb, ci, h, w := shape[0], shape[1], shape[2], shape[3]
	groups := max(cv.Groups, 1)
	sh, sw := max(cv.Stride[0], 1), max(cv.Stride[1], 1)
	dh, dw := max(cv.Dilation[0], 1), max(cv.Dilation[1], 1)
	ph, pw := cv.Padding[0], cv.Padding[1]
	kh, kw := cv.KernelH, cv.KernelW
	oh := (h+2*ph-dh*(kh-1)-1)/sh + 1
	ow := (w+2*pw-dw*(kw-1)-1)/sw + 1
	cig, cog, oc := ci/groups, cv.OutChannels/groups, cv.OutChannels
	acc := make([]int32, nb*oh*ow*oc)
	for b := 0; b < nb; b++ {
		for o := 0; o < oc; o++ {
			g := o / cog
			wo := cv.Weight[o*cig*kh*kw : (o+1)*cig*kh*kw]
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					var s int32
					for ky := 0; ky < kh; ky++ {
						iy := oy*sh - ph + ky*dh
						for kx := 0; kx < kw; kx++ {
							ix := ox*sw - pw + kx*dw
							if iy < 0 || iy >= h || ix < 0 || ix >= w {
								continue
							}
							for c := 0; c < cig; c += 2 {
								var p, ws int32
								for cc := c; cc < min(c+2, cig); cc++ {
									xv := int32(x[((b*ci+g*cig+cc)*h+iy)*w+ix])
									wv := int32(wo[(cc*kh+ky)*kw+kx])
									p += xv * wv
									ws += wv
								}
								s += sat16(p) - xzp*ws
							}
						}
					}
					acc[((b*oh+oy)*ow+ox)*oc+o] = s
				}
			}
		}
	}
	return acc, [4]int{nb, oc, oh, ow}
}

// requant turns accumulators (rows of n channels) into quint8 as QuantizedLinearRef does.
func requant(acc []int32, n int, in kernels.Affine, scales []float64, bias []float32, relu bool, out kernels.Affine) ([]uint8, error) {
	mult := make([]float32, n)
	off := make([]float32, n)
	for c := 0; c < n; c++ {
		s := scales[0]
		if len(scales) > 1 {
			s = scales[c]
		}
		mult[c] = float32(in.Scale * s / out.Scale)
		if len(bias) != 0 {
			off[c] = float32(float64(bias[c]) / out.Scale)
		}
	}
	y := make([]uint8, len(acc))
	if err := kernels.RequantizeU8(y, acc, n, mult, off, out.ZeroPoint, relu); err != nil {
		return nil, err
	}
	return y, nil
}

// pairSatLinearRef is QuantizedLinearRef with pairSat arithmetic.
func pairSatLinearRef(x []uint8, rows int, in kernels.Affine, l *kernels.QuantizedLinear, out kernels.Affine) ([]uint8, error) {
	if err := symmetric(l.WeightZeroPoints); err != nil {
		return nil, err
	}
	if len(x) != rows*l.In || len(l.Weight) != l.Out*l.In {
		return nil, fmt.Errorf("pairSatLinearRef: %d inputs, %d weights for %d rows, %d x %d", len(x), len(l.Weight), rows, l.Out, l.In)
	}
	return requant(pairSatLinearAcc(x, rows, l.In, in.ZeroPoint, l.Weight, l.Out), l.Out, in, l.WeightScales, l.Bias, l.ReLU, out)
}

// pairSatConv2dRef is QuantizedConv2dRef with pairSat arithmetic (NCHW output).
func pairSatConv2dRef(x []uint8, shape [4]int, in kernels.Affine, cv *kernels.QuantizedConv2d, out kernels.Affine) ([]uint8, [4]int, error) {
	if err := symmetric(cv.WeightZeroPoints); err != nil {
		return nil, [4]int{}, err
	}
	if len(x) != shape[0]*shape[1]*shape[2]*shape[3] || shape[1] != cv.InChannels {
		return nil, [4]int{}, fmt.Errorf("pairSatConv2dRef: %d inputs for shape %v, layer in-channels %d", len(x), shape, cv.InChannels)
	}
	acc, os := pairSatConvAcc(x, shape, in.ZeroPoint, cv)
	flat, err := requant(acc, os[1], in, cv.WeightScales, cv.Bias, cv.ReLU, out)
	if err != nil {
		return nil, os, err
	}
	y := make([]uint8, len(flat))
	hw := os[2] * os[3]
	for b := 0; b < os[0]; b++ {
		for p := 0; p < hw; p++ {
			for o := 0; o < os[1]; o++ {
				y[(b*os[1]+o)*hw+p] = flat[(b*hw+p)*os[1]+o]
			}
		}
	}
	return y, os, nil
}

// symmetric fails on non-zero weight zero points, which the pairSat model does not cover
// (PyTorch's x86 engines quantize weights symmetrically).
func symmetric(zps []int32) error {
	for c, z := range zps {
		if z != 0 {
			return fmt.Errorf("weight channel %d has zero point %d: the saturation model needs symmetric weights", c, z)
		}
	}
	return nil
}

// TestPairSatModel: the saturation model equals exact math while activations stay below 128
// (what reduce_range guarantees), and clips a pair that overflows int16.
func TestPairSatModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, k, n = 3, 37, 5
	x := make([]uint8, rows*k)
	w := make([]int8, n*k)
	for i := range w {
		w[i] = int8(rng.IntN(256) - 128)
	}
	for i := range x {
		x[i] = uint8(rng.IntN(128))
	}
	in, out := kernels.Affine{Scale: 0.02, ZeroPoint: 60}, kernels.Affine{Scale: 0.5, ZeroPoint: 128}
	lin := kernels.QuantizedLinear{In: k, Out: n, Weight: w, WeightScales: []float64{0.01}, WeightZeroPoints: []int32{0}}
	exact, err := kernels.QuantizedLinearRef(x, rows, in, &lin, out)
	if err != nil {
		t.Fatal(err)
	}
	sat, err := pairSatLinearRef(x, rows, in, &lin, out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(exact, sat) {
		t.Fatalf("7-bit inputs: saturation model %v, exact %v", sat, exact)
	}
	cv := kernels.QuantizedConv2d{InChannels: 3, OutChannels: 2, KernelH: 3, KernelW: 3, Padding: [2]int{1, 1},
		Weight: w[:2*3*9], WeightScales: []float64{0.01, 0.02}, WeightZeroPoints: []int32{0, 0}}
	xs := [4]int{1, 3, 4, 5}
	ce, _, err := kernels.QuantizedConv2dRef(x[:60], xs, in, &cv, out)
	if err != nil {
		t.Fatal(err)
	}
	cs, _, err := pairSatConv2dRef(x[:60], xs, in, &cv, out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ce, cs) {
		t.Fatalf("7-bit conv inputs: saturation model %v, exact %v", cs, ce)
	}

	// 255*127 + 255*127 = 64770 clips to 32767; the unpaired third product is exact.
	acc := pairSatLinearAcc([]uint8{255, 255, 255}, 1, 3, 0, []int8{127, 127, 127}, 1)
	if want := int32(32767 + 255*127); acc[0] != want {
		t.Fatalf("saturating pair: acc %d, want %d", acc[0], want)
	}
	acc = pairSatLinearAcc([]uint8{255, 255}, 1, 2, 10, []int8{-128, -128}, 1)
	if want := int32(-32768 + 10*256); acc[0] != want {
		t.Fatalf("negative saturating pair with zero point 10: acc %d, want %d", acc[0], want)
	}
	if _, err := pairSatLinearRef(x, rows, in, &kernels.QuantizedLinear{In: k, Out: n, Weight: w,
		WeightScales: []float64{0.01}, WeightZeroPoints: []int32{3}}, out); err == nil {
		t.Fatal("asymmetric weights accepted")
	}
}
