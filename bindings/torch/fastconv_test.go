package torch_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/bindings/torch/internal/kerneltest"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/fixtures/streamref"
	"github.com/torchspeed/torchspeed/internal/refconv"
)

// convCase is one convolution: input [n, ic, h, w], weight [oc, ic/groups, kh, kw].
type convCase struct {
	n, ic, h, w, oc, kh, kw int64
	p                       kerneltest.ConvParams
}

func (c convCase) String() string {
	return fmt.Sprintf("x [%d,%d,%d,%d] w [%d,%d,%d,%d] stride %v pad %v dilation %v groups %d", c.n, c.ic, c.h, c.w,
		c.oc, c.ic/c.p.Groups, c.kh, c.kw, c.p.Stride, c.p.Padding, c.p.Dilation, c.p.Groups)
}

func params(stride, pad, dil int64) kerneltest.ConvParams {
	return kerneltest.ConvParams{Stride: [2]int64{stride, stride}, Padding: [2]int64{pad, pad}, Dilation: [2]int64{dil, dil}, Groups: 1}
}

// convOn runs Conv2d for ATen and for torchspeed's op in one trip to an inference thread.
func convOn(threads int, x, w, b *torch.Tensor, p kerneltest.ConvParams, relu bool) (want, got *torch.Tensor, fast bool, err error) {
	torch.Do(func() {
		if err = torch.SetNumThreadsOnThisThread(threads); err != nil {
			return
		}
		if want, _, err = kerneltest.Conv2d(x, w, b, p, relu, kerneltest.ATen); err != nil {
			return
		}
		if got, fast, err = kerneltest.Conv2d(x, w, b, p, relu, kerneltest.Fast); err != nil {
			want.Close()
		}
	})
	return want, got, fast, err
}

func convData(t testing.TB, r *rand.Rand, c convCase, bias bool) (x, w, b *torch.Tensor) {
	x = newTensor(t, randFloats(r, int(c.n*c.ic*c.h*c.w)), c.n, c.ic, c.h, c.w)
	w = newTensor(t, randFloats(r, int(c.oc*c.ic/c.p.Groups*c.kh*c.kw)), c.oc, c.ic/c.p.Groups, c.kh, c.kw)
	if bias {
		b = newTensor(t, randFloats(r, int(c.oc)), c.oc)
	}
	return x, w, b
}

// TestFastConvMatchesATen runs torchspeed::conv2d_gemm over 1x1 and 3x3 kernels, strides,
// padding, dilation, odd and wide channel counts, batch 2, rectangular parameters, bias and relu
// on and off, each on an NCHW and on a channels-last input; every case must run torchspeed's
// kernel, not the ATen fallback, and match a direct convolution in float64 (refConv2d).
//
// at::conv2d (+ relu) runs beside it, and is checked against the same reference, but only
// logged: it is what the kernel replaces, not the truth. Debian's libtorch 2.6 (oneDNN 3.7.2)
// gets batch 2 with 17 input channels wrong by up to 4 on an AMD EPYC Zen 5, through its AVX2
// and AVX-512 kernels alike (1.13.1 gets it right); python3-torch 2.6 alone shows it:
// conv2d(rand(2,17,6,6), rand(64,17,3,3)) against the same in float64.
func TestFastConvMatchesATen(t *testing.T) {
	skipWithoutFastKernels(t)
	cases := []convCase{
		{1, 1, 8, 8, 16, 3, 3, params(1, 1, 1)},   // digits conv1
		{1, 16, 8, 8, 32, 3, 3, params(1, 1, 1)},  // digits conv2
		{1, 8, 7, 7, 24, 1, 1, params(1, 0, 1)},   // 1x1: no im2col on a channels-last input
		{1, 8, 9, 9, 24, 1, 1, params(2, 0, 1)},   // 1x1 stride 2
		{1, 5, 11, 9, 7, 3, 3, params(2, 1, 1)},   // odd channels, stride 2
		{2, 3, 10, 10, 33, 3, 3, params(1, 2, 2)}, // batch 2, dilation 2, 33 outputs (two panels)
		{1, 4, 12, 10, 40, 5, 3, kerneltest.ConvParams{Stride: [2]int64{2, 1}, Padding: [2]int64{2, 0}, Dilation: [2]int64{1, 2}, Groups: 1}},
		{2, 17, 6, 6, 64, 3, 3, params(1, 0, 1)},   // no padding, 17 channels
		{1, 64, 7, 7, 64, 3, 3, params(1, 1, 1)},   // resnet18's last stage, narrower
		{1, 3, 5, 5, 8, 7, 7, params(1, 3, 1)},     // kernel larger than the input, padding covers it
		{1, 2, 4, 4, 3, 3, 3, params(3, 0, 1)},     // one output position
		{2, 16, 16, 16, 24, 3, 3, params(1, 1, 1)}, // 512 rows: several im2col blocks
	}
	threads := min(2, torch.AvailableCPUs())
	r := rand.New(rand.NewPCG(7, 8))
	n := 0
	for i, c := range cases {
		for _, cl := range []bool{false, true} {
			relu, bias := (i+n)%2 == 0, n%3 != 2
			n++
			what := fmt.Sprintf("%v, channels-last %v, relu %v, bias %v", c, cl, relu, bias)
			x, w, b := convData(t, r, c, bias)
			if cl {
				x = channelsLastOf(t, x)
			}
			want, got, fast, err := convOn(threads, x, w, b, c.p, relu)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if !fast {
				t.Errorf("%s: ATen's convolution ran, not torchspeed's kernel", what)
			}
			ref := refConv2d(t, x, w, b, c, relu)
			tol := 1e-5 + 1e-6*float64(c.ic*c.kh*c.kw)
			if i, d := farthest(t, got, ref); d > tol {
				t.Fatalf("%s: element %d of %d is %.7g, the float64 convolution gives %.7g", what, i, len(ref), float32s(t, got)[i], ref[i])
			}
			if i, d := farthest(t, want, ref); d > tol {
				t.Logf("%s: libtorch's own convolution is off by %.3g at element %d (%.7g against %.7g in float64); torchspeed's kernel is not", what, d, i, float32s(t, want)[i], ref[i])
			}
			want.Close()
			got.Close()
		}
	}
}

// TestFastConvFallbacks: what torchspeed's kernels do not take runs ATen's convolution (the
// same bits): groups > 1 but not depthwise, a depthwise conv past conv_dw's limit, more output
// positions or a deeper K than the kernel takes; what ATen refuses is refused the same way.
func TestFastConvFallbacks(t *testing.T) {
	threads := min(2, torch.AvailableCPUs())
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		what string
		c    convCase
	}{
		{"groups 2", convCase{1, 8, 8, 8, 16, 3, 3, kerneltest.ConvParams{Stride: [2]int64{1, 1}, Padding: [2]int64{1, 1}, Dilation: [2]int64{1, 1}, Groups: 2}}},
		{"depthwise, 64x16x16 outputs", convCase{1, 64, 16, 16, 64, 3, 3, kerneltest.ConvParams{Stride: [2]int64{1, 1}, Padding: [2]int64{1, 1}, Dilation: [2]int64{1, 1}, Groups: 64}}},
		{"80x80 output positions", convCase{1, 3, 80, 80, 8, 3, 3, params(1, 1, 1)}},
		{"1x1 on 40x40 output positions", convCase{1, 8, 40, 40, 8, 1, 1, params(1, 0, 1)}},
		{"K 1152 (128 channels, 3x3)", convCase{1, 128, 4, 4, 16, 3, 3, params(1, 1, 1)}},
	} {
		x, w, b := convData(t, r, c.c, true)
		want, got, fast, err := convOn(threads, x, w, b, c.c.p, true)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if fast {
			t.Errorf("%s: torchspeed's kernel ran; want ATen's convolution", c.what)
		}
		sameBits(t, c.what, got, want)
		want.Close()
		got.Close()
	}
	w := newTensor(t, randFloats(r, 16*3*3*3), 16, 3, 3, 3)
	x64, err := torch.NewTensor(make([]float64, 3*8*8), []int64{1, 3, 8, 8})
	if err != nil {
		t.Fatal(err)
	}
	defer x64.Close()
	bad := []struct {
		what string
		x, b *torch.Tensor
	}{
		{"4 input channels against 3", newTensor(t, randFloats(r, 4*8*8), 1, 4, 8, 8), nil},
		{"bias of 15 for 16 channels", newTensor(t, randFloats(r, 3*8*8), 1, 3, 8, 8), newTensor(t, randFloats(r, 15), 15)},
		{"input smaller than the kernel", newTensor(t, randFloats(r, 3*2*2), 1, 3, 2, 2), nil},
		{"float64 input", x64, nil},
	}
	for _, c := range bad {
		var errA, errF error
		torch.Do(func() {
			var y *torch.Tensor
			if y, _, errA = kerneltest.Conv2d(c.x, w, c.b, params(1, 0, 1), false, kerneltest.ATen); errA == nil {
				y.Close()
			}
			if y, _, errF = kerneltest.Conv2d(c.x, w, c.b, params(1, 0, 1), false, kerneltest.Fast); errF == nil {
				y.Close()
			}
		})
		if errA == nil {
			t.Fatalf("%s: ATen accepts it: the case tests nothing", c.what)
		}
		if errF == nil {
			t.Errorf("%s: torchspeed's conv accepts what ATen refuses", c.what)
		}
	}
	x := newTensor(t, randFloats(r, 3*8*8), 1, 3, 8, 8)
	if _, _, err := kerneltest.Conv2d(x, w, nil, params(1, 0, 1), false, 5); !errors.Is(err, torch.InvalidArgument) {
		t.Errorf("kernel 5: %v, want an InvalidArgument error", err)
	}
	if _, _, err := kerneltest.Conv2d(nil, w, nil, params(1, 0, 1), false, kerneltest.Fast); err == nil {
		t.Error("nil input: no error")
	}
}

// TestFastConvPassOnDigits: the frozen digits CNN (two 3x3 convs, each followed by a relu, the
// second by a max-pool) gets both convolutions swapped with their relus fused, the second with its
// pool (torchspeed::conv2d_pool), alone and after fast_linear; outputs stay within 1e-5 of the
// frozen model's and ATen runs no convolution.
func TestFastConvPassOnDigits(t *testing.T) {
	skipWithoutFastKernels(t)
	man := fixtures.Load(t)
	f := man.Get(t, "digits")
	m := loadFixture(t, f)
	in := tensorsOf(t, f.InputArrays(t))
	frozen, err := m.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	want, err := frozen.Forward(in...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(want)
	lin, nl, _, err := frozen.FastLinear()
	if err != nil {
		t.Fatal(err)
	}
	defer lin.Close()
	if nl != 2 {
		t.Fatalf("fast_linear swapped %d linears, want 2", nl)
	}
	for _, v := range []struct {
		what  string
		mod   *torch.Module
		relus int // aten::relu left: fc1's, unless fast_linear fused it
	}{{"frozen", frozen, 1}, {"frozen + fast_linear", lin, 0}} {
		fast, nc, nr, err := v.mod.FastConv()
		if err != nil {
			t.Fatal(err)
		}
		counts, err := fast.NodeCounts()
		if err != nil {
			t.Fatal(err)
		}
		if nc != 2 || nr != 2 || counts["torchspeed::conv2d_gemm"] != 1 || counts["torchspeed::conv2d_pool"] != 1 || counts["aten::_convolution"] != 0 || counts["aten::relu"] != v.relus {
			t.Errorf("%s: %d convs (%d with relu) swapped, node counts %v; want 2 (2), one with its pool, %d relu(s) left", v.what, nc, nr, counts, v.relus)
		}
		work, err := fast.OpWork(in...)
		if err != nil {
			t.Fatal(err)
		}
		for op, w := range work {
			if w.Calls > 0 && (op == "aten::convolution" || op == "aten::_convolution" || op == "aten::conv2d" || op == "aten::thnn_conv2d") {
				t.Errorf("%s: ATen still runs %d %s call(s)", v.what, w.Calls, op)
			}
		}
		got, err := fast.Forward(in...)
		if err != nil {
			t.Fatalf("%s: %v", v.what, err)
		}
		for i := range want {
			closeTo(t, v.what+" output "+want[i].Name, got[i].Tensor, want[i].Tensor, 1e-5)
		}
		torch.CloseOutputs(got)
		fast.Close()
	}
}

// TestFastConvPassLeavesGroupedConvs: frozen mobilenet_v2 gets its ungrouped and depthwise
// convolutions swapped, but for those deeper than torchspeed's GEMM takes (K = IC x kh x kw
// past 576: three 1x1 convs on 960 channels), which stay ATen's; outputs within float rounding of
// the frozen model's.
func TestFastConvPassLeavesGroupedConvs(t *testing.T) {
	skipWithoutFastKernels(t)
	if testing.Short() {
		t.Skip("mobilenet_v2 at 224x224: not in -short")
	}
	man := fixtures.Load(t)
	f := man.Get(t, "mobilenet_v2")
	m := loadFixture(t, f)
	frozen, err := m.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	before, err := frozen.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	fast, nc, nr, err := frozen.FastConv()
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	after, err := fast.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	// torchvision's mobilenet_v2: 52 convolutions, 17 of them depthwise (torchspeed::conv_dw,
	// which runs ATen's convolution at these sizes), 3 with K 960; its activations are hardtanh
	// (ReLU6), which the pass does not fuse.
	if total := before["aten::_convolution"]; total != 52 || nc != 49 || nr != 0 || after["aten::_convolution"] != 3 ||
		after["torchspeed::conv2d_gemm"] != 32 || after["torchspeed::conv_dw"] != 17 {
		t.Fatalf("%d convs before; %d swapped (%d relus), %d left, %d conv2d_gemm, %d conv_dw; want 52, 49 (0), 3, 32, 17", total, nc, nr,
			after["aten::_convolution"], after["torchspeed::conv2d_gemm"], after["torchspeed::conv_dw"])
	}
	in := tensorsOf(t, f.InputArrays(t))
	want, err := frozen.Forward(in...)
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
		closeTo(t, "mobilenet_v2 output "+want[i].Name, got[i].Tensor, want[i].Tensor, 1e-3)
	}
	var nilMod *torch.Module
	if _, _, _, err := nilMod.FastConv(); err == nil {
		t.Error("FastConv on a nil module: no error")
	}
}

// BenchmarkConv2d times at::conv2d and torchspeed::conv2d_gemm (weight packed on each call, as
// kerneltest.Conv2d does) and the packing alone, interleaved at one thread, on the digits CNN's
// convolutions, resnet18-sized ones and sizes in between, and reports medians; own-us (fast -
// pack) is what a graph that packed once pays. The limits in csrc/kernels/fastconv.cpp come from it.
func BenchmarkConv2d(b *testing.B) {
	for _, c := range []convCase{
		{1, 1, 8, 8, 16, 3, 3, params(1, 1, 1)},
		{1, 16, 8, 8, 32, 3, 3, params(1, 1, 1)},
		{1, 32, 16, 16, 32, 3, 3, params(1, 1, 1)},
		{1, 64, 16, 16, 64, 3, 3, params(1, 1, 1)},
		{1, 32, 32, 32, 32, 3, 3, params(1, 1, 1)},
		{1, 64, 28, 28, 64, 3, 3, params(1, 1, 1)},
		{1, 64, 28, 28, 128, 1, 1, params(1, 0, 1)},
		{1, 128, 14, 14, 128, 3, 3, params(1, 1, 1)},
		{1, 256, 14, 14, 256, 3, 3, params(1, 1, 1)},
		{1, 512, 7, 7, 512, 3, 3, params(1, 1, 1)},
		{1, 16, 64, 64, 16, 3, 3, params(1, 1, 1)},
		{4, 16, 16, 16, 32, 3, 3, params(1, 1, 1)},
	} {
		for _, cl := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dx%dx%dx%d-oc%d-k%d-cl%v", c.n, c.ic, c.h, c.w, c.oc, c.kh, cl), func(b *testing.B) {
				r := rand.New(rand.NewPCG(11, 12))
				x, w, bias := convData(b, r, c, true)
				if cl {
					x = channelsLastOf(b, x)
				}
				// A linear weight of the same size: packing the conv's adds one permuted copy.
				w2 := newTensor(b, randFloats(r, int(c.oc*c.ic*c.kh*c.kw)), c.oc, c.ic*c.kh*c.kw)
				var aten, fast, pack []float64
				ran := true
				var err error
				b.ResetTimer()
				torch.Do(func() {
					if err = torch.SetNumThreadsOnThisThread(1); err != nil {
						return
					}
					for i := 0; i < b.N && err == nil; i++ {
						for _, k := range []kerneltest.Kernel{kerneltest.ATen, kerneltest.Fast} {
							t0 := time.Now()
							var y *torch.Tensor
							var f bool
							if y, f, err = kerneltest.Conv2d(x, w, bias, c.p, true, k); err != nil {
								return
							}
							d := float64(time.Since(t0).Nanoseconds())
							y.Close()
							if k == kerneltest.ATen {
								aten = append(aten, d)
							} else {
								fast = append(fast, d)
								ran = ran && f
							}
						}
						t0 := time.Now()
						var p *torch.Tensor
						if p, err = kerneltest.PackLinear(w2); err != nil {
							return
						}
						pack = append(pack, float64(time.Since(t0).Nanoseconds()))
						p.Close()
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				a, f, pk := median(aten), median(fast), median(pack)
				b.ReportMetric(a/1e3, "aten-us")
				b.ReportMetric(f/1e3, "fast-us")
				b.ReportMetric((f-pk)/1e3, "own-us")
				if f > pk {
					b.ReportMetric(a/(f-pk), "ratio")
				}
				if !ran {
					b.Log("ATen's fallback ran for torchspeed's op")
				}
			})
		}
	}
}

// refConv2d is c's convolution of x by w (+ b, + relu) in float64 (refconv.Conv2d), NCHW order.
func refConv2d(t *testing.T, x, w, b *torch.Tensor, c convCase, relu bool) []float64 {
	t.Helper()
	var bs []float32
	if b != nil {
		bs = float32s(t, b)
	}
	p := c.p
	two := func(v [2]int64) [2]int { return [2]int{int(v[0]), int(v[1])} }
	s := refconv.Shape{N: int(c.n), C: int(c.ic), H: int(c.h), W: int(c.w), OC: int(c.oc), KH: int(c.kh), KW: int(c.kw),
		Stride: two(p.Stride), Padding: two(p.Padding), Dilation: two(p.Dilation), Groups: int(p.Groups)}
	return refconv.Conv2d(float32s(t, x), float32s(t, w), bs, s, relu)
}

// farthest returns the element of y farthest from ref and its distance (NaN against a number
// counts as infinitely far).
func farthest(t *testing.T, y *torch.Tensor, ref []float64) (at int, d float64) {
	t.Helper()
	ys := float32s(t, y)
	if len(ys) != len(ref) {
		t.Fatalf("%d elements, the reference has %d", len(ys), len(ref))
	}
	for i, v := range ys {
		e := math.Abs(float64(v) - ref[i])
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		if e > d {
			at, d = i, e
		}
	}
	return at, d
}

func float32s(t *testing.T, x *torch.Tensor) []float32 {
	t.Helper()
	v, err := x.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// fast_conv on 1-D convolutions: the stream models' front ends (a Conv1d over audio chunks, an
// STFT-like filter bank) run as 2-D ones of height 1 through torchspeed's GEMM, and each call of
// the recorded stream answers as PyTorch's did, state and all.
func TestFastConvPassOn1DStreams(t *testing.T) {
	skipWithoutFastKernels(t)
	for _, name := range []string{"vad_lstm", "streaming"} {
		f := fixtures.Load(t).Get(t, name)
		m := loadFixture(t, f)
		fr, err := m.Freeze("reset_states")
		if err != nil {
			t.Fatal(err)
		}
		fast, convs, _, err := fr.FastConv()
		fr.Close()
		if err != nil {
			t.Fatal(err)
		}
		if convs == 0 {
			t.Fatalf("%s: no 1-D conv swapped", name)
		}
		counts, err := fast.NodeCounts()
		if err != nil {
			t.Fatal(err)
		}
		if counts["aten::conv1d"]+counts["aten::_convolution"] != 0 || counts["torchspeed::conv2d_gemm"] != convs {
			t.Errorf("%s: node counts after the pass %v", name, counts)
		}
		calls, worst := replayStream(t, fast, f, streamTol)
		t.Logf("%s: %d 1-D conv(s) swapped; %d calls within %.2g of PyTorch's", name, convs, calls, worst)
		fast.Close()
	}
}

func dwParams(stride, pad, dil [2]int64, groups int64) kerneltest.ConvParams {
	return kerneltest.ConvParams{Stride: stride, Padding: pad, Dilation: dil, Groups: groups}
}

// TestFastConvDepthwiseMatchesATen runs torchspeed::conv_dw (depthwise: groups == channels, one
// filter each) over Silero VAD v4's 1-D shapes (as 2-D ones of height 1) and small 2-D ones:
// strides, padding, dilation, batch 2, odd channel counts, bias and relu on and off, NCHW and
// channels-last inputs; every case must run torchspeed's loop and match a direct convolution in
// float64, as ATen's must. The loop has no AVX2 requirement: under TORCHSPEED_MAX_ISA=avx2 or
// scalar it runs that instruction set's copy. Larger outputs fall back (TestFastConvFallbacks).
func TestFastConvDepthwiseMatchesATen(t *testing.T) {
	one := [2]int64{1, 1}
	cases := []convCase{
		{1, 258, 1, 7, 258, 1, 5, dwParams(one, [2]int64{0, 2}, one, 258)}, // Silero v4's after the STFT
		{1, 16, 1, 4, 16, 1, 5, dwParams(one, [2]int64{0, 2}, one, 16)},
		{1, 32, 1, 2, 32, 1, 5, dwParams(one, [2]int64{0, 2}, one, 32)}, // kernel wider than the input
		{1, 32, 1, 1, 32, 1, 5, dwParams(one, [2]int64{0, 2}, one, 32)},
		{2, 17, 6, 6, 17, 3, 3, dwParams(one, one, one, 17)},            // 2-D, batch 2, odd channels
		{1, 24, 9, 7, 24, 3, 3, dwParams([2]int64{2, 2}, one, one, 24)}, // stride 2
		{1, 8, 10, 10, 8, 3, 5, dwParams([2]int64{1, 2}, [2]int64{2, 1}, [2]int64{2, 1}, 8)},
		{1, 3, 5, 5, 3, 7, 7, dwParams(one, [2]int64{3, 3}, one, 3)}, // kernel larger than the input
	}
	threads := min(2, torch.AvailableCPUs())
	r := rand.New(rand.NewPCG(11, 12))
	n := 0
	for i, c := range cases {
		for _, cl := range []bool{false, true} {
			relu, bias := (i+n)%2 == 0, n%3 != 2
			n++
			what := fmt.Sprintf("%v, channels-last %v, relu %v, bias %v", c, cl, relu, bias)
			x, w, b := convData(t, r, c, bias)
			if cl {
				x = channelsLastOf(t, x)
			}
			want, got, fast, err := convOn(threads, x, w, b, c.p, relu)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if !fast {
				t.Errorf("%s: ATen's convolution ran, not torchspeed's loop", what)
			}
			ref := refConv2d(t, x, w, b, c, relu)
			tol := 1e-5 + 1e-6*float64(c.kh*c.kw)
			if i, d := farthest(t, got, ref); d > tol {
				t.Fatalf("%s: element %d of %d is %.7g, the float64 convolution gives %.7g", what, i, len(ref), float32s(t, got)[i], ref[i])
			}
			if i, d := farthest(t, want, ref); d > tol {
				t.Errorf("%s: ATen's convolution is off by %.3g at element %d", what, d, i)
			}
			want.Close()
			got.Close()
		}
	}
}

// TestFastConvPassOnSileroV4: Silero VAD v4 as its authors ship it gets every convolution swapped,
// its four depthwise ones (per sample-rate branch) to torchspeed::conv_dw, and each call of the
// recorded speech stream answers within sileroBound's float-reordering error of PyTorch's.
func TestFastConvPassOnSileroV4(t *testing.T) {
	skipWithoutFastKernels(t)
	f := fixtures.Load(t).Get(t, "silero_v4")
	m := loadFixture(t, f)
	fr, err := m.Freeze("reset_states")
	if err != nil {
		t.Fatal(err)
	}
	before, err := fr.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	fast, convs, _, err := fr.FastConv()
	fr.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	counts, err := fast.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	// Every conv here is 1-D: a chain of them shares its views (one conv reads the previous one's
	// 4-D output; one unsqueeze per input), so the pass adds fewer than an unsqueeze and a squeeze
	// per conv.
	views := func(c map[string]int) int { return c["aten::unsqueeze"] + c["aten::squeeze"] }
	if added := views(counts) - views(before); added >= 2*convs {
		t.Errorf("the pass added %d squeeze/unsqueeze nodes for %d 1-D convs: the chains' views are not shared", added, convs)
	} else {
		t.Logf("%d squeeze/unsqueeze nodes added for %d 1-D convs", added, convs)
	}
	// Two sample-rate branches (8 and 16 kHz), each with 4 depthwise convs among its 18.
	if counts["aten::conv1d"]+counts["aten::_convolution"] != 0 || counts["torchspeed::conv_dw"] != 8 ||
		counts["torchspeed::conv2d_gemm"]+counts["torchspeed::conv_dw"] != convs {
		t.Fatalf("node counts after the pass %v (%d swapped); want 8 torchspeed::conv_dw, no aten conv", counts, convs)
	}
	calls, worst := replayStream(t, fast, f, sileroBound)
	t.Logf("%d convs swapped (8 depthwise); %d calls within %.2g of PyTorch's", convs, calls, worst)
}

// channelsLastOf returns a channels-last copy of x, closed when the test ends.
func channelsLastOf(tb testing.TB, x *torch.Tensor) *torch.Tensor {
	tb.Helper()
	xc, err := x.ChannelsLast()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { xc.Close() })
	return xc
}

// sileroBound is the float-reordering error allowed on Silero's speech probability, as
// cmd/torchspeed's sileroBound: twice the rounding of a 1024-term sum.
const sileroBound = 2 * 1024 * (1.0 / (1 << 24)) / (1 - 1024*(1.0/(1<<24)))

// replayStream resets m (reset_states) and replays fixture f's recorded forward stream, failing
// at the first call whose outputs are further than bound from PyTorch's; it returns the number
// of calls and the largest difference.
func replayStream(t *testing.T, m *torch.Module, f fixtures.Fixture, bound float64) (calls int, worst float64) {
	t.Helper()
	r := streamref.Load(t, f, "forward")
	out, err := m.Call("reset_states")
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	for i := 0; i < r.Calls(); i++ {
		out, err := m.Call("forward", r.Args(i)...)
		if err != nil {
			t.Fatalf("%s call %d: %v", f.Name, i, err)
		}
		d, err := r.Diff(i, out)
		out.Close()
		if err != nil || d > bound {
			t.Fatalf("%s call %d: diff %.3g from PyTorch's (bound %.3g; %v)", f.Name, i, d, bound, err)
		}
		worst = max(worst, d)
	}
	return r.Calls(), worst
}

// BenchmarkConvDepthwise times at::conv2d and torchspeed::conv_dw (taps packed on each call, as
// kerneltest.Conv2d does) interleaved at one thread on Silero VAD v4's depthwise sizes and 2-D
// ones up to conv_dw's limit (8192 output elements), NCHW and channels-last, and reports medians.
func BenchmarkConvDepthwise(b *testing.B) {
	one := [2]int64{1, 1}
	for _, c := range []convCase{
		{1, 258, 1, 7, 258, 1, 5, dwParams(one, [2]int64{0, 2}, one, 258)},
		{1, 16, 1, 4, 16, 1, 5, dwParams(one, [2]int64{0, 2}, one, 16)},
		{1, 32, 1, 2, 32, 1, 5, dwParams(one, [2]int64{0, 2}, one, 32)},
		{1, 128, 7, 7, 128, 3, 3, dwParams(one, one, one, 128)},
		{1, 32, 16, 16, 32, 3, 3, dwParams(one, one, one, 32)},
		{1, 96, 18, 18, 96, 3, 3, dwParams([2]int64{2, 2}, one, one, 96)},
	} {
		for _, cl := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dx%dx%dx%d-k%dx%d-s%d-cl%v", c.n, c.ic, c.h, c.w, c.kh, c.kw, c.p.Stride[0], cl), func(b *testing.B) {
				r := rand.New(rand.NewPCG(13, 14))
				x, w, bias := convData(b, r, c, true)
				if cl {
					x = channelsLastOf(b, x)
				}
				var aten, fast []float64
				ran := true
				var err error
				b.ResetTimer()
				torch.Do(func() {
					if err = torch.SetNumThreadsOnThisThread(1); err != nil {
						return
					}
					for i := 0; i < b.N && err == nil; i++ {
						for _, k := range []kerneltest.Kernel{kerneltest.ATen, kerneltest.Fast} {
							t0 := time.Now()
							var y *torch.Tensor
							var f bool
							if y, f, err = kerneltest.Conv2d(x, w, bias, c.p, false, k); err != nil {
								return
							}
							d := float64(time.Since(t0).Nanoseconds())
							y.Close()
							if k == kerneltest.ATen {
								aten = append(aten, d)
							} else {
								fast = append(fast, d)
								ran = ran && f
							}
						}
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				a, f := median(aten), median(fast)
				b.ReportMetric(a/1e3, "aten-us")
				b.ReportMetric(f/1e3, "fast-us")
				b.ReportMetric(a/f, "ratio")
				if !ran {
					b.Error("ATen's fallback ran for torchspeed's op")
				}
			})
		}
	}
}
