package kernels

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// requantRef is the scalar definition QuantizedLinearRef documents, from an
// exact int64 accumulator.
func requantRef(acc int64, in Affine, ws float64, bias float32, hasBias bool, out Affine, relu bool) uint8 {
	mult := float32(in.Scale * ws / out.Scale)
	var off float32
	if hasBias {
		off = float32(float64(bias) / out.Scale)
	}
	qmin := int32(0)
	if relu {
		qmin = out.ZeroPoint
	}
	return roundClamp(float32(float32(acc)*mult)+off, out.ZeroPoint, qmin, 255)
}

// ideal is the real-number answer before rounding, in output units.
func ideal(acc int64, in Affine, ws float64, bias float64, out Affine) float64 {
	return float64(acc)*in.Scale*ws/out.Scale + bias/out.Scale + float64(out.ZeroPoint)
}

type qcase struct {
	name    string
	perChan bool
	wzp     bool
	bias    string // "", "float", "int"
	relu    bool
	in, out Affine
}

var qcases = []qcase{
	{"per-tensor", false, false, "", false, Affine{0.02, 128}, Affine{0.05, 64}},
	{"per-channel+float-bias", true, false, "float", false, Affine{0.013, 3}, Affine{0.07, 120}},
	{"per-channel+wzp+int-bias", true, true, "int", false, Affine{0.1, 0}, Affine{0.3, 255}},
	{"relu", true, false, "float", true, Affine{0.02, 200}, Affine{0.04, 17}},
	{"saturating", false, true, "float", false, Affine{1, 128}, Affine{0.001, 128}},
}

func makeWeights(r *rand.Rand, tc qcase, n, k int) ([]int8, []float64, []int32, []float32, []int32) {
	w := randS8(r, n*k, false)
	nch := 1
	if tc.perChan {
		nch = n
	}
	ws := make([]float64, nch)
	wz := make([]int32, nch)
	for c := range ws {
		ws[c] = 0.001 + r.Float64()*0.01
		if tc.wzp {
			wz[c] = int32(r.IntN(21) - 10)
		}
	}
	var bf []float32
	var bi []int32
	switch tc.bias {
	case "float":
		bf = make([]float32, n)
		for c := range bf {
			bf[c] = float32(r.NormFloat64())
		}
	case "int":
		bi = make([]int32, n)
		for c := range bi {
			bi[c] = int32(r.IntN(20001) - 10000)
		}
	}
	return w, ws, wz, bf, bi
}

func TestQuantizedLinearRef(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, tc := range qcases {
		t.Run(tc.name, func(t *testing.T) {
			for _, dims := range [][3]int{{1, 1, 1}, {3, 7, 5}, {8, 33, 17}, {2, 300, 10}, {0, 4, 3}} {
				rows, k, n := dims[0], dims[1], dims[2]
				w, ws, wz, bf, bi := makeWeights(r, tc, n, k)
				l := &QuantizedLinear{In: k, Out: n, Weight: w, WeightScales: ws, WeightZeroPoints: wz, Bias: bf, BiasInt32: bi, ReLU: tc.relu}
				x := randU8(r, rows*k, false)
				y, err := QuantizedLinearRef(x, rows, tc.in, l, tc.out)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if len(y) != rows*n {
					t.Fatalf("%s: %d outputs, want %d", tc.name, len(y), rows*n)
				}
				for rr := 0; rr < rows; rr++ {
					for c := 0; c < n; c++ {
						ch := 0
						if tc.perChan {
							ch = c
						}
						var acc int64
						for kk := 0; kk < k; kk++ {
							acc += (int64(x[rr*k+kk]) - int64(tc.in.ZeroPoint)) * (int64(w[c*k+kk]) - int64(wz[ch]))
						}
						var b float64
						if bi != nil {
							acc += int64(bi[c])
						}
						if bf != nil {
							b = float64(bf[c])
						}
						want := requantRef(acc, tc.in, ws[ch], float32(b), bf != nil, tc.out, tc.relu)
						got := y[rr*n+c]
						if got != want {
							t.Fatalf("%s %v: y[%d][%d] = %d, reference %d", tc.name, dims, rr, c, got, want)
						}
						// Within one step of the real-number answer.
						lo := 0.0
						if tc.relu {
							lo = float64(tc.out.ZeroPoint)
						}
						id := math.Min(math.Max(ideal(acc, tc.in, ws[ch], b, tc.out), lo), 255)
						if math.Abs(float64(got)-id) > 1 {
							t.Fatalf("%s: y = %d, real-number answer %g", tc.name, got, id)
						}
					}
				}
			}
		})
	}
}

// convNaive is a direct 7-loop quantized convolution.
func convNaive(x []uint8, shape [4]int, in Affine, cv *QuantizedConv2d, out Affine) ([]uint8, [4]int) {
	nb, ci, h, w := shape[0], shape[1], shape[2], shape[3]
	g := max(cv.Groups, 1)
	sh, sw := max(cv.Stride[0], 1), max(cv.Stride[1], 1)
	dh, dw := max(cv.Dilation[0], 1), max(cv.Dilation[1], 1)
	oh := (h+2*cv.Padding[0]-dh*(cv.KernelH-1)-1)/sh + 1
	ow := (w+2*cv.Padding[1]-dw*(cv.KernelW-1)-1)/sw + 1
	cig, cog := ci/g, cv.OutChannels/g
	y := make([]uint8, nb*cv.OutChannels*oh*ow)
	for b := 0; b < nb; b++ {
		for oc := 0; oc < cv.OutChannels; oc++ {
			grp := oc / cog
			ch := 0
			if len(cv.WeightScales) > 1 {
				ch = oc
			}
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					var acc int64
					for c := 0; c < cig; c++ {
						for ky := 0; ky < cv.KernelH; ky++ {
							for kx := 0; kx < cv.KernelW; kx++ {
								iy, ix := oy*sh-cv.Padding[0]+ky*dh, ox*sw-cv.Padding[1]+kx*dw
								xv := int64(in.ZeroPoint)
								if iy >= 0 && iy < h && ix >= 0 && ix < w {
									xv = int64(x[((b*ci+grp*cig+c)*h+iy)*w+ix])
								}
								wv := int64(cv.Weight[((oc*cig+c)*cv.KernelH+ky)*cv.KernelW+kx])
								acc += (xv - int64(in.ZeroPoint)) * (wv - int64(cv.WeightZeroPoints[ch]))
							}
						}
					}
					var bias float32
					if cv.BiasInt32 != nil {
						acc += int64(cv.BiasInt32[oc])
					}
					if cv.Bias != nil {
						bias = cv.Bias[oc]
					}
					y[((b*cv.OutChannels+oc)*oh+oy)*ow+ox] = requantRef(acc, in, cv.WeightScales[ch], bias, cv.Bias != nil, out, cv.ReLU)
				}
			}
		}
	}
	return y, [4]int{nb, cv.OutChannels, oh, ow}
}

func TestQuantizedConv2dRef(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	geoms := []struct {
		name             string
		shape            [4]int
		oc, kh, kw, g    int
		stride, pad, dil [2]int
	}{
		{"3x3", [4]int{2, 3, 8, 7}, 5, 3, 3, 1, [2]int{1, 1}, [2]int{1, 1}, [2]int{1, 1}},
		{"stride2-pad2", [4]int{1, 4, 9, 9}, 6, 3, 3, 1, [2]int{2, 2}, [2]int{2, 2}, [2]int{1, 1}},
		{"dilated-rect", [4]int{1, 2, 10, 11}, 3, 2, 3, 1, [2]int{1, 2}, [2]int{0, 1}, [2]int{2, 3}},
		{"groups", [4]int{1, 6, 6, 6}, 4, 3, 3, 2, [2]int{1, 1}, [2]int{1, 1}, [2]int{1, 1}},
		{"depthwise", [4]int{2, 8, 5, 5}, 8, 3, 3, 8, [2]int{1, 1}, [2]int{1, 1}, [2]int{1, 1}},
		{"1x1", [4]int{1, 16, 4, 4}, 32, 1, 1, 1, [2]int{0, 0}, [2]int{0, 0}, [2]int{0, 0}},
	}
	for _, gm := range geoms {
		for _, tc := range qcases {
			cig := gm.shape[1] / gm.g
			w, ws, wz, bf, bi := makeWeights(r, tc, gm.oc, cig*gm.kh*gm.kw)
			cv := &QuantizedConv2d{InChannels: gm.shape[1], OutChannels: gm.oc, KernelH: gm.kh, KernelW: gm.kw,
				Stride: gm.stride, Padding: gm.pad, Dilation: gm.dil, Groups: gm.g,
				Weight: w, WeightScales: ws, WeightZeroPoints: wz, Bias: bf, BiasInt32: bi, ReLU: tc.relu}
			x := randU8(r, gm.shape[0]*gm.shape[1]*gm.shape[2]*gm.shape[3], false)
			got, gs, err := QuantizedConv2dRef(x, gm.shape, tc.in, cv, tc.out)
			if err != nil {
				t.Fatalf("%s %s: %v", gm.name, tc.name, err)
			}
			want, ws2 := convNaive(x, gm.shape, tc.in, cv, tc.out)
			if gs != ws2 {
				t.Fatalf("%s %s: shape %v, want %v", gm.name, tc.name, gs, ws2)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s %s: y[%d] = %d, direct convolution %d", gm.name, tc.name, i, got[i], want[i])
				}
			}
		}
	}
}

func TestQuantizedRefErrors(t *testing.T) {
	l := &QuantizedLinear{In: 2, Out: 2, Weight: make([]int8, 4), WeightScales: []float64{1}, WeightZeroPoints: []int32{0}}
	cv := &QuantizedConv2d{InChannels: 2, OutChannels: 2, KernelH: 3, KernelW: 3, Weight: make([]int8, 36), WeightScales: []float64{1}, WeightZeroPoints: []int32{0}}
	ok := Affine{1, 0}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", errOf(QuantizedLinearRef(nil, 0, ok, nil, ok)), "nil layer"},
		{"xlen", errOf(QuantizedLinearRef(make([]uint8, 3), 1, ok, l, ok)), "input has 3 values"},
		{"scale", errOf(QuantizedLinearRef(make([]uint8, 2), 1, Affine{0, 0}, l, ok)), "input scale 0"},
		{"outzp", errOf(QuantizedLinearRef(make([]uint8, 2), 1, ok, l, Affine{1, 300})), "output zero point 300"},
		{"wscales", errOf(QuantizedLinearRef(make([]uint8, 2), 1, ok, &QuantizedLinear{In: 2, Out: 2, Weight: make([]int8, 4), WeightScales: []float64{1, 1, 1}, WeightZeroPoints: []int32{0, 0, 0}}, ok)), "3 weight scales"},
		{"bothbias", errOf(QuantizedLinearRef(make([]uint8, 2), 1, ok, &QuantizedLinear{In: 2, Out: 2, Weight: make([]int8, 4), WeightScales: []float64{1}, WeightZeroPoints: []int32{0}, Bias: []float32{0, 0}, BiasInt32: []int32{0, 0}}, ok)), "both a float and an int32 bias"},
		{"overflow", errOf(QuantizedLinearRef([]uint8{255, 255}, 1, ok, &QuantizedLinear{In: 2, Out: 1, Weight: []int8{-128, -128}, WeightScales: []float64{1}, WeightZeroPoints: []int32{0}, BiasInt32: []int32{math.MinInt32}}, ok)), "overflows int32"},
		{"convshape", errConv(QuantizedConv2dRef(make([]uint8, 10), [4]int{1, 2, 2, 2}, ok, cv, ok)), "input has 10 values"},
		{"convsmall", errConv(QuantizedConv2dRef(make([]uint8, 8), [4]int{1, 2, 2, 2}, ok, cv, ok)), "larger than the padded"},
		{"convgroups", errConv(QuantizedConv2dRef(make([]uint8, 18), [4]int{1, 2, 3, 3}, ok, &QuantizedConv2d{InChannels: 2, OutChannels: 2, KernelH: 1, KernelW: 1, Groups: 3}, ok)), "divide by groups"},
	}
	for _, tc := range tests {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
}

func errOf(_ []uint8, err error) error             { return err }
func errConv(_ []uint8, _ [4]int, err error) error { return err }

func randU8(r *rand.Rand, n int, extreme bool) []uint8 {
	s := make([]uint8, n)
	for i := range s {
		if extreme {
			s[i] = []uint8{0, 1, 127, 128, 254, 255}[r.IntN(6)]
		} else {
			s[i] = uint8(r.UintN(256))
		}
	}
	return s
}

func randS8(r *rand.Rand, n int, extreme bool) []int8 {
	s := make([]int8, n)
	for i := range s {
		if extreme {
			s[i] = []int8{-128, -127, -1, 0, 1, 126, 127}[r.IntN(7)]
		} else {
			s[i] = int8(r.UintN(256))
		}
	}
	return s
}

// RequantizeU8 rounds half to even after the offset, saturates, maps NaN and
// the float extremes to the range's ends, and raises outputs to the zero point
// under a fused ReLU.
func TestRequantizeU8(t *testing.T) {
	for _, tc := range []struct {
		acc       []int32
		mult, off []float32
		zp        int32
		relu      bool
		want      []uint8
	}{
		{[]int32{-100, 0, 100, -3, 1000, 7}, []float32{0.5, 0.5, 0.5}, []float32{0, 0, 0}, 10, true,
			[]uint8{10, 10, 60, 10, 255, 14}}, // -1.5 -> -2 -> clamp to zp; 3.5 -> 4
		{[]int32{1, 3, 5, -1, -3, 0}, []float32{0.5, 0.5, 0.5}, []float32{0, 0, 0}, 128, false,
			[]uint8{128, 130, 130, 128, 126, 128}}, // ties go to even
		{[]int32{math.MaxInt32, math.MinInt32, 7}, []float32{1, 1, float32(math.NaN())}, []float32{0, 0, 0}, 3, false,
			[]uint8{255, 0, 0}},
		{[]int32{2, 2}, []float32{1, 1}, []float32{0.5, -0.25}, 0, false, []uint8{2, 2}}, // 2.5 -> 2, 1.75 -> 2
	} {
		dst := make([]uint8, len(tc.acc))
		if err := RequantizeU8(dst, tc.acc, len(tc.mult), tc.mult, tc.off, tc.zp, tc.relu); err != nil {
			t.Fatal(err)
		}
		if string(dst) != string(tc.want) {
			t.Errorf("RequantizeU8(%v, mult %v, off %v, zp %d, relu %v) = %v, want %v", tc.acc, tc.mult, tc.off, tc.zp, tc.relu, dst, tc.want)
		}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{RequantizeU8(nil, make([]int32, 5), 2, nil, nil, 0, false), "rows of 2 columns"},
		{RequantizeU8(make([]uint8, 4), make([]int32, 4), 2, []float32{1}, []float32{0, 0}, 0, false), "2 multipliers"},
		{RequantizeU8(make([]uint8, 2), make([]int32, 2), 2, []float32{1, 1}, []float32{0, 0}, -1, false), "zero point -1"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", tc.err, tc.want)
		}
	}
}
