package torch_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/cpuid/v2"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/bindings/torch/internal/kerneltest"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// directKernels are the instruction sets of the tiny-image convolution this CPU can run: AVX2 on
// any CPU with AVX2+FMA, AVX-512 where it has AVX-512F (TORCHSPEED_MAX_ISA caps them, as the
// kernel choice does: a forced kernel above the cap fails, so it is left out here).
func directKernels(t *testing.T) []kerneltest.Kernel {
	t.Helper()
	skipWithoutFastKernels(t)
	ks := []kerneltest.Kernel{kerneltest.AVX2}
	if cpuid.CPU.Supports(cpuid.AVX512F) && strings.ToLower(os.Getenv("TORCHSPEED_MAX_ISA")) != "avx2" {
		ks = append(ks, kerneltest.AVX512)
	}
	return ks
}

// refPool is max_pool2d (no padding, dilation 1, floor) of y [n, c, oh, ow] in NCHW order.
func refPool(y []float64, n, c, oh, ow int, p kerneltest.PoolParams) []float64 {
	ph, pw := (oh-int(p.Kernel[0]))/int(p.Stride[0])+1, (ow-int(p.Kernel[1]))/int(p.Stride[1])+1
	out := make([]float64, 0, n*c*ph*pw)
	for i := range n * c {
		for a := range ph {
			for b := range pw {
				m := math.Inf(-1)
				for u := range int(p.Kernel[0]) {
					for v := range int(p.Kernel[1]) {
						m = max(m, y[(i*oh+a*int(p.Stride[0])+u)*ow+b*int(p.Stride[1])+v])
					}
				}
				out = append(out, m)
			}
		}
	}
	return out
}

// TestConvDirectMatchesReference runs the tiny-image convolution (torchspeed::conv2d_pool's
// kernel, and conv2d_gemm's below its limits) on each instruction set this CPU has, alone and
// followed by max-pools of several shapes, over the digits CNN's convolutions, odd channel counts,
// strides, rectangular kernels and padding, batch 2, two weight panels, a kernel wider than the
// image, 1x1, on NCHW and channels-last inputs, with and without bias and relu: the kernel must
// run (not a fallback), match a float64 convolution (and pool) within float rounding, and give the
// same bits on AVX2 as on AVX-512 (the same sums in the same order). The graph op (Fast) must
// run it too and answer like its kernel.
func TestConvDirectMatchesReference(t *testing.T) {
	kernels := directKernels(t)
	cases := []convCase{
		{1, 1, 8, 8, 16, 3, 3, params(1, 1, 1)},   // digits conv1
		{1, 16, 8, 8, 32, 3, 3, params(1, 1, 1)},  // digits conv2
		{1, 5, 11, 9, 7, 3, 3, params(2, 1, 1)},   // odd channels, stride 2
		{2, 3, 10, 10, 33, 3, 3, params(1, 1, 1)}, // batch 2, 33 outputs (two panels)
		{1, 4, 12, 10, 40, 5, 3, kerneltest.ConvParams{Stride: [2]int64{2, 1}, Padding: [2]int64{2, 0}, Dilation: [2]int64{1, 1}, Groups: 1}},
		{2, 17, 6, 6, 64, 3, 3, params(1, 0, 1)},  // no padding: a channels-last input is read in place
		{1, 3, 5, 5, 8, 7, 7, params(1, 3, 1)},    // kernel larger than the input
		{1, 64, 7, 7, 64, 3, 3, params(1, 1, 1)},  // the deepest K the kernel takes (576)
		{1, 8, 13, 13, 24, 1, 1, params(1, 0, 1)}, // 1x1
	}
	pools := []*kerneltest.PoolParams{nil, {Kernel: [2]int64{2, 2}, Stride: [2]int64{2, 2}},
		{Kernel: [2]int64{3, 3}, Stride: [2]int64{2, 2}}, {Kernel: [2]int64{2, 1}, Stride: [2]int64{1, 2}}}
	threads := min(2, torch.AvailableCPUs())
	r := rand.New(rand.NewPCG(21, 22))
	n := 0
	for _, c := range cases {
		for _, cl := range []bool{false, true} {
			for _, pool := range pools {
				oh, ow := convOut(c)
				if pool != nil && (oh < pool.Kernel[0] || ow < pool.Kernel[1]) {
					continue
				}
				relu, bias := n%2 == 0, n%3 != 2
				n++
				what := fmt.Sprintf("%v, channels-last %v, relu %v, bias %v, pool %v", c, cl, relu, bias, pool)
				x, w, b := convData(t, r, c, bias)
				if cl {
					x = channelsLastOf(t, x)
				}
				ref := refConv2d(t, x, w, b, c, relu)
				if pool != nil {
					ref = refPool(ref, int(c.n), int(c.oc), int(oh), int(ow), *pool)
				}
				tol := 1e-5 + 1e-6*float64(c.ic*c.kh*c.kw)
				var first []float32
				for _, k := range append(slices.Clone(kernels), kerneltest.Fast) {
					if k == kerneltest.Fast && pool == nil && c.kh == 1 && cl {
						continue // conv2d_gemm's own 1x1 path: TestFastConvMatchesATen's
					}
					y, fast := conv2dPoolOn(t, threads, x, w, b, c.p, relu, pool, k)
					if !fast {
						t.Errorf("%s, kernel %d: the direct kernel did not run", what, k)
					}
					if i, d := farthest(t, y, ref); d > tol {
						t.Fatalf("%s, kernel %d: element %d of %d is %.7g, float64 gives %.7g", what, k, i, len(ref), float32s(t, y)[i], ref[i])
					}
					got := float32s(t, y)
					y.Close()
					if first == nil {
						first = got
					} else if i := firstDiff(first, got); i >= 0 {
						t.Errorf("%s, kernel %d: element %d is %.9g, kernel %d gave %.9g: not the same bits", what, k, i, got[i], kernels[0], first[i])
					}
				}
			}
		}
	}
}

// TestConvPoolFallbacks: where the direct kernel does not apply (more output positions than it
// takes, dilation) torchspeed::conv2d_pool runs conv2d_gemm's path and ATen's max_pool2d, with
// the same answer; a NaN in the input comes out where ATen's pool puts it. Without AVX2 (or
// with TORCHSPEED_MAX_ISA=scalar) every case takes the fallback, as an exported graph calling the
// op does on such a CPU.
func TestConvPoolFallbacks(t *testing.T) {
	threads := min(2, torch.AvailableCPUs())
	r := rand.New(rand.NewPCG(23, 24))
	pool := &kerneltest.PoolParams{Kernel: [2]int64{2, 2}, Stride: [2]int64{2, 2}}
	for _, c := range []struct {
		what string
		c    convCase
		fast bool
	}{
		{"20x20 output positions", convCase{1, 3, 20, 20, 8, 3, 3, params(1, 1, 1)}, false},
		{"dilation 2", convCase{1, 4, 9, 9, 8, 3, 3, params(1, 2, 2)}, false},
		{"digits conv2", convCase{1, 16, 8, 8, 32, 3, 3, params(1, 1, 1)}, true},
	} {
		x, w, b := convData(t, r, c.c, true)
		xs := float32s(t, x)
		xs[len(xs)/3] = float32(math.NaN())
		xn := newTensor(t, xs, c.c.n, c.c.ic, c.c.h, c.c.w)
		want, _ := conv2dPoolOn(t, threads, xn, w, b, c.c.p, true, pool, kerneltest.ATen)
		got, fast := conv2dPoolOn(t, threads, xn, w, b, c.c.p, true, pool, kerneltest.Fast)
		if fast != (c.fast && fastKernels()) {
			t.Errorf("%s: direct kernel ran %v, want %v", c.what, fast, c.fast)
		}
		ws, gs := float32s(t, want), float32s(t, got)
		nans := 0
		for i := range ws {
			wn, gn := math.IsNaN(float64(ws[i])), math.IsNaN(float64(gs[i]))
			if wn != gn || (!wn && math.Abs(float64(ws[i]-gs[i])) > 1e-4) {
				t.Fatalf("%s: element %d is %g, ATen's pool gives %g", c.what, i, gs[i], ws[i])
			}
			if wn {
				nans++
			}
		}
		if nans == 0 {
			t.Errorf("%s: the NaN reached no output", c.what)
		}
		want.Close()
		got.Close()
	}
}

// TestConvPoolRefusals: arguments ATen refuses are refused by torchspeed::conv2d_pool too, with an
// error, not a crash: a zero pool kernel or stride, input channels that do not match the weight.
func TestConvPoolRefusals(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	c := convCase{1, 16, 8, 8, 32, 3, 3, params(1, 1, 1)}
	x, w, b := convData(t, r, c, true)
	x3 := newTensor(t, randFloats(r, 3*64), 1, 3, 8, 8)
	for _, bad := range []struct {
		what string
		x    *torch.Tensor
		pool kerneltest.PoolParams
	}{
		{"pool kernel 0", x, kerneltest.PoolParams{Kernel: [2]int64{0, 0}, Stride: [2]int64{2, 2}}},
		{"pool stride 0", x, kerneltest.PoolParams{Kernel: [2]int64{2, 2}, Stride: [2]int64{0, 0}}},
		{"3 input channels for a 16-channel weight", x3, kerneltest.PoolParams{Kernel: [2]int64{2, 2}, Stride: [2]int64{2, 2}}},
	} {
		for _, k := range []kerneltest.Kernel{kerneltest.ATen, kerneltest.Fast} {
			var err error
			torch.Do(func() {
				var y *torch.Tensor
				if y, _, err = kerneltest.Conv2dPool(bad.x, w, b, c.p, true, &bad.pool, k); err == nil {
					y.Close()
				}
			})
			if err == nil {
				t.Errorf("%s, kernel %d: no error", bad.what, k)
			}
		}
	}
}

// TestConvPoolPassOnDigits: on the frozen digits CNN (after fast_linear, as optimize builds it)
// fast_conv fuses conv2 + relu + max_pool2d + flatten into torchspeed::conv2d_pool and leaves no
// ATen convolution or pool running; on the 500 held-out samples (batches of 4, which the direct
// kernel takes) its top-1 is the original's, sample for sample.
func TestConvPoolPassOnDigits(t *testing.T) {
	skipWithoutFastKernels(t)
	man := fixtures.Load(t)
	f := man.Get(t, "digits")
	m := loadFixture(t, f)
	frozen, err := m.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	lin, _, _, err := frozen.FastLinear()
	if err != nil {
		t.Fatal(err)
	}
	defer lin.Close()
	fast, nc, nr, err := lin.FastConv()
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	counts, err := fast.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	if nc != 2 || nr != 2 || counts["torchspeed::conv2d_pool"] != 1 || counts["torchspeed::conv2d_gemm"] != 1 || counts["aten::max_pool2d"] != 0 || counts["aten::flatten"] != 0 {
		t.Errorf("%d convs (%d with relu) swapped, node counts %v; want 2 (2), one conv2d_pool, one conv2d_gemm, no max_pool2d or flatten", nc, nr, counts)
	}
	work, err := fast.OpWork(tensorsOf(t, f.InputArrays(t))...)
	if err != nil {
		t.Fatal(err)
	}
	for op, w := range work {
		if w.Calls > 0 && (op == "aten::_convolution" || op == "aten::thnn_conv2d" || op == "aten::max_pool2d" || op == "aten::conv2d") {
			t.Errorf("ATen still runs %d %s call(s)", w.Calls, op)
		}
	}
	labels, err := f.Array(t, *f.Eval.Labels).Int64s()
	if err != nil {
		t.Fatal(err)
	}
	data, err := validate.FromArrays(f.Arrays(t, f.Eval.Inputs), labels, []string{"x"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	res, err := validate.Compare(context.Background(), m, fast, data)
	if err != nil {
		t.Fatal(err)
	}
	if res.Samples != 500 || res.Top1Agreement != 1 || res.AccuracyDrop != 0 || math.Abs(res.Top1-f.Eval.Accuracy) > 1e-9 || res.MaxAbsError > 1e-4 {
		t.Errorf("fast_linear + fast_conv against the original on the eval set: %+v (fixture accuracy %.4f)", res, f.Eval.Accuracy)
	}
	t.Logf("top-1 %.4f (original %.4f), max abs %.3g, cosine %.7f", res.Top1, res.RefTop1, res.MaxAbsError, res.Cosine)
}

func convOut(c convCase) (oh, ow int64) {
	return (c.h+2*c.p.Padding[0]-c.p.Dilation[0]*(c.kh-1)-1)/c.p.Stride[0] + 1,
		(c.w+2*c.p.Padding[1]-c.p.Dilation[1]*(c.kw-1)-1)/c.p.Stride[1] + 1
}

// conv2dPoolOn runs kerneltest.Conv2dPool on an inference thread.
func conv2dPoolOn(t *testing.T, threads int, x, w, b *torch.Tensor, p kerneltest.ConvParams, relu bool, pool *kerneltest.PoolParams, k kerneltest.Kernel) (*torch.Tensor, bool) {
	t.Helper()
	var y *torch.Tensor
	var fast bool
	var err error
	torch.Do(func() {
		if err = torch.SetNumThreadsOnThisThread(threads); err != nil {
			return
		}
		y, fast, err = kerneltest.Conv2dPool(x, w, b, p, relu, pool, k)
	})
	if err != nil {
		t.Fatalf("conv2d_pool, kernel %d: %v", k, err)
	}
	return y, fast
}

func firstDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}
