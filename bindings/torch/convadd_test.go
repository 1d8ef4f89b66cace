package torch_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/bindings/torch/internal/kerneltest"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// convAddCase is one quantized conv + add: shapes, the conv's and the add's qparams.
type convAddCase struct {
	name                    string
	n, c, h, w, o, k        int64
	stride, pad, groups     int64
	perChannel, bias        bool
	relu, residualFirst     bool
	sx                      float64
	zx                      int64
	sw                      float64 // weight scale (channel i gets sw * (1 + i%5 / 10) per channel); 0: conv std ~ 40 sc
	sc                      float64 // the conv's output
	zc                      int64
	sr                      float64 // the residual
	zr                      int64
	s                       float64 // the add's output
	z                       int64
	wantSaturated0, want255 bool // the case must reach both ends of u8 in the fused output (and saturates the pair's conv)
}

var convAddCases = []convAddCase{
	{name: "3x3 relu, odd channels", n: 1, c: 7, h: 9, w: 11, o: 13, k: 3, stride: 1, pad: 1, groups: 1, perChannel: true, bias: true, relu: true,
		sx: 0.05, zx: 0, sw: 0, sc: 0.08, zc: 64, sr: 0.06, zr: 0, s: 0.1, z: 0},
	{name: "3x3 stride 2, residual first, zero points", n: 2, c: 5, h: 10, w: 9, o: 6, k: 3, stride: 2, pad: 1, groups: 1, perChannel: true, bias: true, relu: true, residualFirst: true,
		sx: 0.04, zx: 17, sw: 0, sc: 0.11, zc: 130, sr: 0.07, zr: 100, s: 0.13, z: 9},
	{name: "1x1 no relu (mobilenet's add), per tensor", n: 1, c: 16, h: 7, w: 7, o: 24, k: 1, stride: 1, pad: 0, groups: 1, bias: false,
		sx: 0.03, zx: 5, sw: 0, sc: 0.05, zc: 128, sr: 0.04, zr: 120, s: 0.06, z: 125},
	{name: "1x1 stride 2, no relu, residual first", n: 1, c: 9, h: 8, w: 8, o: 11, k: 1, stride: 2, pad: 0, groups: 1, perChannel: true, bias: true, residualFirst: true,
		sx: 0.05, zx: 3, sw: 0, sc: 0.04, zc: 110, sr: 0.05, zr: 77, s: 0.05, z: 100},
	{name: "saturates at 0 and 255", n: 1, c: 8, h: 6, w: 6, o: 8, k: 3, stride: 1, pad: 1, groups: 1, perChannel: true, bias: true,
		sx: 0.1, zx: 0, sw: 0.03, sc: 0.2, zc: 128, sr: 0.1, zr: 128, s: 0.02, z: 128, wantSaturated0: true, want255: true},
	{name: "resnet50's 1x1 expansion, 64 -> 256 at 14x14 (brgconv sizes)", n: 1, c: 64, h: 14, w: 14, o: 256, k: 1, stride: 1, pad: 0, groups: 1, perChannel: true, bias: true, relu: true,
		sx: 0.03, zx: 0, sw: 0, sc: 0.05, zc: 70, sr: 0.04, zr: 37, s: 0.06, z: 0},
	{name: "resnet50's 3x3, 128 channels at 28x28", n: 1, c: 128, h: 28, w: 28, o: 128, k: 3, stride: 1, pad: 1, groups: 1, perChannel: true, bias: true, relu: true,
		sx: 0.02, zx: 0, sw: 0, sc: 0.04, zc: 90, sr: 0.05, zr: 11, s: 0.05, z: 0},
	{name: "grouped 3x3 relu", n: 1, c: 8, h: 7, w: 7, o: 8, k: 3, stride: 1, pad: 1, groups: 2, perChannel: true, bias: true, relu: true,
		sx: 0.05, zx: 2, sw: 0, sc: 0.07, zc: 60, sr: 0.05, zr: 30, s: 0.08, z: 4},
}

// convAddInputs makes x, the residual, the weight (integers times its scales), the scales and the
// bias of c, and their exact float values for the reference.
type convAddData struct {
	x, r, w, ws, b *torch.Tensor
	xf, rf, wf, bf []float64
	ho, wo         int64
}

func makeConvAddData(t *testing.T, c convAddCase, seed uint64) *convAddData {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	d := &convAddData{}
	d.ho = (c.h+2*c.pad-c.k)/c.stride + 1
	d.wo = (c.w+2*c.pad-c.k)/c.stride + 1
	quant := func(shape []int64, scale float64, zp int64, levels int, vals *[]float64) *torch.Tensor {
		n := shape[0] * shape[1] * shape[2] * shape[3]
		f := make([]float32, n)
		*vals = make([]float64, n)
		for i := range f {
			q := int64(rng.IntN(levels))
			(*vals)[i] = float64(q-zp) * scale
			f[i] = float32((*vals)[i])
		}
		ft, err := torch.NewTensor(f, shape)
		if err != nil {
			t.Fatal(err)
		}
		defer ft.Close()
		cl, err := ft.ChannelsLast()
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		q, err := kerneltest.QuantizePerTensor(cl, scale, zp, torch.QUint8, kerneltest.ATen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}
	d.x = quant([]int64{c.n, c.c, c.h, c.w}, c.sx, c.zx, activationLevels(), &d.xf)
	d.r = quant([]int64{c.n, c.o, d.ho, d.wo}, c.sr, c.zr, 256, &d.rf)
	icg := c.c / c.groups
	nw := c.o * icg * c.k * c.k
	if c.sw == 0 { // weights that put the conv's spread at ~40 of its output quanta
		l := float64(activationLevels()) // x uniform on 0..l-1: mean (l-1)/2, variance (l*l-1)/12
		xrms := c.sx * math.Sqrt(math.Pow((l-1)/2-float64(c.zx), 2)+(l*l-1)/12)
		c.sw = 40 * c.sc / (math.Sqrt(float64(icg*c.k*c.k)) * xrms * 73)
	}
	scales := []float32{float32(c.sw)}
	if c.perChannel {
		scales = make([]float32, c.o)
		for i := range scales {
			scales[i] = float32(c.sw * (1 + float64(i%5)/10))
		}
	}
	wf := make([]float32, nw)
	d.wf = make([]float64, nw)
	per := icg * c.k * c.k
	for i := range wf {
		s := float64(scales[0])
		if c.perChannel {
			s = float64(scales[int64(i)/per])
		}
		q := int64(rng.IntN(255)) - 127
		wf[i] = float32(float64(q) * s)
		d.wf[i] = float64(q) * float64(float32(s)) // ATen rounds w / scale back to q exactly
	}
	var err error
	if d.w, err = torch.NewTensor(wf, []int64{c.o, icg, c.k, c.k}); err != nil {
		t.Fatal(err)
	}
	if d.ws, err = torch.NewTensor(scales, []int64{int64(len(scales))}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.w.Close(); d.ws.Close() })
	if c.bias {
		bf := make([]float32, c.o)
		d.bf = make([]float64, c.o)
		for i := range bf {
			bf[i] = float32(rng.Float64()*2 - 1)
			d.bf[i] = float64(bf[i])
		}
		if d.b, err = torch.NewTensor(bf, []int64{c.o}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.b.Close() })
	}
	return d
}

// activationLevels is how many u8 values a convolution's input takes where torchspeed quantizes
// on this CPU: 256, or 128 (7 bits: reduce_range) where oneDNN's INT8 kernels add pairs of
// u8 x s8 products in saturating int16 (no VNNI, or ONEDNN_MAX_CPU_ISA below it). 255*127*2
// overflows int16, 127*128*2 does not: with 7-bit inputs the convolution is exact on every x86
// CPU, and the bounds below hold on every path.
func activationLevels() int {
	if quant.ExactU8S8() {
		return 256
	}
	return 128
}

// convFloat is the float convolution of the dequantized x and w plus the bias, [n, o, ho, wo].
func convFloat(c convAddCase, d *convAddData) []float64 {
	out := make([]float64, c.n*c.o*d.ho*d.wo)
	icg, ocg := c.c/c.groups, c.o/c.groups
	for n := int64(0); n < c.n; n++ {
		for o := int64(0); o < c.o; o++ {
			g := o / ocg
			for y := int64(0); y < d.ho; y++ {
				for x := int64(0); x < d.wo; x++ {
					acc := 0.0
					if d.bf != nil {
						acc = d.bf[o]
					}
					for i := int64(0); i < icg; i++ {
						for ky := int64(0); ky < c.k; ky++ {
							for kx := int64(0); kx < c.k; kx++ {
								iy, ix := y*c.stride-c.pad+ky, x*c.stride-c.pad+kx
								if iy < 0 || iy >= c.h || ix < 0 || ix >= c.w {
									continue
								}
								xv := d.xf[((n*c.c+g*icg+i)*c.h+iy)*c.w+ix]
								acc += xv * d.wf[((o*icg+i)*c.k+ky)*c.k+kx]
							}
						}
					}
					out[((n*c.o+o)*d.ho+y)*d.wo+x] = acc
				}
			}
		}
	}
	return out
}

func quantU8(v, scale float64, zp int64) int {
	q := math.RoundToEven(v/scale) + float64(zp)
	return int(math.Max(0, math.Min(255, q)))
}

// TestConvAddMatchesReferences checks torchspeed::conv2d_add against (a) ATen's unfused
// quantized::conv2d + quantized::add[_relu]: the pair rounds the conv's output to u8 (error up to
// sc/2 in value, sc/(2s) of the add's quanta) before the add rounds again (half a quantum), where
// the fused op rounds once (half a quantum): so they differ by at most sc/(2s) + 1 quanta,
// except where the pair's conv output saturated at 0 or 255 (then it lost more); and against
// (b) the float computation quantized once with the add's qparams: within 1 quantum.
func TestConvAddMatchesReferences(t *testing.T) {
	if why := torch.ConvAddUnavailable(); why != "" {
		t.Skip(why)
	}
	if err := torch.SetQEngine("onednn"); err != nil {
		t.Skipf("no onednn engine: %v", err)
	}
	for ci, c := range convAddCases {
		for _, relu := range []bool{c.relu, !c.relu} {
			c := c
			c.relu = relu
			d := makeConvAddData(t, c, uint64(ci))
			args := kerneltest.QConvAddArgs{Weight: d.w, WeightScales: d.ws, Bias: d.b, Stride: c.stride, Padding: c.pad, Dilation: 1,
				Groups: c.groups, ConvScale: c.sc, ConvZeroPoint: c.zc, Scale: c.s, ZeroPoint: c.z, Relu: c.relu, ResidualFirst: c.residualFirst}
			pair, _, err := kerneltest.QConv2dAdd(d.x, d.r, args, kerneltest.ATen)
			if err != nil {
				t.Fatalf("%s: ATen's pair: %v", c.name, err)
			}
			fused, ran, err := kerneltest.QConv2dAdd(d.x, d.r, args, kerneltest.Fast)
			if err != nil {
				t.Fatalf("%s: fused: %v", c.name, err)
			}
			if !ran {
				t.Fatalf("%s relu=%t: torchspeed::conv2d_add fell back to ATen's pair", c.name, c.relu)
			}
			qp, err := fused.QParams()
			if err != nil {
				t.Fatal(err)
			}
			if qp.Scales[0] != c.s || qp.ZeroPoints[0] != c.z || fused.Shape()[1] != c.o {
				t.Fatalf("%s: fused output qparams %+v shape %v, want scale %g zero point %d", c.name, qp, fused.Shape(), c.s, c.z)
			}
			pv, fv := intRepr(t, pair), intRepr(t, fused)
			ref := convFloat(c, d)
			bound := c.sc/(2*c.s) + 1 + 1e-6
			equal, compared, lo, hi := 0, 0, 0, 0
			for i, y := range ref {
				v := y + d.rf[i]
				if c.relu {
					v = math.Max(v, 0)
				}
				want := quantU8(v, c.s, c.z)
				if diff := fv[i] - want; diff < -1 || diff > 1 {
					t.Fatalf("%s relu=%t: element %d is %d, the float computation quantizes to %d (value %g)", c.name, c.relu, i, fv[i], want, v)
				}
				if fv[i] == 0 {
					lo++
				}
				if fv[i] == 255 {
					hi++
				}
				cq := math.RoundToEven(y/c.sc) + float64(c.zc)
				if cq <= 0 || cq >= 255 {
					continue // the pair's conv output saturated
				}
				compared++
				if pv[i] == fv[i] {
					equal++
				}
				if diff := math.Abs(float64(pv[i] - fv[i])); diff > bound {
					t.Fatalf("%s relu=%t: element %d is %d, ATen's pair gives %d: %g quanta apart, bound %.3f", c.name, c.relu, i, fv[i], pv[i], diff, bound)
				}
			}
			if !c.wantSaturated0 && compared < len(ref)*3/4 {
				t.Errorf("%s: only %d of %d elements where the pair's conv did not saturate: the case tests little", c.name, compared, len(ref))
			}
			if (c.wantSaturated0 && !c.relu && lo == 0) || (c.want255 && hi == 0) {
				t.Errorf("%s: %d zeros and %d 255s in the output: the case does not saturate as meant", c.name, lo, hi)
			}
			t.Logf("%s relu=%t: %d elements, %.1f%% exactly ATen's pair (of %d comparable; bound %.2f quanta), %d at 0, %d at 255",
				c.name, c.relu, len(ref), 100*float64(equal)/float64(max(compared, 1)), compared, bound, lo, hi)
			pair.Close()
			fused.Close()
		}
	}
}

// TestConvAddPassOnResnet18 fuses the fixture's INT8 resnet18 (PyTorch's quantize_jit, onednn):
// its 8 conv + add_relu pairs become torchspeed::conv2d_add and the outputs stay those of the
// unfused model up to the pair's extra rounding.
func TestConvAddPassOnResnet18(t *testing.T) {
	f, m := resnet18INT8(t)
	defer m.Close()
	if err := m.Eval(); err != nil {
		t.Fatal(err)
	}
	fused, n, err := m.FuseConvAdd()
	if err != nil {
		t.Fatal(err)
	}
	defer fused.Close()
	counts, err := fused.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	if n != 8 || counts["quantized::add_relu"] != 0 || counts["torchspeed::conv2d_add"] != 8 {
		t.Fatalf("%d pairs fused; node counts after the pass %v", n, keysWith(counts, "add"))
	}
	// After fast_qdq (its torchspeed::add_relu) the same pairs fuse.
	if fast, _, err := m.FastQDQ(); err != nil {
		t.Fatal(err)
	} else {
		ff, n2, err := fast.FuseConvAdd()
		if err != nil {
			t.Fatal(err)
		}
		if n2 != 8 {
			t.Errorf("after fast_qdq: %d pairs fused, want 8", n2)
		}
		ff.Close()
		fast.Close()
	}
	in := tensorsOf(t, f.InputArrays(t))
	want, err := m.Forward(in...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(want)
	for round := 0; round < 3; round++ { // the primitive cache's first and later calls
		got, err := fused.Forward(in...)
		if err != nil {
			t.Fatal(err)
		}
		g, err := got[0].Tensor.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		w, err := want[0].Tensor.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		cos := cosine(g, w)
		batch := int(want[0].Tensor.Shape()[0])
		classes := len(w) / batch
		for b := 0; b < batch; b++ {
			if validate.Argmax(g[b*classes:(b+1)*classes]) != validate.Argmax(w[b*classes:(b+1)*classes]) {
				t.Errorf("round %d: input %d: top-1 %d, unfused %d", round, b, validate.Argmax(g[b*classes:(b+1)*classes]), validate.Argmax(w[b*classes:(b+1)*classes]))
			}
		}
		// The fused op skips the pair's rounding of the conv's output: 1 - cosine scales with
		// the activation grid's step squared, 4x for 7-bit activations. 8-bit ones on kernels
		// that saturate them (no VNNI) clip where each model's weight blocking puts the pairs:
		// no bound follows, and the top-1 check above is what is left.
		minCos, bound := 0.999, true
		switch {
		case f.QuantRef.ReduceRange:
			minCos = 1 - 4*(1-minCos)
		case !quant.ExactU8S8():
			bound = false
		}
		if bound && cos < minCos {
			t.Errorf("round %d: cosine to the unfused model %.6f, want >= %.4f (reduce_range %v)", round, cos, minCos, f.QuantRef.ReduceRange)
		}
		if round == 0 {
			t.Logf("resnet18 INT8: %d pairs fused; cosine to the unfused model %.6f", n, cos)
		}
		torch.CloseOutputs(got)
	}
}

// convAddMethods are methods added to a module for the pass's aliasing rules: safe fuses its
// pair; after and input must stay unfused (the residual is read after the add; the residual is
// a graph input).
// (dtype 13 is quint8, 12 qint8: a defined method's source cannot name torch's dtypes.)
const convAddMethods = `
def safe(self, x: Tensor, wf: Tensor):
    q = torch.quantize_per_tensor(x, 0.05, 64, 13)
    wq = torch.quantize_per_tensor(wf, 0.01, 0, 12)
    p = ops.quantized.conv2d_prepack(wq, None, [1, 1], [1, 1], [1, 1], 1)
    r = ops.quantized.conv2d(q, p, 0.1, 10)
    c = ops.quantized.conv2d(q, p, 0.1, 12)
    return ops.quantized.add_relu(c, r, 0.2, 0).dequantize()

def after(self, x: Tensor, wf: Tensor):
    q = torch.quantize_per_tensor(x, 0.05, 64, 13)
    wq = torch.quantize_per_tensor(wf, 0.01, 0, 12)
    p = ops.quantized.conv2d_prepack(wq, None, [1, 1], [1, 1], [1, 1], 1)
    r = ops.quantized.conv2d(q, p, 0.1, 10)
    c = ops.quantized.conv2d(q, p, 0.1, 12)
    o = ops.quantized.add_relu(c, r, 0.2, 0)
    return o.dequantize(), r.dequantize()

def input(self, x: Tensor, r: Tensor, wf: Tensor):
    q = torch.quantize_per_tensor(x, 0.05, 64, 13)
    wq = torch.quantize_per_tensor(wf, 0.01, 0, 12)
    p = ops.quantized.conv2d_prepack(wq, None, [1, 1], [1, 1], [1, 1], 1)
    c = ops.quantized.conv2d(q, p, 0.1, 12)
    return ops.quantized.add_relu(c, r, 0.2, 0).dequantize()
`

// TestConvAddPassRefusesUnsafeResiduals checks that a residual read after the add, or one that
// is a graph input, is never written: those pairs stay unfused and give the same tensors.
func TestConvAddPassRefusesUnsafeResiduals(t *testing.T) {
	// Both modules are called from this goroutine's one OS thread: at one intra-op thread Call
	// runs on the caller's thread, and a thread another test left with a larger OpenMP team may
	// get another oneDNN implementation, whose rounding differs by one quantum at ties (seen once
	// under -race; the likely cause). The comparison is about aliasing: it holds the thread fixed.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, m := resnet18INT8(t)
	defer m.Close()
	if err := m.DefineOps(convAddMethods); err != nil {
		t.Fatal(err)
	}
	fused, n, err := m.FuseConvAdd()
	if err != nil {
		t.Fatal(err)
	}
	defer fused.Close()
	if n != 8+1 { // forward's 8 and safe's 1
		t.Fatalf("%d pairs fused, want 9 (forward's 8, safe's 1; none in after or input)", n)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	xs := make([]float32, 1*4*6*6)
	for i := range xs {
		xs[i] = float32(rng.Float64() * 6)
	}
	ws := make([]float32, 4*4*3*3)
	for i := range ws {
		ws[i] = float32(rng.IntN(255)-127) * 0.01
	}
	x, _ := torch.NewTensor(xs, []int64{1, 4, 6, 6})
	w, _ := torch.NewTensor(ws, []int64{4, 4, 3, 3})
	defer x.Close()
	defer w.Close()
	call := func(mod *torch.Module, method string, args ...*torch.Value) []float32 {
		t.Helper()
		v, err := mod.Call(method, args...)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		defer v.Close()
		var out []float32
		items := []*torch.Value{v}
		if v.Kind() == torch.KindTuple {
			n, err := v.Len()
			if err != nil {
				t.Fatal(err)
			}
			items = nil
			for i := 0; i < n; i++ {
				it, err := v.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				items = append(items, it)
			}
		}
		for _, it := range items {
			tt, err := it.ToTensor()
			if err != nil {
				t.Fatal(err)
			}
			d, err := tt.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d...)
		}
		return out
	}
	args := func() []*torch.Value { return []*torch.Value{torch.TensorValue(x), torch.TensorValue(w)} }
	want, got := call(m, "after", args()...), call(fused, "after", args()...)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after: element %d is %g, unfused %g", i, got[i], want[i])
		}
	}
	rq, err := kerneltest.QuantizePerTensor(x, 0.07, 3, torch.QUint8, kerneltest.ATen)
	if err != nil {
		t.Fatal(err)
	}
	defer rq.Close()
	before, err := rq.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	in := func() []*torch.Value {
		return []*torch.Value{torch.TensorValue(x), torch.TensorValue(rq), torch.TensorValue(w)}
	}
	want, got = call(m, "input", in()...), call(fused, "input", in()...)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("input: element %d is %g, unfused %g", i, got[i], want[i])
		}
	}
	if now, _ := rq.Float32s(); len(now) != len(before) || cosine(now, before) != cosine(before, before) {
		t.Fatal("input: the caller's residual tensor changed")
	}
	want, got = call(m, "safe", args()...), call(fused, "safe", args()...)
	if c := cosine(got, want); c < 0.999 {
		t.Errorf("safe: cosine to the unfused method %.6f", c)
	}
}

// TestConvAddConcurrentAndBadResiduals runs the fused resnet18 from two goroutines at once (each
// call brings its own scratchpad; the primitive cache is shared) and checks that both give the
// serial run's tensors, then gives the op a residual of the wrong shape: ATen's error, fused or
// not, and no crash.
func TestConvAddConcurrentAndBadResiduals(t *testing.T) {
	f, m := resnet18INT8(t)
	defer m.Close()
	fused, _, err := m.FuseConvAdd()
	if err != nil {
		t.Fatal(err)
	}
	defer fused.Close()
	in := tensorsOf(t, f.InputArrays(t))
	first := func() []float32 {
		out, err := fused.Forward(in...)
		if err != nil {
			t.Error(err)
			return nil
		}
		defer torch.CloseOutputs(out)
		d, err := out[0].Tensor.Float32s()
		if err != nil {
			t.Error(err)
		}
		return d
	}
	want := first()
	done := make(chan []float32, 6)
	for g := 0; g < 2; g++ {
		go func() {
			for i := 0; i < 3; i++ {
				done <- first()
			}
		}()
	}
	for i := 0; i < 6; i++ {
		got := <-done
		if len(got) != len(want) {
			t.Fatalf("concurrent run %d: %d values, want %d", i, len(got), len(want))
		}
		for j := range want {
			if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
				t.Fatalf("concurrent run %d: element %d is %g, the serial run's %g", i, j, got[j], want[j])
			}
		}
	}

	c := convAddCases[1]
	d := makeConvAddData(t, c, 9)
	args := kerneltest.QConvAddArgs{Weight: d.w, WeightScales: d.ws, Bias: d.b, Stride: c.stride, Padding: c.pad, Dilation: 1,
		Groups: c.groups, ConvScale: c.sc, ConvZeroPoint: c.zc, Scale: c.s, ZeroPoint: c.z, Relu: true}
	if err := torch.SetQEngine("onednn"); err != nil {
		t.Fatal(err)
	}
	// The wrong shape: the input itself as the residual.
	for _, kernel := range []kerneltest.Kernel{kerneltest.ATen, kerneltest.Fast} {
		if out, _, err := kerneltest.QConv2dAdd(d.x, d.x, args, kernel); err == nil {
			out.Close()
			t.Errorf("kernel %d: a residual of the input's shape %v was accepted", kernel, d.x.Shape())
		}
	}
}

// resnet18INT8 loads the fixture's INT8 resnet18 (quantize_jit, onednn) for the fuse_conv_add
// tests, which it skips where this build has no fused convolution.
func resnet18INT8(t *testing.T) (fixtures.Fixture, *torch.Module) {
	t.Helper()
	if why := torch.ConvAddUnavailable(); why != "" {
		t.Skip(why)
	}
	f := fixtures.Load(t).Get(t, "resnet18")
	m, err := torch.LoadWithEngine(f.Path(f.QuantRef.File), f.QuantRef.Engine)
	if err != nil {
		t.Fatal(err)
	}
	return f, m
}
