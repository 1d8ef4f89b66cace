package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	fmt.Fprintf(os.Stderr, "kernels: features %+v, assembly built %v, usable paths %v\n", Detected(), asmBuilt, Paths())
	for _, c := range Chosen() {
		fmt.Fprintf(os.Stderr, "kernels: %-10s -> %s %s\n", c.Kernel, c.Path, c.Shape)
	}
	os.Exit(m.Run())
}

const guard = 67 // guard band length, odd on purpose

// guarded returns a slice of n elements at offset off inside a buffer whose
// other elements hold sentinel, and a check that the sentinel is intact.
func guarded[T comparable](t *testing.T, n, off int, sentinel T) ([]T, func()) {
	t.Helper()
	buf := make([]T, guard+off+n+guard)
	for i := range buf {
		buf[i] = sentinel
	}
	s := buf[guard+off : guard+off+n : guard+off+n]
	return s, func() {
		t.Helper()
		for i := range buf {
			if i >= guard+off && i < guard+off+n {
				continue
			}
			if buf[i] != sentinel {
				t.Fatalf("guard element %d (data at %d..%d) changed to %v", i, guard+off, guard+off+n, buf[i])
			}
		}
	}
}

func usable[T any](impls []T, path func(T) Path) []T {
	var out []T
	for _, i := range impls {
		if detected.supports(path(i)) {
			out = append(out, i)
		}
	}
	return out
}

// lengths 0..257 and a few long ones.
func testLengths() []int {
	var ns []int
	for n := 0; n <= 257; n++ {
		ns = append(ns, n)
	}
	return append(ns, 511, 1000, 4099)
}

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

func TestDotU8S8AllPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, impl := range usable(dotU8S8Impls(), func(i dotU8S8Impl) Path { return i.path }) {
		t.Run(string(impl.path), func(t *testing.T) {
			for _, n := range testLengths() {
				for off := 0; off < 4; off++ {
					for _, mode := range []string{"random", "extreme", "max", "min"} {
						x := randU8(r, n, mode == "extreme")
						y := randS8(r, n, mode == "extreme")
						for i := range x {
							switch mode {
							case "max": // every pair 255*127: vpmaddubsw would saturate
								x[i], y[i] = 255, 127
							case "min":
								x[i], y[i] = 255, -128
							}
						}
						xs, _ := guarded(t, n, off, uint8(0xA5))
						ys, _ := guarded(t, n, (off+1)%4, int8(-91))
						copy(xs, x)
						copy(ys, y)
						var want int64
						for i := range x {
							want += int64(x[i]) * int64(y[i])
						}
						if got := impl.fn(xs, ys); int64(got) != want || got != dotU8S8Generic(xs, ys) {
							t.Fatalf("n=%d off=%d %s: got %d, want %d", n, off, mode, got, want)
						}
					}
				}
			}
		})
	}
}

// dotBound is the classic forward error bound for a float32 dot product in
// any summation order: n*eps*sum|x*y| (plus slack for the products).
func dotBound(x, y []float32) float64 {
	var s float64
	for i := range x {
		s += math.Abs(float64(x[i]) * float64(y[i]))
	}
	return float64(len(x)+2) * 0x1p-24 * s * 1.01
}

func TestDotF32AllPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, impl := range usable(dotF32Impls(), func(i dotF32Impl) Path { return i.path }) {
		t.Run(string(impl.path), func(t *testing.T) {
			for _, n := range testLengths() {
				for off := 0; off < 4; off++ {
					xs, _ := guarded(t, n, off, float32(-7))
					ys, _ := guarded(t, n, 3-off, float32(9))
					var exact float64
					for i := range xs {
						xs[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(20)-10)))
						ys[i] = float32(r.NormFloat64())
						exact += float64(xs[i]) * float64(ys[i])
					}
					got := impl.fn(xs, ys)
					ref := dotF32Generic(xs, ys)
					b := dotBound(xs, ys)
					if math.Abs(float64(got)-exact) > b || math.Abs(float64(got)-float64(ref)) > 2*b {
						t.Fatalf("n=%d off=%d: got %g, generic %g, exact %g, bound %g", n, off, got, ref, exact, b)
					}
				}
			}
			// Exactly representable sums must come out exact on every path.
			for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 100, 257} {
				x := make([]float32, n)
				y := make([]float32, n)
				for i := range x {
					x[i], y[i] = float32(i%5), float32(i%3-1)
				}
				if got, want := impl.fn(x, y), dotF32Generic(x, y); got != want {
					t.Fatalf("integer-valued n=%d: got %g, want %g", n, got, want)
				}
			}
		})
	}
}

// microGuard lays out a c tile of mr rows with leading dimension ldc inside
// a guarded buffer; everything outside the mr x nr tile (including the
// ldc-nr gap between rows) must stay untouched.
func checkTileGuards[T comparable](t *testing.T, buf []T, start, mr, nr, ldc int, sentinel T) {
	t.Helper()
	for i, v := range buf {
		rel := i - start
		inTile := rel >= 0 && rel/ldc < mr && rel%ldc < nr
		if !inTile && v != sentinel {
			t.Fatalf("element %d outside the %dx%d tile (ldc %d) changed to %v", i, mr, nr, ldc, v)
		}
	}
}

func TestGemmF32MicroAllPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, impl := range usable(gemmF32Impls(), func(i gemmF32Impl) Path { return i.path }) {
		t.Run(fmt.Sprintf("%s_%dx%d", impl.path, impl.mr, impl.nr), func(t *testing.T) {
			mr, nr := impl.mr, impl.nr
			for _, kc := range []int{0, 1, 2, 3, 5, 16, 63, 256, 257} {
				for _, ldc := range []int{nr, nr + 1, nr + 13} {
					for off := 0; off < 3; off++ {
						a, _ := guarded(t, kc*mr, off, float32(1))
						b, _ := guarded(t, kc*nr, 2-off, float32(2))
						for i := range a {
							a[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20)))
						}
						for i := range b {
							b[i] = float32(r.NormFloat64())
						}
						const sentinel = float32(-12345.5)
						n := (mr-1)*ldc + nr
						buf := make([]float32, guard+off+n+guard)
						for i := range buf {
							buf[i] = sentinel
						}
						c := buf[guard+off : guard+off+n]
						want := make([]float32, n)
						for i := 0; i < mr; i++ {
							for j := 0; j < nr; j++ {
								c[i*ldc+j] = float32(r.NormFloat64())
							}
						}
						copy(want, c)
						impl.fn(kc, a, b, c, ldc)
						gemmF32MicroGeneric(mr, nr, kc, a, b, want, ldc)
						for i := 0; i < mr; i++ {
							for j := 0; j < nr; j++ {
								if g, w := c[i*ldc+j], want[i*ldc+j]; g != w {
									t.Fatalf("kc=%d ldc=%d: c[%d][%d] = %g (%08x), generic %g (%08x)",
										kc, ldc, i, j, g, math.Float32bits(g), w, math.Float32bits(w))
								}
							}
						}
						checkTileGuards(t, buf, guard+off, mr, nr, ldc, sentinel)
					}
				}
			}
		})
	}
}

func TestGemmU8S8MicroAllPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	impls := usable(gemmU8S8Impls(), func(i gemmU8S8Impl) Path { return i.path })
	// Also run the generic model on the pair format, which the assembly's
	// pair kernels are compared with.
	for _, impl := range impls {
		t.Run(fmt.Sprintf("%s_%dx%d", impl.path, impl.mr, impl.nr), func(t *testing.T) {
			mr, nr, f := impl.mr, impl.nr, impl.format
			gb := f.groupK() * f.elemBytes()
			for _, kg := range []int{0, 1, 2, 3, 7, 64, 129} {
				for _, extreme := range []bool{false, true} {
					for off := 0; off < 3; off++ {
						ldc := nr + off*5
						a, _ := guarded(t, kg*mr*gb, off, byte(0x5a))
						b, _ := guarded(t, kg*nr*gb, 2-off, byte(0xc3))
						fillPacked(r, f, a, true, extreme)
						fillPacked(r, f, b, false, extreme)
						const sentinel = int32(-0x5eadbeef)
						n := (mr-1)*ldc + nr
						buf := make([]int32, guard+off+n+guard)
						for i := range buf {
							buf[i] = sentinel
						}
						c := buf[guard+off : guard+off+n]
						for i := 0; i < mr; i++ {
							for j := 0; j < nr; j++ {
								c[i*ldc+j] = int32(r.Uint32() >> 4)
							}
						}
						want := append([]int32(nil), c...)
						impl.fn(kg, a, b, c, ldc)
						gemmU8S8MicroGeneric(f, mr, nr, kg, a, b, want, ldc)
						for i := 0; i < mr; i++ {
							for j := 0; j < nr; j++ {
								if c[i*ldc+j] != want[i*ldc+j] {
									t.Fatalf("kg=%d extreme=%v: c[%d][%d] = %d, generic %d", kg, extreme, i, j, c[i*ldc+j], want[i*ldc+j])
								}
							}
						}
						checkTileGuards(t, buf, guard+off, mr, nr, ldc, sentinel)
					}
				}
			}
		})
	}
}

// fillPacked fills a packed panel with u8 (activations) or s8 (weights)
// values in format f.
func fillPacked(r *rand.Rand, f packFormat, p []byte, unsigned, extreme bool) {
	n := len(p) / f.elemBytes()
	var vals []int16
	if unsigned {
		for _, v := range randU8(r, n, extreme) {
			vals = append(vals, int16(v))
		}
	} else {
		for _, v := range randS8(r, n, extreme) {
			vals = append(vals, int16(v))
		}
	}
	for i, v := range vals {
		if f == packQuad {
			p[i] = byte(v)
		} else {
			binary.LittleEndian.PutUint16(p[2*i:], uint16(v))
		}
	}
}

func TestFMA32(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	exact := func(a, b, c float32) float32 {
		e := new(big.Float).SetPrec(2000).SetFloat64(float64(a))
		e.Mul(e, new(big.Float).SetPrec(2000).SetFloat64(float64(b)))
		e.Add(e, new(big.Float).SetPrec(2000).SetFloat64(float64(c)))
		f, _ := e.Float32() // round half to even
		return f
	}
	cases := [][3]float32{
		{1, 1, 0},
		{0x1p-149, 0.5, 0},             // subnormal tie
		{1 + 0x1p-23, 1 + 0x1p-23, -1}, // exact small result
		// a*b = 1 + 2^-11 + 2^-24 is a float32 midpoint; c = ±2^-80 is lost
		// when math.FMA rounds to float64, but decides the float32 result.
		{1 + 0x1p-12, 1 + 0x1p-12, 0x1p-80},
		{1 + 0x1p-12, 1 + 0x1p-12, -0x1p-80},
		{3, 0x1p127, 0}, // overflow to +Inf
	}
	for i := 0; i < 200000; i++ {
		a := math.Float32frombits(r.Uint32())
		b := math.Float32frombits(r.Uint32())
		c := math.Float32frombits(r.Uint32())
		if i%2 == 0 { // operands of similar magnitude, where ties happen
			a = float32(1 + float64(r.IntN(1<<12))*0x1p-12)
			b = float32(1 + float64(r.IntN(1<<12))*0x1p-12)
			c = float32(math.Copysign(math.Exp2(-float64(60+r.IntN(60))), r.NormFloat64()))
		}
		cases = append(cases, [3]float32{a, b, c})
	}
	for _, tc := range cases {
		a, b, c := tc[0], tc[1], tc[2]
		if math.IsNaN(float64(a)) || math.IsNaN(float64(b)) || math.IsNaN(float64(c)) ||
			math.IsInf(float64(a), 0) || math.IsInf(float64(b), 0) || math.IsInf(float64(c), 0) {
			continue
		}
		got, want := fma32(a, b, c), exact(a, b, c)
		if got != want && !(got == 0 && want == 0) {
			t.Fatalf("fma32(%g, %g, %g) = %g, exact %g", a, b, c, got, want)
		}
	}
}
