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

// qdqCase is one quantization's parameters.
type qdqCase struct {
	scale float64
	zp    int64
	dtype torch.DType
}

// qdqCases cover both 8-bit types, zero points at and inside the ends of their ranges, scales
// that are powers of two (so that exact halves reach the rounding), odd scales, and scales whose
// reciprocal is huge (1e-20) or that ATen's own path handles (1e-40 is a float32 subnormal).
var qdqCases = []qdqCase{
	{1.0, 0, torch.QUint8}, {0.25, 128, torch.QUint8}, {0.0078125, 3, torch.QInt8}, {0.1, 0, torch.QInt8},
	{0.0173, 37, torch.QUint8}, {0.0173, -5, torch.QInt8}, {3.7, 255, torch.QUint8}, {2.0, -128, torch.QInt8},
	{1e-20, 0, torch.QUint8}, {1e-40, 10, torch.QUint8}, {0.5, 127, torch.QInt8},
}

// qdqValues are n values for c: specials (NaN, infinities, values past int64's range and just
// inside it, signed zero, a subnormal), every half step of the scale across the type's range and
// beyond (exact halves when the scale is a power of two), then normal noise wide enough to clamp.
func qdqValues(c qdqCase, n int, seed uint64) []float32 {
	v := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e30, -1e30, 3e9, -3e9,
		9.3e18, 9.2e18, float32(math.Copysign(0, -1)), 0, 1e-40, 0x1p63, -0x1p63, -0x1p64}
	for k := -700; k <= 700 && len(v) < n; k++ {
		v = append(v, float32(float64(k)/2*float64(float32(c.scale))))
	}
	r := rand.New(rand.NewPCG(seed, 7))
	for len(v) < n {
		v = append(v, float32(r.NormFloat64()*150*c.scale))
	}
	return v[:n]
}

// withinHalfStep checks a quantization against the float arithmetic it stands for, whatever
// kernel made it: a finite x inside the type's range comes back as (q - zp) * scale within half a
// step, plus the float32 rounding of x / scale (one ulp of x / scale, in steps) that can move an
// exact half; outside the range it is the nearest end.
func withinHalfStep(t *testing.T, what string, x, q *torch.Tensor, c qdqCase) {
	t.Helper()
	xs, err := x.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	qs := intRepr(t, q)
	qmin, qmax := 0.0, 255.0
	if c.dtype == torch.QInt8 {
		qmin, qmax = -128, 127
	}
	s := float64(float32(c.scale))
	if s < 1e-30 {
		return // the reciprocal overflows float: ATen's own special case, compared bit for bit above
	}
	for i, v := range xs {
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f/s) > 1<<62 {
			continue // the specials, compared with ATen's above
		}
		want := math.Max(qmin, math.Min(qmax, math.RoundToEven(f/s)+float64(c.zp)))
		steps := math.Abs(float64(qs[i]) - want)
		if slack := math.Abs(f/s) * 0x1p-23; steps > 0 && steps > 1-1e-9 && !(steps <= 1 && math.Abs(math.Abs(f/s-math.Trunc(f/s))-0.5) <= slack) {
			t.Fatalf("%s: element %d (%g) quantizes to %d; the float arithmetic gives %g", what, i, v, qs[i], want)
		}
	}
}

// sameQuantized fails unless got and want are the same quantized tensor: dtype, shape, qparams
// and integer representation.
func sameQuantized(t *testing.T, what string, got, want *torch.Tensor) {
	t.Helper()
	if got.DType() != want.DType() || !slices.Equal(got.Shape(), want.Shape()) {
		t.Fatalf("%s: %s %v, ATen gives %s %v", what, got.DType(), got.Shape(), want.DType(), want.Shape())
	}
	gq, err := got.QParams()
	if err != nil {
		t.Fatal(err)
	}
	wq, err := want.QParams()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gq.Scales, wq.Scales) || !slices.Equal(gq.ZeroPoints, wq.ZeroPoints) || gq.Axis != wq.Axis {
		t.Fatalf("%s: qparams %+v, ATen gives %+v", what, gq, wq)
	}
	g, w := intRepr(t, got), intRepr(t, want)
	for i := range w {
		if g[i] != w[i] {
			t.Fatalf("%s: element %d of %d is %d, ATen gives %d", what, i, len(w), g[i], w[i])
		}
	}
}

func intRepr(t *testing.T, x *torch.Tensor) []int {
	t.Helper()
	var out []int
	switch x.DType() {
	case torch.QUint8:
		d, err := torch.Data[uint8](x)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range d {
			out = append(out, int(v))
		}
	case torch.QInt8:
		d, err := torch.Data[int8](x)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range d {
			out = append(out, int(v))
		}
	default:
		t.Fatalf("dtype %s is not an 8-bit quantized one", x.DType())
	}
	return out
}

// sameBits fails unless two float tensors hold the same bits.
func sameBits(t *testing.T, what string, got, want *torch.Tensor) {
	t.Helper()
	if got.DType() != want.DType() || !slices.Equal(got.Shape(), want.Shape()) {
		t.Fatalf("%s: %s %v, want %s %v", what, got.DType(), got.Shape(), want.DType(), want.Shape())
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
		if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
			t.Fatalf("%s: element %d is %v, want %v", what, i, g[i], w[i])
		}
	}
}

// TestFastQDQKernelsMatchATen checks each of torchspeed's kernels against ATen's
// quantize_per_tensor and dequantize, on one thread (small tensors) and two (big ones, split
// into chunks), for every case and an empty tensor.
func TestFastQDQKernelsMatchATen(t *testing.T) {
	if !torch.FastQDQApplies() {
		t.Skip("libtorch has FBGEMM: its quantize/dequantize are not the scalar loops torchspeed's ops reproduce")
	}
	threads := min(2, torch.AvailableCPUs())
	// 1x64x56x56 is three of the ops' parallel chunks.
	shapes := [][]int64{{1037}, {1, 64, 56, 56}, {0, 3}, {1}}
	if testing.Short() {
		shapes = [][]int64{{1037}, {0, 3}}
	}
	ran := map[kerneltest.Kernel]bool{}
	for _, kernel := range []kerneltest.Kernel{kerneltest.Fast, kerneltest.Scalar, kerneltest.AVX2, kerneltest.AVX512} {
		for _, shape := range shapes {
			n := 1
			for _, s := range shape {
				n *= int(s)
			}
			for ci, c := range qdqCases {
				what := fmt.Sprintf("kernel %d, shape %v, scale %g, zero point %d, %s", kernel, shape, c.scale, c.zp, c.dtype)
				x, err := torch.NewTensor(qdqValues(c, n, uint64(ci)), shape)
				if err != nil {
					t.Fatal(err)
				}
				// Do runs the ops on an inference thread (parallel there); the checks, which may
				// stop the test, run back here.
				var want, got, dwant, dgot *torch.Tensor
				var doErr error
				torch.Do(func() {
					if doErr = torch.SetNumThreadsOnThisThread(threads); doErr != nil {
						return
					}
					if want, doErr = kerneltest.QuantizePerTensor(x, c.scale, c.zp, c.dtype, kerneltest.ATen); doErr != nil {
						return
					}
					if got, doErr = kerneltest.QuantizePerTensor(x, c.scale, c.zp, c.dtype, kernel); doErr != nil {
						return
					}
					if dwant, doErr = kerneltest.Dequantize(want, kerneltest.ATen); doErr != nil {
						return
					}
					dgot, doErr = kerneltest.Dequantize(want, kernel)
				})
				skip := errors.Is(doErr, torch.Unsupported) && kernel > kerneltest.Scalar
				if doErr != nil && !skip {
					t.Fatalf("%s: %v", what, doErr)
				}
				if !skip {
					sameQuantized(t, what, got, want)
					sameBits(t, what+", dequantize", dgot, dwant)
					withinHalfStep(t, what, x, got, c)
				}
				for _, y := range []*torch.Tensor{want, got, dwant, dgot} {
					if y != nil {
						y.Close()
					}
				}
				x.Close()
				if skip {
					t.Logf("kernel %d: this CPU lacks its instructions: not tested", kernel)
					break
				}
				ran[kernel] = true
			}
		}
	}
	if !ran[kerneltest.Fast] || !ran[kerneltest.Scalar] {
		t.Fatalf("kernels tested: %v: want the fast and the scalar ones at least", ran)
	}
}

// TestFastQDQKernelsRefuseWhatATenRefuses: arguments ATen rejects fail the same way through
// torchspeed's op, and a non-float input goes to ATen.
func TestFastQDQKernelsRefuseWhatATenRefuses(t *testing.T) {
	x, err := torch.NewTensor([]float32{1, 2, 3}, []int64{3})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	for _, c := range []qdqCase{{1, 300, torch.QUint8}, {1, -129, torch.QInt8}, {1, 0, torch.Float32}} {
		_, aerr := kerneltest.QuantizePerTensor(x, c.scale, c.zp, c.dtype, kerneltest.ATen)
		_, ferr := kerneltest.QuantizePerTensor(x, c.scale, c.zp, c.dtype, kerneltest.Fast)
		if aerr == nil || ferr == nil {
			t.Errorf("%+v: ATen's error %v, torchspeed's %v: want both to fail", c, aerr, ferr)
		}
	}
	if _, err := kerneltest.Dequantize(x, 5); !errors.Is(err, torch.InvalidArgument) {
		t.Errorf("kernel 5: %v, want an invalid-argument error", err)
	}
	// dequantize of a float tensor is ATen's (a float copy) either way.
	d, err := kerneltest.Dequantize(x, kerneltest.Fast)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sameBits(t, "dequantize of a float tensor", d, x)
}

// qdqProbe quantizes and dequantizes its input after a layout change chosen by p[3]
// (contiguous, channels-last (by permutes: the C++ compiler has no torch.channels_last),
// transposed view, strided slice); the dtype is c10::ScalarType's number
// (12 qint8, 13 quint8), for the same reason, returning what must match
// between ATen's ops and torchspeed's: integer values, strides (memory format), qparams.
const qdqProbe = `
def qdq_probe(self, x: Tensor, p: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    scale = float(p[0].item())
    zp = int(p[1].item())
    layout = int(p[3].item())
    if layout == 1:
        x = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    elif layout == 2:
        x = x.transpose(1, 3)
    elif layout == 3:
        x = x[:, :, ::2, 1:]
    dtype = 13
    if int(p[2].item()) == 1:
        dtype = 12
    q = torch.quantize_per_tensor(x, scale, zp, dtype)
    d = torch.dequantize(q)
    dt = torch.dequantize(q.transpose(1, 2))
    return q.int_repr(), torch.tensor(q.stride()), torch.full([1], q.q_scale(), dtype=7), torch.tensor([q.q_zero_point()]), d, torch.tensor(d.stride()), dt, torch.tensor(dt.stride())
`

// TestFastQDQPassMatchesATenAcrossLayouts runs a TorchScript method before and after FastQDQ on
// every layout and case: the outputs (values and strides) must be the same bits.
func TestFastQDQPassMatchesATenAcrossLayouts(t *testing.T) {
	if !torch.FastQDQApplies() {
		t.Skip("libtorch has FBGEMM: its quantize/dequantize are not the scalar loops torchspeed's ops reproduce")
	}
	f := fixtures.Load(t).Get(t, "digits")
	m := loadFixture(t, f)
	if err := m.Define(qdqProbe); err != nil {
		t.Fatal(err)
	}
	fast, n, err := m.FastQDQ()
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	if n.Quantizes != 1 || n.Dequantizes != 2 || n.Adds != 0 {
		t.Fatalf("FastQDQ swapped %+v, want 1 quantize and 2 dequantize calls", n)
	}
	shape := []int64{2, 6, 10, 12}
	for ci, c := range qdqCases {
		signed := 0.0
		if c.dtype == torch.QInt8 {
			signed = 1
		}
		x, err := torch.NewTensor(qdqValues(c, 2*6*10*12, uint64(ci)), shape)
		if err != nil {
			t.Fatal(err)
		}
		for layout := 0; layout < 4; layout++ {
			p, err := torch.NewTensor([]float64{c.scale, float64(c.zp), signed, float64(layout)}, []int64{4})
			if err != nil {
				t.Fatal(err)
			}
			want, err := m.RunMethod("qdq_probe", x, p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fast.RunMethod("qdq_probe", x, p)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("layout %d, scale %g, zero point %d, %s", layout, c.scale, c.zp, c.dtype)
			if len(got) != len(want) {
				t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
			}
			for i := range want {
				if g, w := exactValues(t, got[i].Tensor), exactValues(t, want[i].Tensor); !slices.Equal(g, w) {
					t.Fatalf("%s: output %d is %v..., ATen's %v...", what, i, g[:min(8, len(g))], w[:min(8, len(w))])
				}
			}
			// The probe does change the layout: channels-last strides in, channels-last out.
			if st := exactValues(t, want[1].Tensor); layout == 1 && !slices.Equal(st, []uint64{720, 1, 72, 6}) {
				t.Fatalf("%s: quantized strides %v, want channels-last [720 1 72 6]", what, st)
			}
			torch.CloseOutputs(got)
			torch.CloseOutputs(want)
			p.Close()
		}
		x.Close()
	}
}

// TestFastQDQPassOnINT8Models: on PyTorch's own INT8 models, FastQDQ swaps the calls (leaving
// the original alone) and the outputs stay the same bits.
func TestFastQDQPassOnINT8Models(t *testing.T) {
	if !torch.FastQDQApplies() {
		t.Skip("libtorch has FBGEMM: its quantize/dequantize are not the scalar loops torchspeed's ops reproduce")
	}
	man := fixtures.Load(t)
	for _, name := range []string{"digits", "resnet18"} {
		f := man.Get(t, name)
		if f.QuantRef == nil {
			t.Fatalf("%s has no INT8 reference", name)
		}
		m, err := torch.LoadWithEngine(f.Path(f.QuantRef.File), f.QuantRef.Engine)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Eval(); err != nil {
			t.Fatal(err)
		}
		fast, n, err := m.FastQDQ()
		if err != nil {
			t.Fatal(err)
		}
		if n.Quantizes < 1 || n.Dequantizes < 1 {
			t.Errorf("%s: %+v swapped, want at least one quantize and one dequantize", name, n)
		}
		counts, err := fast.NodeCounts()
		if err != nil {
			t.Fatal(err)
		}
		orig, err := m.NodeCounts()
		if err != nil {
			t.Fatal(err)
		}
		if counts["aten::quantize_per_tensor"] != 0 || counts["torchspeed::quantize_per_tensor"] == 0 || orig["aten::quantize_per_tensor"] == 0 || orig["torchspeed::quantize_per_tensor"] != 0 {
			t.Errorf("%s: node counts after the pass %v, of the original %v", name, keysWith(counts, "quantize"), keysWith(orig, "quantize"))
		}
		// resnet18's residual blocks end in quantized::add_relu; all become torchspeed's.
		adds := orig["quantized::add"] + orig["quantized::add_relu"]
		if torch.FastQAddApplies() && (n.Adds != adds || counts["quantized::add"]+counts["quantized::add_relu"] != 0 || counts["torchspeed::add"]+counts["torchspeed::add_relu"] != adds || (name == "resnet18" && adds == 0)) {
			t.Errorf("%s: %d adds swapped; node counts after the pass %v, of the original %v", name, n.Adds, keysWith(counts, "add"), keysWith(orig, "add"))
		}
		in := tensorsOf(t, f.InputArrays(t))
		want, err := m.Forward(in...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fast.Forward(in...)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			sameBits(t, name+" output "+want[i].Name, got[i].Tensor, want[i].Tensor)
		}
		t.Logf("%s: %+v swapped; outputs identical", name, n)
		torch.CloseOutputs(got)
		torch.CloseOutputs(want)
		fast.Close()
		// After optimize_for_inference (Load applies fast_qdq last, on its result) likewise.
		opt, err := m.OptimizeForInference()
		if err != nil {
			t.Fatal(err)
		}
		fastOpt, n2, err := opt.FastQDQ()
		if err != nil {
			t.Fatal(err)
		}
		if n2.Quantizes < 1 || n2.Adds != n.Adds {
			t.Errorf("%s + optimize_for_inference: %+v swapped, want at least one quantize and %d adds", name, n2, n.Adds)
		}
		want, err = opt.Forward(in...)
		if err != nil {
			t.Fatal(err)
		}
		got, err = fastOpt.Forward(in...)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			sameBits(t, name+" + optimize_for_inference output "+want[i].Name, got[i].Tensor, want[i].Tensor)
		}
		torch.CloseOutputs(got)
		torch.CloseOutputs(want)
		fastOpt.Close()
		opt.Close()
		m.Close()
	}
}

// exactValues are a tensor's elements as bits (floats) or values (integers), for exact
// comparisons.
func exactValues(t *testing.T, x *torch.Tensor) []uint64 {
	t.Helper()
	var out []uint64
	var err error
	switch x.DType() {
	case torch.Float64:
		var d []float64
		d, err = torch.Data[float64](x)
		for _, v := range d {
			out = append(out, math.Float64bits(v))
		}
	case torch.Int64:
		var d []int64
		d, err = torch.Data[int64](x)
		for _, v := range d {
			out = append(out, uint64(v))
		}
	default:
		var d []float32
		d, err = x.Float32s()
		for _, v := range d {
			out = append(out, uint64(math.Float32bits(v)))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keysWith(m map[string]int, sub string) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if strings.Contains(k, sub) {
			out[k] = v
		}
	}
	return out
}

// BenchmarkQDQ times ATen's quantize_per_tensor and dequantize against torchspeed's, alternating
// in rounds on an inference thread at 1 and 2 threads, and reports each median and the ratios
// (ATen's time over torchspeed's).
func BenchmarkQDQ(b *testing.B) {
	for _, threads := range []int{1, 2} {
		for _, shape := range [][]int64{{1, 3, 224, 224}, {1, 64, 112, 112}, {1, 144, 112, 112}} {
			b.Run(fmt.Sprintf("%dT/%v", threads, shape), func(b *testing.B) {
				if threads > torch.AvailableCPUs() {
					b.Skip("not enough CPUs")
				}
				c := qdqCase{0.02, 128, torch.QUint8}
				n := 1
				for _, s := range shape {
					n *= int(s)
				}
				x, err := torch.NewTensor(qdqValues(c, n, 1), shape)
				if err != nil {
					b.Fatal(err)
				}
				defer x.Close()
				q, err := kerneltest.QuantizePerTensor(x, c.scale, c.zp, c.dtype, kerneltest.ATen)
				if err != nil {
					b.Fatal(err)
				}
				defer q.Close()
				ns := map[string][]float64{}
				var doErr error // Do runs on an inference thread: b.Fatal only back here
				timeOne := func(key string, f func() (*torch.Tensor, error)) {
					t0 := time.Now()
					out, err := f()
					el := time.Since(t0)
					if err != nil {
						doErr = err
						return
					}
					out.Close()
					ns[key] = append(ns[key], float64(el.Nanoseconds()))
				}
				b.ResetTimer()
				torch.Do(func() {
					if doErr = torch.SetNumThreadsOnThisThread(threads); doErr != nil {
						return
					}
					for i := 0; i < b.N && doErr == nil; i++ {
						for _, k := range []kerneltest.Kernel{kerneltest.ATen, kerneltest.Fast} {
							timeOne(fmt.Sprintf("q%d", k), func() (*torch.Tensor, error) { return kerneltest.QuantizePerTensor(x, c.scale, c.zp, c.dtype, k) })
							timeOne(fmt.Sprintf("dq%d", k), func() (*torch.Tensor, error) { return kerneltest.Dequantize(q, k) })
						}
					}
				})
				if doErr != nil {
					b.Fatal(doErr)
				}
				qa, qf, da, df := median(ns["q0"]), median(ns["q1"]), median(ns["dq0"]), median(ns["dq1"])
				b.ReportMetric(qa/1e3, "aten-q-us")
				b.ReportMetric(qf/1e3, "fast-q-us")
				b.ReportMetric(qa/qf, "q-ratio")
				b.ReportMetric(da/1e3, "aten-dq-us")
				b.ReportMetric(df/1e3, "fast-dq-us")
				b.ReportMetric(da/df, "dq-ratio")
			})
		}
	}
}
