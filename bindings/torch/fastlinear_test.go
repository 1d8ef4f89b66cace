package torch_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/bindings/torch/internal/kerneltest"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// randFloats are n uniform values in [-1, 1).
func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.Float64()*2 - 1)
	}
	return v
}

func newTensor(t testing.TB, data []float32, shape ...int64) *torch.Tensor {
	t.Helper()
	x, err := torch.NewTensor(data, shape)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// linearOn runs torch.Linear on an inference thread with threads intra-op threads.
func linearOn(threads int, x, w, b *torch.Tensor, relu bool, k kerneltest.Kernel) (y *torch.Tensor, err error) {
	torch.Do(func() {
		if err = torch.SetNumThreadsOnThisThread(threads); err != nil {
			return
		}
		y, err = kerneltest.Linear(x, w, b, relu, k)
	})
	return y, err
}

// closeTo fails unless got and want have one shape and every element within tol (NaN matching
// NaN).
func closeTo(t *testing.T, what string, got, want *torch.Tensor, tol float64) {
	t.Helper()
	if got.DType() != want.DType() || !slices.Equal(got.Shape(), want.Shape()) {
		t.Fatalf("%s: %s %v, ATen gives %s %v", what, got.DType(), got.Shape(), want.DType(), want.Shape())
	}
	g, err := got.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	w, err := want.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	for i := range w {
		gn, wn := math.IsNaN(float64(g[i])), math.IsNaN(float64(w[i]))
		if gn != wn || (!gn && math.Abs(float64(g[i])-float64(w[i])) > tol) {
			t.Fatalf("%s: element %d of %d is %v, ATen gives %v", what, i, len(w), g[i], w[i])
		}
	}
}

// TestFastLinearKernelsMatchATen runs each kernel in turn over row counts on both sides of the
// tiles' heights (6 and 8), depths from 1 to 300 and widths on both sides of the 16-float halves
// and 32-float panels, with relu and bias on and off, against at::linear (+ relu).
func TestFastLinearKernelsMatchATen(t *testing.T) {
	ms := []int64{1, 2, 3, 5, 6, 7, 8, 9, 13, 16, 17, 24, 40}
	ks := []int64{1, 3, 17, 128, 300}
	ns := []int64{1, 5, 8, 15, 16, 17, 31, 32, 33, 100, 128, 384, 400}
	if testing.Short() {
		ms, ks = []int64{1, 7, 16, 17}, []int64{3, 128}
	}
	threads := min(2, torch.AvailableCPUs())
	r := rand.New(rand.NewPCG(1, 2))
	kernels := []kerneltest.Kernel{kerneltest.Fast, kerneltest.AVX2, kerneltest.AVX512}
	ran := map[kerneltest.Kernel]int{}
	i := 0
	for _, m := range ms {
		for _, k := range ks {
			for _, n := range ns {
				i++
				relu, bias := i%2 == 0, i%3 != 0
				what := fmt.Sprintf("M %d K %d N %d, relu %v, bias %v", m, k, n, relu, bias)
				x := newTensor(t, randFloats(r, int(m*k)), m, k)
				w := newTensor(t, randFloats(r, int(n*k)), n, k)
				var b *torch.Tensor
				if bias {
					b = newTensor(t, randFloats(r, int(n)), n)
				}
				// One trip to an inference thread for ATen and every kernel; checks back here.
				var want *torch.Tensor
				got := make([]*torch.Tensor, len(kernels))
				errs := make([]error, len(kernels))
				var err error
				torch.Do(func() {
					if err = torch.SetNumThreadsOnThisThread(threads); err != nil {
						return
					}
					if want, err = kerneltest.Linear(x, w, b, relu, kerneltest.ATen); err != nil {
						return
					}
					for j, kernel := range kernels {
						got[j], errs[j] = kerneltest.Linear(x, w, b, relu, kernel)
					}
				})
				if err != nil {
					t.Fatalf("%s: ATen: %v", what, err)
				}
				for j, kernel := range kernels {
					if errors.Is(errs[j], torch.Unsupported) && kernel != kerneltest.Fast {
						continue // this CPU lacks the kernel's instructions
					}
					if errs[j] != nil {
						t.Fatalf("kernel %d, %s: %v", kernel, what, errs[j])
					}
					closeTo(t, fmt.Sprintf("kernel %d, %s", kernel, what), got[j], want, 1e-5+1e-6*float64(k))
					got[j].Close()
					ran[kernel]++
				}
				want.Close()
			}
		}
	}
	if ran[kerneltest.Fast] == 0 {
		t.Fatalf("kernels tested: %v: want the fast one at least", ran)
	}
	t.Logf("cases per kernel (0 where this CPU lacks its instructions): %v", ran)
}

// TestFastLinearShapesAndFallbacks: batched inputs, empty ones, a zero depth, NaN through the
// relu, more rows than the fast path takes (at::linear then: the same bits), and arguments
// at::linear refuses (refused the same way).
func TestFastLinearShapesAndFallbacks(t *testing.T) {
	skipWithoutFastKernels(t)
	r := rand.New(rand.NewPCG(3, 4))
	threads := min(2, torch.AvailableCPUs())
	w := newTensor(t, randFloats(r, 40*24), 40, 24)
	b := newTensor(t, randFloats(r, 40), 40)
	check := func(what string, x *torch.Tensor, bias *torch.Tensor, relu bool, exact bool, kernels ...kerneltest.Kernel) {
		t.Helper()
		want, err := linearOn(threads, x, w, bias, relu, kerneltest.ATen)
		if err != nil {
			t.Fatalf("%s: ATen: %v", what, err)
		}
		defer want.Close()
		for _, k := range kernels {
			got, err := linearOn(threads, x, w, bias, relu, k)
			if errors.Is(err, torch.Unsupported) && k != kerneltest.Fast {
				continue
			}
			if err != nil {
				t.Fatalf("%s, kernel %d: %v", what, k, err)
			}
			if exact {
				sameBits(t, fmt.Sprintf("%s, kernel %d", what, k), got, want)
			} else {
				closeTo(t, fmt.Sprintf("%s, kernel %d", what, k), got, want, 1e-5)
			}
			got.Close()
		}
	}
	all := []kerneltest.Kernel{kerneltest.Fast, kerneltest.AVX2, kerneltest.AVX512}
	check("3-D input [2,9,24]", newTensor(t, randFloats(r, 2*9*24), 2, 9, 24), b, true, false, all...)
	check("1-D input [24]", newTensor(t, randFloats(r, 24), 24), b, false, false, all...)
	check("4-D input [2,1,3,24]", newTensor(t, randFloats(r, 2*3*24), 2, 1, 3, 24), nil, true, false, all...)
	check("empty input [0,24]", newTensor(t, nil, 0, 24), b, false, true, all...)
	nan := randFloats(r, 5*24)
	nan[30] = float32(math.NaN())
	check("NaN in row 1", newTensor(t, nan, 5, 24), b, true, false, all...)
	// 3000 rows: past what the fast path takes, the graph op runs at::linear; forced kernels
	// still run (and agree within rounding).
	big := newTensor(t, randFloats(r, 3000*24), 3000, 24)
	check("3000 rows, the graph op", big, b, true, true, kerneltest.Fast)
	check("3000 rows, forced kernels", big, b, true, false, kerneltest.AVX2, kerneltest.AVX512)

	// A zero depth: the output is the bias on every row.
	w0 := newTensor(t, nil, 7, 0)
	b7 := newTensor(t, []float32{1, -2, 3, -4, 5, -6, 7}, 7)
	for _, k := range all {
		y, err := linearOn(threads, newTensor(t, nil, 3, 0), w0, b7, true, k)
		if errors.Is(err, torch.Unsupported) && k != kerneltest.Fast {
			continue
		}
		if err != nil {
			t.Fatalf("zero depth, kernel %d: %v", k, err)
		}
		got, _ := y.Float32s()
		want := []float32{1, 0, 3, 0, 5, 0, 7}
		if !slices.Equal(y.Shape(), []int64{3, 7}) || !slices.Equal(got[7:14], want) {
			t.Fatalf("zero depth, kernel %d: %v %v, want [3 7] rows %v", k, y.Shape(), got, want)
		}
		y.Close()
	}

	// Refused as ATen refuses them: a depth that does not match, a float64 input, a bias of
	// the wrong length, an unknown kernel.
	bad := []struct {
		what string
		x, b *torch.Tensor
	}{
		{"depth 23 against 24", newTensor(t, randFloats(r, 2*23), 2, 23), b},
		{"bias of 39 for 40 features", newTensor(t, randFloats(r, 2*24), 2, 24), newTensor(t, randFloats(r, 39), 39)},
	}
	x64, err := torch.NewTensor(make([]float64, 48), []int64{2, 24})
	if err != nil {
		t.Fatal(err)
	}
	defer x64.Close()
	bad = append(bad, struct {
		what string
		x, b *torch.Tensor
	}{"float64 input", x64, b})
	for _, c := range bad {
		if _, err := linearOn(threads, c.x, w, c.b, false, kerneltest.ATen); err == nil {
			t.Fatalf("%s: ATen accepts it: the case tests nothing", c.what)
		}
		if y, err := linearOn(threads, c.x, w, c.b, false, kerneltest.Fast); err == nil {
			y.Close()
			t.Errorf("%s: torchspeed's linear accepts what ATen refuses", c.what)
		}
	}
	// A packed weight used with the wrong feature count, or a tensor that is no packed weight.
	packed, err := kerneltest.PackLinear(w)
	if err != nil {
		t.Fatal(err)
	}
	defer packed.Close()
	x := newTensor(t, randFloats(r, 2*24), 2, 24)
	for _, c := range []struct {
		what   string
		packed *torch.Tensor
		n      int
	}{{"40 features read as 70", packed, 70}, {"40 features read as 20", packed, 20}, {"a 2-D weight as packed", w, 40}} {
		if y, err := kerneltest.LinearPacked(x, c.packed, nil, c.n, false, kerneltest.Fast); err == nil {
			y.Close()
			t.Errorf("%s: no error", c.what)
		}
	}
	if y, err := kerneltest.LinearPacked(x, packed, b, 40, true, kerneltest.Fast); err != nil {
		t.Errorf("packed weight with its own feature count: %v", err)
	} else {
		want, err := linearOn(threads, x, w, b, true, kerneltest.ATen)
		if err != nil {
			t.Fatal(err)
		}
		closeTo(t, "LinearPacked", y, want, 1e-5)
		y.Close()
		want.Close()
	}
	if _, err := kerneltest.PackLinear(x64); !errors.Is(err, torch.InvalidArgument) {
		t.Errorf("packing a float64 weight: %v, want an InvalidArgument error", err)
	}
	if _, err := kerneltest.Linear(big, w, b, false, 7); !errors.Is(err, torch.InvalidArgument) {
		t.Errorf("kernel 7: %v, want an InvalidArgument error", err)
	}
	if _, err := kerneltest.Linear(nil, w, b, false, kerneltest.Fast); err == nil {
		t.Error("nil input: no error")
	}
}

// TestFastLinearPassOnTransformer: the traced transformer (frozen, and after
// optimize_for_inference, which turns its linears into matmul + add) gets its two layers' ops
// fused into torchspeed's encoder layer op, with all eight linears (two layers of in_proj,
// out_proj, linear1 with its relu, linear2) packed in it; the scripted one
// gets its two aten::_transformer_encoder_layer_fwd calls (the eval fast path) swapped whole,
// and the linears of its slow path (on libtorch 1.x: 2.x's freeze leaves the layers' in-projection
// weights as attributes, and the pass keeps ATen's op). Outputs stay within 1e-5 of the
// original's, and ATen runs no GEMM but the attention's.
func TestFastLinearPassOnTransformer(t *testing.T) {
	skipWithoutFastKernels(t)
	man := fixtures.Load(t)
	// transformer_prenorm: pre-norm, GELU, batch 2, and heads of 8 floats (ATen's bmm runs the
	// attention there); transformer_scripted: post-norm, relu, 32-float heads (torchspeed's loops).
	for _, name := range []string{"transformer_traced", "transformer_scripted", "transformer_prenorm"} {
		f := man.Get(t, name)
		m := loadFixture(t, f)
		in := tensorsOf(t, f.InputArrays(t))
		want, err := m.Forward(in...)
		if err != nil {
			t.Fatal(err)
		}
		frozen, err := m.Freeze()
		if err != nil {
			t.Fatal(err)
		}
		opt, err := m.OptimizeForInference()
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []struct {
			what string
			mod  *torch.Module
		}{{"frozen", frozen}, {"optimize_for_inference", opt}} {
			fast, nl, nr, err := v.mod.FastLinear()
			if err != nil {
				t.Fatal(err)
			}
			counts, err := fast.NodeCounts()
			if err != nil {
				t.Fatal(err)
			}
			what := name + ", " + v.what
			// libtorch 1.x traces the attention as the ops the layer fusion matches; 2.x as one
			// scaled_dot_product op, where the eight linears are swapped one by one.
			packed := 0
			if !strings.HasPrefix(torch.Version(), "1.") {
				packed = 8
			}
			if name == "transformer_traced" && (nl != 8 || nr != 2 || counts["torchspeed::linear_packed"] != packed ||
				counts["aten::linear"]+counts["aten::matmul"]+counts["aten::relu"] != 0 ||
				(packed == 0 && counts["aten::bmm"]+counts["aten::layer_norm"] != 0)) {
				t.Errorf("%s: %d linears (%d with relu) swapped, node counts %v; want 8 (2), %d of them outside fused layers", what, nl, nr,
					keysWith(counts, "linear"), packed)
			}
			layers := map[string]int{"transformer_traced": 2, "transformer_scripted": 2, "transformer_prenorm": 1}[name]
			if layers > 0 && !strings.HasPrefix(torch.Version(), "1.") {
				// libtorch 2.x's freeze leaves a scripted layer's in-projection weight and bias
				// as attributes (prim::GetAttr): no constant weight to pack, so the pass keeps
				// ATen's op, and with it ATen's GEMMs.
				if counts["torchspeed::transformer_encoder_layer"] != 0 {
					t.Errorf("%s: libtorch %s: node counts %v: want no encoder layer swapped", what, torch.Version(), keysWith(counts, "encoder"))
				}
				layers = -1
				if name == "transformer_traced" {
					layers = 0 // its linears are swapped one by one: only the attention stays ATen's
				}
			}
			if layers > 0 && (counts["torchspeed::transformer_encoder_layer"] != layers || counts["aten::_transformer_encoder_layer_fwd"] != 0) {
				t.Errorf("%s: node counts %v: want all %d encoder layer(s) swapped", what, keysWith(counts, "encoder"), layers)
			}
			if n := counts["torchspeed::linear_packed"] + 4*counts["torchspeed::transformer_encoder_layer"]; n != nl {
				t.Errorf("%s: %d swaps reported, %d linears in torchspeed:: nodes", what, nl, n)
			}
			// The linears that run are torchspeed's, not the ops' ATen fallback: no GEMM of
			// ATen's but the attention's batched ones, and those only where the heads are too
			// narrow for the encoder layer's own attention loops (and in a traced graph not fused).
			work, err := fast.OpWork(in...)
			if err != nil {
				t.Fatal(err)
			}
			for op, w := range work {
				// libtorch 2.x runs the traced attention as one scaled_dot_product op.
				attention := op == "aten::bmm" || strings.Contains(op, "scaled_dot_product")
				// ATen's attention runs where the heads are too narrow for the layer's loops
				// (prenorm) and in a traced graph the fusion does not match (libtorch 2.x).
				atenAttention := name == "transformer_prenorm" || (name == "transformer_traced" && packed != 0)
				if w.Calls > 0 && layers >= 0 && (!attention || !atenAttention) {
					t.Errorf("%s: ATen still runs %d %s call(s) (ops run: %v)", what, w.Calls, op, work)
				}
			}
			got, err := fast.Forward(in...)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			for i := range want {
				closeTo(t, what+" output "+want[i].Name, got[i].Tensor, want[i].Tensor, 1e-5)
			}
			t.Logf("%s: %d linears swapped (%d with relu); outputs within 1e-5", what, nl, nr)
			torch.CloseOutputs(got)
			otherShapes(t, what, m, fast, f.Inputs[0].Shape[2])
			fast.Close()
		}
		torch.CloseOutputs(want)
		frozen.Close()
		opt.Close()
	}
}

// otherShapes: the swapped module answers as the original at batch sizes and sequence lengths
// other than the fixture's (the fused layers read them at run time, as the traced size ops did).
func otherShapes(t *testing.T, what string, orig, fast *torch.Module, d int64) {
	t.Helper()
	r := rand.New(rand.NewPCG(13, 14))
	for _, bt := range [][2]int64{{1, 1}, {2, 5}, {3, 33}} {
		x := newTensor(t, randFloats(r, int(bt[0]*bt[1]*d)), bt[0], bt[1], d)
		want, err := orig.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fast.Forward(x)
		if err != nil {
			t.Fatalf("%s, input [%d, %d, %d]: %v", what, bt[0], bt[1], d, err)
		}
		closeTo(t, fmt.Sprintf("%s, input [%d, %d, %d]", what, bt[0], bt[1], d), got[0].Tensor, want[0].Tensor, 1e-5)
		torch.CloseOutputs(got)
		torch.CloseOutputs(want)
	}
}

// TestFastLinearPassLeavesOthersAlone: a model with no float linear (digits' INT8 reference,
// whose linears are quantized ones) gets nothing swapped and the same outputs bit for bit.
func TestFastLinearPassLeavesOthersAlone(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "digits")
	if f.QuantRef == nil {
		t.Fatal("digits has no INT8 reference")
	}
	m, err := torch.LoadWithEngine(f.Path(f.QuantRef.File), f.QuantRef.Engine)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Eval(); err != nil {
		t.Fatal(err)
	}
	fast, nl, nr, err := m.FastLinear()
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	if nl != 0 || nr != 0 {
		t.Fatalf("%d linears (%d relus) swapped in a model with none", nl, nr)
	}
	in := tensorsOf(t, f.InputArrays(t))
	want, err := m.Forward(in...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(want)
	got, err := fast.Forward(in...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(got)
	for i := range want {
		sameBits(t, "digits INT8 output "+want[i].Name, got[i].Tensor, want[i].Tensor)
	}
	var nilMod *torch.Module
	if _, _, _, err := nilMod.FastLinear(); err == nil {
		t.Error("FastLinear on a nil module: no error")
	}
}

// BenchmarkLinear times at::linear (addmm with the bias) and torchspeed's kernel on the
// transformer fixtures' linear shapes (and two taller ones), interleaved in one process at one
// and two threads, and reports medians and GFLOP/s (-benchtime sets the rounds). The weight is
// packed once, as the pass does.
func BenchmarkLinear(b *testing.B) {
	for _, c := range []struct {
		threads int
		s       [3]int64
	}{{1, [3]int64{16, 128, 384}}, {1, [3]int64{16, 128, 128}}, {1, [3]int64{16, 128, 256}}, {1, [3]int64{16, 256, 128}},
		{1, [3]int64{256, 128, 384}}, {1, [3]int64{2048, 128, 384}},
		{2, [3]int64{16, 128, 384}}, {2, [3]int64{256, 128, 384}}, {2, [3]int64{2048, 128, 384}}} {
		m, k, n, threads := c.s[0], c.s[1], c.s[2], c.threads
		b.Run(fmt.Sprintf("%dT/%dx%dx%d", threads, m, k, n), func(b *testing.B) {
			if threads > torch.AvailableCPUs() {
				b.Skip("not enough CPUs")
			}
			r := rand.New(rand.NewPCG(5, 6))
			x := newTensor(b, randFloats(r, int(m*k)), m, k)
			w := newTensor(b, randFloats(r, int(n*k)), n, k)
			bias := newTensor(b, randFloats(r, int(n)), n)
			packed, err := kerneltest.PackLinear(w)
			if err != nil {
				b.Fatal(err)
			}
			defer packed.Close()
			ns := map[kerneltest.Kernel][]float64{}
			b.ResetTimer() // Do runs on an inference thread: b.Fatal only back here
			torch.Do(func() {
				if err = torch.SetNumThreadsOnThisThread(threads); err != nil {
					return
				}
				for i := 0; i < b.N && err == nil; i++ {
					for _, kernel := range []kerneltest.Kernel{kerneltest.ATen, kerneltest.Fast} {
						var y *torch.Tensor
						t0 := time.Now()
						// Ten calls per sample: the cgo call and packing are not the kernel.
						for j := 0; j < 10 && err == nil; j++ {
							if y != nil {
								y.Close()
							}
							if kernel == kerneltest.ATen {
								y, err = kerneltest.Linear(x, w, bias, false, kernel)
							} else {
								y, err = kerneltest.LinearPacked(x, packed, bias, int(n), false, kernel)
							}
						}
						ns[kernel] = append(ns[kernel], float64(time.Since(t0).Nanoseconds())/10)
						if y != nil {
							y.Close()
						}
					}
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			flop := float64(2 * m * k * n)
			a, f := median(ns[kerneltest.ATen]), median(ns[kerneltest.Fast])
			b.ReportMetric(a/1e3, "aten-us")
			b.ReportMetric(f/1e3, "fast-us")
			b.ReportMetric(flop/a, "aten-GFLOP/s")
			b.ReportMetric(flop/f, "fast-GFLOP/s")
			b.ReportMetric(a/f, "ratio")
		})
	}
}
