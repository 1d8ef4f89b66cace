package kernels

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// specialFloats are the inputs where quantization is easy to get wrong:
// ties, signed zeros, range limits, NaN and infinities.
var specialFloats = []float32{
	0, float32(math.Copysign(0, -1)), 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, 127.5, 128.5, -127.5, -128.5, -129.5,
	254.5, 255.5, 256, -1, 1e9, -1e9, 0x1p30, -0x1p30, 0x1p31, 3e38, -3e38,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
	0.49999997, 1e-45,
}

func quantInputs(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		switch r.IntN(4) {
		case 0:
			s[i] = specialFloats[r.IntN(len(specialFloats))]
		case 1: // exact halves: ties after scaling by a power of two
			s[i] = float32(r.IntN(1200)-600) / 2
		default:
			s[i] = float32(r.NormFloat64() * 200)
		}
	}
	return s
}

func TestQuantizeAllPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	params := []struct {
		inv            float32
		zp, qmin, qmax int32
	}{
		{1, 0, 0, 255}, {1, 128, 0, 255}, {0.5, 3, 0, 255}, {3.7, 255, 0, 255},
		{1, 0, -128, 127}, {2, -128, -128, 127}, {0.25, 127, -128, 127}, {1, 10, 10, 255},
	}
	for _, impl := range usable(quantImpls(), func(i quantImpl) Path { return i.path }) {
		t.Run(string(impl.path), func(t *testing.T) {
			for _, n := range testLengths() {
				for off := 0; off < 4; off++ {
					p := params[(n+off)%len(params)]
					src := quantInputs(r, n)
					dst, check := guarded(t, n, off, byte(0x77))
					impl.quantize(dst, src, p.inv, p.zp, p.qmin, p.qmax)
					check()
					want := make([]byte, n)
					quantizeGeneric(want, src, p.inv, p.zp, p.qmin, p.qmax)
					for i := range want {
						if dst[i] != want[i] {
							t.Fatalf("n=%d off=%d %+v: quantize(%g) = %d, generic %d", n, off, p, src[i], dst[i], want[i])
						}
					}
				}
			}
		})
	}
}

func TestDequantizeAllPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, impl := range usable(quantImpls(), func(i quantImpl) Path { return i.path }) {
		t.Run(string(impl.path), func(t *testing.T) {
			for _, n := range testLengths() {
				for off := 0; off < 4; off++ {
					scale := float32(r.ExpFloat64() * 0.1)
					u := randU8(r, n, n%2 == 0)
					s := randS8(r, n, n%2 == 0)
					zpU, zpS := int32(r.IntN(256)), int32(r.IntN(256)-128)
					du, checkU := guarded(t, n, off, float32(-3))
					ds, checkS := guarded(t, n, 3-off, float32(-4))
					impl.dequantU8(du, u, scale, zpU)
					impl.dequantS8(ds, s, scale, zpS)
					checkU()
					checkS()
					for i := 0; i < n; i++ {
						if w := float32(float64(int32(u[i])-zpU) * float64(scale)); du[i] != w {
							t.Fatalf("dequantU8(%d, zp %d, scale %g) = %g, want %g", u[i], zpU, scale, du[i], w)
						}
						if w := float32(float64(int32(s[i])-zpS) * float64(scale)); ds[i] != w {
							t.Fatalf("dequantS8(%d, zp %d, scale %g) = %g, want %g", s[i], zpS, scale, ds[i], w)
						}
					}
				}
			}
		})
	}
}

func TestRequantizeAllPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, impl := range usable(quantImpls(), func(i quantImpl) Path { return i.path }) {
		t.Run(string(impl.path), func(t *testing.T) {
			for _, n := range testLengths() {
				for off := 0; off < 4; off++ {
					acc := make([]int32, n)
					mult := make([]float32, n)
					offs := make([]float32, n)
					for i := range acc {
						switch r.IntN(5) {
						case 0:
							acc[i] = []int32{math.MinInt32, math.MaxInt32, 0, 1, -1, 1 << 24, 1<<24 + 1}[r.IntN(7)]
						case 1: // ties: acc*0.5 lands on .5
							acc[i] = int32(r.IntN(1000) - 500)
							mult[i], offs[i] = 0.5, 0
							continue
						default:
							acc[i] = int32(r.NormFloat64() * 1e5)
						}
						mult[i] = float32(r.ExpFloat64() * 1e-3)
						offs[i] = float32(r.NormFloat64() * 10)
					}
					zp := int32(r.IntN(256))
					qmin := int32(0)
					if n%3 == 0 {
						qmin = zp // fused ReLU
					}
					dst, check := guarded(t, n, off, byte(0x99))
					impl.requant(dst, acc, mult, offs, zp, qmin, 255)
					check()
					want := make([]byte, n)
					requantGeneric(want, acc, mult, offs, zp, qmin, 255)
					for i := range want {
						if dst[i] != want[i] {
							t.Fatalf("n=%d: requant(%d * %g + %g, zp %d) = %d, generic %d", n, acc[i], mult[i], offs[i], zp, dst[i], want[i])
						}
					}
				}
			}
		})
	}
}

// TestQuantizeSemantics pins the generic definition (which every path
// matches) to PyTorch's: round half to even, zero point added after
// rounding, saturation at the type's limits.
func TestQuantizeSemantics(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		x     float32
		scale float32
		zp    int32
		u8    uint8
		s8    int8
	}{
		{0, 1, 0, 0, 0},
		{0.5, 1, 0, 0, 0}, // tie to even 0
		{1.5, 1, 0, 2, 2}, // tie to even 2
		{2.5, 1, 0, 2, 2}, // tie to even 2
		{-0.5, 1, 10, 10, 10},
		{-1.5, 1, 10, 8, 8},
		{127.5, 1, 0, 128, 127}, // s8 saturates
		{-128.5, 1, 0, 0, -128},
		{-129, 1, 0, 0, -128},
		{300, 1, 0, 255, 127},
		{255.5, 1, 0, 255, 127},
		{1, 0.1, 5, 15, 15},
		{float32(math.Inf(1)), 1, 0, 255, 127},
		{float32(math.Inf(-1)), 1, 0, 0, -128},
		{nan, 1, 7, 0, -128},
		{3e38, 1e-3, 0, 255, 127},
		{-7, 2, 100, 96, 96}, // -3.5 -> -4
	}
	for _, tc := range tests {
		u := make([]uint8, 1)
		s := make([]int8, 1)
		if err := QuantizeU8(u, []float32{tc.x}, tc.scale, tc.zp); err != nil {
			t.Fatal(err)
		}
		if err := QuantizeS8(s, []float32{tc.x}, tc.scale, tc.zp); err != nil {
			t.Fatal(err)
		}
		if u[0] != tc.u8 || s[0] != tc.s8 {
			t.Errorf("quantize(%g, scale %g, zp %d) = u8 %d, s8 %d; want %d, %d", tc.x, tc.scale, tc.zp, u[0], s[0], tc.u8, tc.s8)
		}
	}
}

func TestQuantErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"length", QuantizeU8(make([]uint8, 2), make([]float32, 3), 1, 0), "equal lengths"},
		{"scale0", QuantizeU8(nil, nil, 0, 0), "scale 0"},
		{"scaleNaN", QuantizeS8(nil, nil, float32(math.NaN()), 0), "positive and finite"},
		{"scaleInf", DequantizeU8(nil, nil, float32(math.Inf(1)), 0), "positive and finite"},
		{"zpU8", QuantizeU8(nil, nil, 1, 256), "zero point 256 outside [0, 255]"},
		{"zpS8", DequantizeS8(nil, nil, 1, -129), "zero point -129 outside [-128, 127]"},
		{"deqLen", DequantizeS8(make([]float32, 1), nil, 1, 0), "equal lengths"},
		{"reqCols", RequantizeU8(nil, make([]int32, 5), 2, nil, nil, 0, false), "rows of 2 columns"},
		{"reqMult", RequantizeU8(make([]uint8, 4), make([]int32, 4), 2, []float32{1}, []float32{0, 0}, 0, false), "2 multipliers"},
		{"reqZP", RequantizeU8(make([]uint8, 2), make([]int32, 2), 2, []float32{1, 1}, []float32{0, 0}, -1, false), "zero point -1"},
	}
	for _, tc := range tests {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
}

func TestRequantizeReLU(t *testing.T) {
	acc := []int32{-100, 0, 100, -3, 1000, 7}
	dst := make([]uint8, 6)
	if err := RequantizeU8(dst, acc, 3, []float32{0.5, 0.5, 0.5}, []float32{0, 0, 0}, 10, true); err != nil {
		t.Fatal(err)
	}
	want := []uint8{10, 10, 60, 10, 255, 14} // -1.5 -> -2 -> clamp to zp; 3.5 -> 4
	for i := range want {
		if dst[i] != want[i] {
			t.Fatalf("RequantizeU8 relu = %v, want %v", dst, want)
		}
	}
}
