package torch_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/bindings/torch/internal/kerneltest"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// addCase is one quantized add: the inputs' and the output's qparams.
type addCase struct {
	sa     float64
	za     int64
	sb     float64
	zb     int64
	s      float64
	z      int64
	dtype  torch.DType
	reason string
}

// addCases make ATen's two arithmetics (vector: fused multiply-add; scalar: subtract then
// multiply) round differently, and reach both ends of the types.
var addCases = []addCase{
	{0.1, 7, 0.05, 100, 0.1, 20, torch.QUint8, "b's steps half a's: sums on exact halves"},
	{0.0173, 37, 0.0291, 130, 0.0402, 64, torch.QUint8, "odd scales, like a ResNet's"},
	{0.3, 0, 0.7, 255, 0.3, 0, torch.QUint8, "zero points at both ends"},
	{0.001, 128, 0.002, 0, 1e-6, 128, torch.QUint8, "tiny output scale: saturates at both ends"},
	{30, 255, 50, 0, 1e4, 0, torch.QUint8, "huge output scale"},
	{1.2e36, 0, 1.3e36, 10, 1e-30, 100, torch.QUint8, "sums past float's range: +-inf"},
	{1.2e36, 0, 1.3e36, 10, 1e-30, 200, torch.QUint8, "the same, int32 wraps in ATen's vector quantize"},
	{0.1, 0, 0.1, -128, 0.2, 127, torch.QInt8, "qint8, zero points at the ends"},
	{0.0078125, -3, 0.015625, 5, 0.0078125, -128, torch.QInt8, "qint8, powers of two"},
	{0.013, 11, 0.021, -40, 0.017, 3, torch.QInt8, "qint8, odd scales"},
}

// addInputs are two quantized tensors of shape for c (channels-last when cl): every pair of
// integer values first (the whole product once n reaches 65536), then random ones.
func addInputs(t testing.TB, c addCase, shape []int64, cl bool, seed uint64) (*torch.Tensor, *torch.Tensor) {
	t.Helper()
	n := 1
	for _, s := range shape {
		n *= int(s)
	}
	lo, span := 0, 256
	if c.dtype == torch.QInt8 {
		lo = -128
	}
	r := rand.New(rand.NewPCG(seed, 11))
	mk := func(scale float64, zp int64, first func(i int) int) *torch.Tensor {
		x := make([]float32, n)
		for i := range x {
			q := lo + r.IntN(span)
			if i < 65536 && n >= 256 {
				q = lo + first(i)
			}
			x[i] = float32(float64(int64(q)-zp) * scale)
		}
		f, err := torch.NewTensor(x, shape)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if cl {
			g, err := f.ChannelsLast()
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			f = g
		}
		q, err := kerneltest.QuantizePerTensor(f, scale, zp, c.dtype, kerneltest.ATen)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	return mk(c.sa, c.za, func(i int) int { return i % span }), mk(c.sb, c.zb, func(i int) int { return (i / span) % span })
}

// addShapes: every length up to 300 (each remainder after ATen's 64- and 128-element blocks,
// in the serial case), ATen's chunk size and its neighbours, odd sizes past it (chunks with
// remainders of their own on two threads), and resnet50's residual sizes (big: the largest).
func addShapes(short, big bool) [][]int64 {
	var shapes [][]int64
	for n := int64(0); n <= 300; n++ {
		if !short || n%7 == 0 || n < 3 {
			shapes = append(shapes, []int64{1, n, 1, 1})
		}
	}
	shapes = append(shapes, []int64{1, 1, 1, 32767}, []int64{1, 1, 1, 32768}, []int64{1, 1, 1, 32769},
		[]int64{1, 3, 211, 107}, []int64{1, 2048, 7, 7})
	if big {
		shapes = append(shapes, []int64{1, 1024, 14, 14}, []int64{1, 512, 28, 28}, []int64{1, 256, 56, 56})
	}
	return shapes
}

// addKernels are torchspeed's kernels this CPU runs; ATen's is compared with each.
func addKernels(t *testing.T) []kerneltest.Kernel {
	kernels := []kerneltest.Kernel{kerneltest.Fast, kerneltest.Scalar}
	for _, k := range []kerneltest.Kernel{kerneltest.AVX2, kerneltest.AVX512} {
		x, err := torch.NewTensor([]float32{1}, []int64{1})
		if err != nil {
			t.Fatal(err)
		}
		q, err := kerneltest.QuantizePerTensor(x, 1, 0, torch.QUint8, kerneltest.ATen)
		if err != nil {
			t.Fatal(err)
		}
		y, err := kerneltest.QAdd(q, q, 1, 0, false, k)
		switch {
		case errors.Is(err, torch.Unsupported):
			t.Logf("kernel %d: this CPU lacks its instructions: not tested", k)
		case err != nil:
			t.Fatal(err)
		default:
			kernels = append(kernels, k)
			y.Close()
		}
		q.Close()
		x.Close()
	}
	return kernels
}

// TestFastAddKernelsMatchATen checks each of torchspeed's add kernels against ATen's
// quantized::add and add_relu, on one thread and two (ATen's chunks, each with its own scalar
// remainder), contiguous and channels-last, for every case.
func TestFastAddKernelsMatchATen(t *testing.T) {
	if !torch.FastQAddApplies() {
		t.Skip("libtorch is not 1.13 without FBGEMM: torchspeed's add is not swapped in")
	}
	kernels := addKernels(t)
	if os.Getenv("ATEN_CPU_CAPABILITY") != "" {
		kernels = kernels[:1] // a child of TestFastAddUnderEachATenKernel: ATen's block is what varies
	}
	threads := []int{1, min(2, torch.AvailableCPUs())}
	compared := 0
	for ci, c := range addCases {
		// resnet50's big sizes for two cases (the time -race takes); the other sizes for all.
		for si, shape := range addShapes(testing.Short(), !testing.Short() && ci < 2) {
			cl := si%2 == 1 && shape[1] > 1
			a, b := addInputs(t, c, shape, cl, uint64(ci*1000+si))
			for _, th := range threads {
				if th > 1 && a.Numel() <= 32768 {
					continue // one chunk on any number of threads
				}
				for _, relu := range []bool{false, true} {
					outs := make([]*torch.Tensor, len(kernels)+1)
					var doErr error
					torch.Do(func() {
						if doErr = torch.SetNumThreadsOnThisThread(th); doErr != nil {
							return
						}
						for i := range outs {
							k := kerneltest.ATen
							if i > 0 {
								k = kernels[i-1]
							}
							if outs[i], doErr = kerneltest.QAdd(a, b, c.s, c.z, relu, k); doErr != nil {
								return
							}
						}
					})
					if doErr != nil {
						t.Fatalf("case %d (%s), shape %v: %v", ci, c.reason, shape, doErr)
					}
					for i, k := range kernels {
						what := fmt.Sprintf("case %d (%s), shape %v, channels-last %v, %d thread(s), relu %v, kernel %d", ci, c.reason, shape, cl, th, relu, k)
						sameQuantized(t, what, outs[i+1], outs[0])
						addWithinStep(t, what, a, b, outs[i+1], c.s, c.z, relu)
						compared++
					}
					for _, o := range outs {
						o.Close()
					}
				}
			}
			a.Close()
			b.Close()
		}
	}
	t.Logf("%d kernel runs identical to ATen's (kernels %v)", compared, kernels)
}

// TestFastAddUnderEachATenKernel reruns TestFastAddKernelsMatchATen (short) in a child process
// under each of ATen's kernels (ATEN_CPU_CAPABILITY), whose vector width sets where the scalar
// remainder starts: torchspeed's add must follow the one ATen runs.
func TestFastAddUnderEachATenKernel(t *testing.T) {
	if os.Getenv("ATEN_CPU_CAPABILITY") != "" {
		t.Skip("a child run: ATEN_CPU_CAPABILITY is set")
	}
	if !torch.FastQAddApplies() {
		t.Skip("libtorch is not 1.13 without FBGEMM: torchspeed's add is not swapped in")
	}
	caps := []string{"default", "avx2"}
	if slices.Contains(addKernels(t), kerneltest.AVX512) {
		caps = append(caps, "avx512")
	}
	for _, cap := range caps {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFastAddKernelsMatchATen$", "-test.short", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "ATEN_CPU_CAPABILITY="+cap)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "identical to ATen's") {
			t.Fatalf("ATEN_CPU_CAPABILITY=%s: %v\n%s", cap, err, out)
		}
		t.Logf("ATEN_CPU_CAPABILITY=%s: passed", cap)
	}
}

// TestFastAddFallsBackToATen: what the kernels do not cover (the QNNPACK engine, broadcast
// shapes, mixed memory formats) gives ATen's result, and what ATen refuses fails through
// torchspeed's op too.
func TestFastAddFallsBackToATen(t *testing.T) {
	c := addCases[1]
	a, b := addInputs(t, c, []int64{1, 8, 5, 7}, false, 1)
	defer a.Close()
	defer b.Close()
	acl, _ := addInputs(t, c, []int64{1, 8, 5, 7}, true, 2)
	defer acl.Close()
	bc, _ := addInputs(t, c, []int64{1, 8, 1, 1}, false, 3)
	defer bc.Close()
	// Under the QNNPACK engine ATen's add is QNNPACK's (other rounding): torchspeed's calls it.
	engine, err := torch.QEngine()
	if err != nil {
		t.Fatal(err)
	}
	engines, err := torch.SupportedQEngines()
	if err != nil {
		t.Fatal(err)
	}
	qnnpack := []string{engine}
	if slices.Contains(engines, "qnnpack") {
		qnnpack = append(qnnpack, "qnnpack")
	}
	defer func() {
		if err := torch.SetQEngine(engine); err != nil {
			t.Error(err)
		}
	}()
	for _, e := range qnnpack {
		if err := torch.SetQEngine(e); err != nil {
			t.Fatal(err)
		}
		for _, relu := range []bool{false, true} {
			want, err := kerneltest.QAdd(a, b, c.s, c.z, relu, kerneltest.ATen)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kerneltest.QAdd(a, b, c.s, c.z, relu, kerneltest.Fast)
			if err != nil {
				t.Fatal(err)
			}
			sameQuantized(t, fmt.Sprintf("engine %s, relu %v", e, relu), got, want)
			got.Close()
			want.Close()
		}
	}
	if err := torch.SetQEngine(engine); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]*torch.Tensor{{a, acl}, {acl, b}, {a, bc}} {
		for _, relu := range []bool{false, true} {
			want, err := kerneltest.QAdd(pair[0], pair[1], c.s, c.z, relu, kerneltest.ATen)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kerneltest.QAdd(pair[0], pair[1], c.s, c.z, relu, kerneltest.Fast)
			if err != nil {
				t.Fatal(err)
			}
			sameQuantized(t, fmt.Sprintf("%v + %v, relu %v", pair[0].Shape(), pair[1].Shape(), relu), got, want)
			got.Close()
			want.Close()
		}
	}
	x, err := torch.NewTensor([]float32{1, 2, 3}, []int64{3})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	q8, err := kerneltest.QuantizePerTensor(x, 0.1, 3, torch.QInt8, kerneltest.ATen)
	if err != nil {
		t.Fatal(err)
	}
	defer q8.Close()
	qu8, err := kerneltest.QuantizePerTensor(x, 0.1, 3, torch.QUint8, kerneltest.ATen)
	if err != nil {
		t.Fatal(err)
	}
	defer qu8.Close()
	for _, bad := range [][2]*torch.Tensor{{x, x}, {q8, qu8}} {
		_, aerr := kerneltest.QAdd(bad[0], bad[1], 0.1, 0, false, kerneltest.ATen)
		_, ferr := kerneltest.QAdd(bad[0], bad[1], 0.1, 0, false, kerneltest.Fast)
		if aerr == nil || ferr == nil {
			t.Errorf("%s + %s: ATen's error %v, torchspeed's %v: want both to fail", bad[0], bad[1], aerr, ferr)
		}
	}
	if _, err := kerneltest.QAdd(qu8, qu8, 0.1, 0, false, 5); !errors.Is(err, torch.InvalidArgument) {
		t.Errorf("kernel 5: %v, want an invalid-argument error", err)
	}
	if _, err := kerneltest.QAdd(qu8, nil, 0.1, 0, false, kerneltest.Fast); !errors.Is(err, torch.ErrNilHandle) {
		t.Errorf("adding nil: %v, want ErrNilHandle", err)
	}
}

// qmake makes a quantized tensor of integers ia with scale p[0] and zero point p[1]
// (torch._make_per_tensor_quantized_tensor: any value and scale, so that sums can be infinities and
// NaN), in the layout p[2] chooses: 0 as is, 1 channels-last, 2 the first channel only (for
// broadcasting); qstrides returns a tensor's strides.
const qmake = `
def qmake(self, ia: Tensor, p: Tensor) -> Tensor:
    q = torch._make_per_tensor_quantized_tensor(ia, float(p[0].item()), int(p[1].item()))
    layout = int(p[2].item())
    if layout == 1:
        q = q.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    elif layout == 2:
        q = q[:, :1]
    return q

def qstrides(self, q: Tensor) -> Tensor:
    return torch.tensor(q.stride())
`

// TestFastAddOnMadeTensors compares torchspeed's add with ATen's on tensors made from integers,
// for scales that make infinities and NaN (inf - inf) of sums, on each layout.
func TestFastAddOnMadeTensors(t *testing.T) {
	if !torch.FastQAddApplies() {
		t.Skip("libtorch is not 1.13 without FBGEMM: torchspeed's add is not swapped in")
	}
	m := loadFixture(t, fixtures.Load(t).Get(t, "digits"))
	defer m.Close()
	if err := m.Define(qmake); err != nil {
		t.Fatal(err)
	}
	mk := func(data any, shape []int64, scale float64, zp int64, layout int) *torch.Tensor {
		x, err := torch.NewTensorAny(data, shape)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		p, err := torch.NewTensor([]float64{scale, float64(zp), float64(layout)}, []int64{3})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		out, err := m.RunMethod("qmake", x, p)
		if err != nil || len(out) != 1 {
			t.Fatalf("qmake: %v (%d outputs)", err, len(out))
		}
		return out[0].Tensor
	}
	shape := []int64{1, 16, 47, 41} // 30832 elements: remainders of 48 after 64s and 112 after 128s
	cases := append(slices.Clone(addCases), addCase{3e36, 0, 3e36, 255, 1, 100, torch.QUint8, "inf - inf: NaN sums"},
		addCase{3e36, 0, 3e36, 127, 1, 5, torch.QInt8, "qint8 NaN sums"})
	total := 16 * 47 * 41
	for ci, c := range cases {
		r := rand.New(rand.NewPCG(uint64(ci), 5))
		ia, ib := make([]uint8, total), make([]uint8, total)
		for i := range ia {
			ia[i], ib[i] = uint8(i%256), uint8((i/256)%256)
			if i >= 65536 {
				ia[i], ib[i] = uint8(r.IntN(256)), uint8(r.IntN(256))
			}
		}
		var da, db any = ia, ib
		if c.dtype == torch.QInt8 {
			ja, jb := make([]int8, total), make([]int8, total)
			for i := range ia {
				ja[i], jb[i] = int8(ia[i]), int8(ib[i])
			}
			da, db = ja, jb
		}
		for layout := 0; layout < 3; layout++ {
			a := mk(da, shape, c.sa, c.za, min(layout, 1))
			b := mk(db, shape, c.sb, c.zb, layout)
			for _, relu := range []bool{false, true} {
				want, err := kerneltest.QAdd(a, b, c.s, c.z, relu, kerneltest.ATen)
				if err != nil {
					t.Fatal(err)
				}
				got, err := kerneltest.QAdd(a, b, c.s, c.z, relu, kerneltest.Fast)
				if err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("case %d (%s), layout %d, relu %v", ci, c.reason, layout, relu)
				sameQuantized(t, what, got, want)
				gs, err := m.RunMethod("qstrides", got)
				if err != nil {
					t.Fatal(err)
				}
				ws, err := m.RunMethod("qstrides", want)
				if err != nil {
					t.Fatal(err)
				}
				if g, w := exactValues(t, gs[0].Tensor), exactValues(t, ws[0].Tensor); !slices.Equal(g, w) || (layout == 1 && w[1] != 1) {
					t.Fatalf("%s: strides %v, ATen's %v (channels-last wanted for layout 1)", what, g, w)
				}
				torch.CloseOutputs(gs)
				torch.CloseOutputs(ws)
				got.Close()
				want.Close()
			}
			a.Close()
			b.Close()
		}
	}
}

// BenchmarkQAdd times ATen's quantized add_relu and torchspeed's on resnet50's residual sizes
// (channels-last quint8), interleaved call by call, and reports the medians and their ratio.
func BenchmarkQAdd(b *testing.B) {
	for _, threads := range []int{1, 2} {
		for _, shape := range [][]int64{{1, 256, 56, 56}, {1, 512, 28, 28}, {1, 1024, 14, 14}, {1, 2048, 7, 7}} {
			b.Run(fmt.Sprintf("%dT/%v", threads, shape), func(b *testing.B) {
				if threads > torch.AvailableCPUs() {
					b.Skip("not enough CPUs")
				}
				x, y := addInputs(b, addCases[1], shape, true, 1)
				defer x.Close()
				defer y.Close()
				ns := map[kerneltest.Kernel][]float64{}
				var doErr error // Do runs on an inference thread: b.Fatal only back here
				b.ResetTimer()
				torch.Do(func() {
					if doErr = torch.SetNumThreadsOnThisThread(threads); doErr != nil {
						return
					}
					for i := 0; i < b.N && doErr == nil; i++ {
						for _, k := range []kerneltest.Kernel{kerneltest.ATen, kerneltest.Fast} {
							t0 := time.Now()
							out, err := kerneltest.QAdd(x, y, 0.05, 10, true, k)
							el := time.Since(t0)
							if doErr = err; err != nil {
								return
							}
							out.Close()
							ns[k] = append(ns[k], float64(el.Nanoseconds()))
						}
					}
				})
				if doErr != nil {
					b.Fatal(doErr)
				}
				a, f := median(ns[kerneltest.ATen]), median(ns[kerneltest.Fast])
				b.ReportMetric(a/1e3, "aten-us")
				b.ReportMetric(f/1e3, "fast-us")
				b.ReportMetric(a/f, "ratio")
			})
		}
	}
}

// addWithinStep checks a quantized add against the float arithmetic it stands for, whatever
// kernel made it: (a - za) * sa + (b - zb) * sb (relu'd), requantized at (s, z), within one
// step: the add rounds once, and its float32 multipliers can move an exact half by one. Sums
// whose terms reach beyond float32's exact integers (|term / s| >= 2^22, or its overflow) are
// left to the comparison with ATen's bits.
func addWithinStep(t *testing.T, what string, a, b, out *torch.Tensor, s float64, z int64, relu bool) {
	t.Helper()
	qa, err := a.QParams()
	if err != nil {
		t.Fatal(err)
	}
	qb, err := b.QParams()
	if err != nil {
		t.Fatal(err)
	}
	if qa.Scales[0]/s >= 1<<22 || qb.Scales[0]/s >= 1<<22 {
		return // the float32 multipliers themselves are inexact or infinite (0 * inf is NaN)
	}
	ia, ib, io := intRepr(t, a), intRepr(t, b), intRepr(t, out)
	lo, hi := 0.0, 255.0
	if out.DType() == torch.QInt8 {
		lo, hi = -128, 127
	}
	for i := range io {
		ta, tb := float64(ia[i]-int(qa.ZeroPoints[0]))*qa.Scales[0], float64(ib[i]-int(qb.ZeroPoints[0]))*qb.Scales[0]
		if math.Abs(ta/s) >= 1<<22 || math.Abs(tb/s) >= 1<<22 {
			continue // each term on its own past float32's exact range (or its overflow)
		}
		r := ta + tb
		if relu {
			r = math.Max(r, 0)
		}
		want := math.Max(lo, math.Min(hi, math.RoundToEven(r/s)+float64(z)))
		if d := math.Abs(float64(io[i]) - want); d > 1 {
			t.Fatalf("%s: element %d is %d, the float sum %g requantizes to %g", what, i, io[i], r, want)
		}
	}
}
