package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// forEachPath runs f under every usable path limit and restores the default.
func forEachPath(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer func() {
		if err := SetPath(Best()); err != nil {
			t.Fatal(err)
		}
	}()
	for _, p := range Paths() {
		if err := SetPath(p); err != nil {
			t.Fatal(err)
		}
		t.Run(string(p), f)
	}
}

func TestSetPath(t *testing.T) {
	defer SetPath(Best())
	if err := SetPath("sse9"); err == nil || !strings.Contains(err.Error(), `unknown path "sse9"`) {
		t.Fatalf("SetPath(sse9) = %v, want unknown path error", err)
	}
	for _, p := range pathOrder {
		err := SetPath(p)
		if detected.supports(p) != (err == nil) {
			t.Fatalf("SetPath(%s) = %v, supported %v", p, err, detected.supports(p))
		}
		if err != nil {
			continue
		}
		if Limit() != p {
			t.Fatalf("Limit() = %s after SetPath(%s)", Limit(), p)
		}
		for _, c := range Chosen() {
			if c.Path.rank() > p.rank() || !detected.supports(c.Path) {
				t.Fatalf("under limit %s, %s uses %s", p, c.Kernel, c.Path)
			}
		}
	}
	if err := SetPath(Generic); err != nil {
		t.Fatal(err)
	}
	for _, c := range Chosen() {
		if c.Path != Generic {
			t.Fatalf("SetPath(generic): %s still uses %s", c.Kernel, c.Path)
		}
	}
}

func TestGemmU8S8(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	shapes := [][3]int{{0, 5, 3}, {5, 0, 3}, {4, 4, 0}, {1, 1, 1}, {6, 16, 4}, {12, 32, 8}, {7, 17, 5}, {13, 33, 255}, {25, 70, 257}, {3, 9, 600}, {30, 5, 1031}}
	forEachPath(t, func(t *testing.T) {
		for _, sh := range shapes {
			m, n, k := sh[0], sh[1], sh[2]
			lda, ldb, ldc := k+3, n+1, n+5
			a := randU8(r, max(m*lda, 1), k%2 == 0)
			b := randS8(r, max(k*ldb, 1), k%2 == 0)
			const sentinel = int32(0x3badf00d)
			cbuf := make([]int32, 2*guard+m*ldc)
			for i := range cbuf {
				cbuf[i] = sentinel
			}
			c := cbuf[guard : guard+m*ldc]
			if err := GemmU8S8(m, n, k, a, lda, b, ldb, c, ldc); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var want int32
					for kk := 0; kk < k; kk++ {
						want += int32(a[i*lda+kk]) * int32(b[kk*ldb+j])
					}
					if c[i*ldc+j] != want {
						t.Fatalf("%dx%dx%d: C[%d][%d] = %d, want %d", m, n, k, i, j, c[i*ldc+j], want)
					}
				}
			}
			checkTileGuards(t, cbuf, guard, m, n, ldc, sentinel)
		}
	})
}

func TestGemmF32(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	shapes := [][3]int{{0, 5, 3}, {4, 4, 0}, {1, 1, 1}, {6, 16, 4}, {12, 32, 8}, {7, 17, 5}, {13, 33, 255}, {25, 70, 257}, {3, 9, 600}}
	forEachPath(t, func(t *testing.T) {
		for _, sh := range shapes {
			m, n, k := sh[0], sh[1], sh[2]
			lda, ldb, ldc := k+1, n+2, n+3
			a := make([]float32, max(m*lda, 1))
			b := make([]float32, max(k*ldb, 1))
			for i := range a {
				a[i] = float32(r.NormFloat64())
			}
			for i := range b {
				b[i] = float32(r.NormFloat64())
			}
			const sentinel = float32(777)
			cbuf := make([]float32, 2*guard+m*ldc)
			for i := range cbuf {
				cbuf[i] = sentinel
			}
			c := cbuf[guard : guard+m*ldc]
			if err := GemmF32(m, n, k, a, lda, b, ldb, c, ldc); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var want, abs float64
					for kk := 0; kk < k; kk++ {
						p := float64(a[i*lda+kk]) * float64(b[kk*ldb+j])
						want += p
						abs += math.Abs(p)
					}
					if d := math.Abs(float64(c[i*ldc+j]) - want); d > float64(k+2)*0x1p-24*abs+1e-30 {
						t.Fatalf("%dx%dx%d: C[%d][%d] = %g, want %g (error %g)", m, n, k, i, j, c[i*ldc+j], want, d)
					}
				}
			}
			checkTileGuards(t, cbuf, guard, m, n, ldc, sentinel)
		}
	})
}

func TestGemmErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"negative", GemmF32(-1, 2, 2, nil, 2, nil, 2, nil, 2), "must not be negative"},
		{"lda", GemmF32(2, 2, 3, make([]float32, 6), 2, make([]float32, 6), 2, make([]float32, 4), 2), "A leading dimension 2 is less than its 3 columns"},
		{"shortB", GemmU8S8(2, 2, 3, make([]uint8, 6), 3, make([]int8, 5), 2, make([]int32, 4), 2), "B (3x2, leading dimension 2) needs 6 elements, slice has 5"},
		{"bigK", GemmU8S8(1, 1, 65537, make([]uint8, 65537), 65537, make([]int8, 65537), 1, make([]int32, 1), 1), "exceeds 65536"},
		{"dotLen", func() error { _, err := DotF32(make([]float32, 2), nil); return err }(), "lengths differ"},
		{"dotU8Len", func() error { _, err := DotU8S8(nil, make([]int8, 1)); return err }(), "lengths differ"},
	}
	for _, tc := range tests {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
}

func TestDotPublic(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		x := []uint8{255, 255, 0, 1, 128}
		y := []int8{127, -128, 5, -1, 1}
		got, err := DotU8S8(x, y)
		if want := int32(255*127 - 255*128 - 1 + 128); err != nil || got != want {
			t.Fatalf("DotU8S8 = %d, %v; want %d", got, err, want)
		}
		f, err := DotF32([]float32{1, 2, 3}, []float32{4, 5, 6})
		if err != nil || f != 32 {
			t.Fatalf("DotF32 = %g, %v; want 32", f, err)
		}
	})
}

func TestChosenNames(t *testing.T) {
	names := map[string]bool{}
	for _, c := range Chosen() {
		names[c.Kernel] = true
	}
	for _, want := range []string{"DotF32", "GemmF32", "DotU8S8", "GemmU8S8", "Quantize", "Dequantize", "Requantize"} {
		if !names[want] {
			t.Errorf("Chosen() lacks %s: %v", want, Chosen())
		}
	}
	_ = fmt.Sprint(Chosen())
}
