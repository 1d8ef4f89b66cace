package int8check_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/kernels"
	"github.com/torchspeed/torchspeed/pkg/quant"
)

func TestMain(m *testing.M) {
	// One thread: the check is about arithmetic, not speed, and the machine is shared.
	if err := torch.SetNumThreads(1); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// qlayer is one quantized::linear / quantized::conv2d node of a quantized graph.
type qlayer struct {
	op      string // "linear", "linear_relu", "conv2d", "conv2d_relu"
	attr    string // the module attribute holding its packed params
	in, out kernels.Affine
}

func (l qlayer) conv() bool { return strings.HasPrefix(l.op, "conv2d") }
func (l qlayer) relu() bool { return strings.HasSuffix(l.op, "_relu") }

// node matches one single-output line of a TorchScript graph:
// `%12 : Tensor = quantized::conv2d_relu(%x.1, %p, %11, %4) # ...`.
var node = regexp.MustCompile(`^\s*(%[\w.]+)\s*:\s*[^=]+=\s*([\w:]+)(?:\[(.*)\])?\(([^)]*)\)`)

// keepQParams are ops whose quantized output has its input's scale and zero point.
var keepQParams = map[string]bool{
	"aten::max_pool2d": true, "aten::flatten": true, "aten::relu": true, "aten::relu_": true,
	"aten::reshape": true, "aten::view": true, "aten::contiguous": true, "aten::dropout": true,
	"aten::adaptive_avg_pool2d": true,
}

// quantLayers reads a quantized model's inlined graph and returns its quantized Linear and
// Conv2d nodes with the attribute that holds each one's packed weights and the scale and zero
// point of its input (traced back to a quantize_per_tensor or an earlier quantized op) and
// output (the op's constant arguments).
func quantLayers(graph string) ([]qlayer, error) {
	consts := map[string]string{}
	attrs := map[string]string{}
	qp := map[string]kernels.Affine{}
	var layers []qlayer
	affine := func(line, s, z string) (kernels.Affine, error) {
		sc, err1 := strconv.ParseFloat(strings.TrimPrefix(consts[s], "value="), 64)
		zp, err2 := strconv.ParseInt(strings.TrimPrefix(consts[z], "value="), 10, 32)
		if err1 != nil || err2 != nil {
			return kernels.Affine{}, fmt.Errorf("graph line %q: scale %s / zero point %s are not constants", line, s, z)
		}
		return kernels.Affine{Scale: sc, ZeroPoint: int32(zp)}, nil
	}
	for _, line := range strings.Split(graph, "\n") {
		m := node.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		out, kind, attr := m[1], m[2], m[3]
		var args []string
		for _, a := range strings.Split(m[4], ",") {
			if a = strings.TrimSpace(a); a != "" {
				args = append(args, a)
			}
		}
		switch {
		case kind == "prim::Constant":
			consts[out] = attr
		case kind == "prim::GetAttr":
			attrs[out] = strings.Trim(strings.TrimPrefix(attr, "name="), `"`)
		case kind == "aten::quantize_per_tensor" && len(args) == 4:
			a, err := affine(line, args[1], args[2])
			if err != nil {
				return nil, err
			}
			qp[out] = a
		case strings.HasPrefix(kind, "quantized::") && len(args) == 4:
			op := strings.TrimPrefix(kind, "quantized::")
			a, err := affine(line, args[2], args[3])
			if err != nil {
				return nil, err
			}
			qp[out] = a
			switch op {
			case "linear", "linear_relu", "conv2d", "conv2d_relu":
			default:
				continue
			}
			in, ok := qp[args[0]]
			if !ok {
				return nil, fmt.Errorf("graph line %q: cannot trace the input's scale and zero point", line)
			}
			if attrs[args[1]] == "" {
				return nil, fmt.Errorf("graph line %q: packed params %s are not a module attribute", line, args[1])
			}
			layers = append(layers, qlayer{op: op, attr: attrs[args[1]], in: in, out: a})
		case keepQParams[kind] && len(args) > 0:
			if a, ok := qp[args[0]]; ok {
				qp[out] = a
			}
		}
	}
	return layers, nil
}

// tsFloat writes a float as a TorchScript float literal.
func tsFloat(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return s
}

// layerSource is TorchScript for two methods on the quantized model: <name>_w() returns the
// layer's unpacked int8 weight (and conv geometry); <name>(x) quantizes x with the layer's
// input scale and zero point and returns
//
//	0 xq: the quint8 input
//	1 y: libtorch's output with the graph's output scale and zero point
//	2 yfit: the output with a scale and zero point fitted to this input's float output range,
//	  so that the comparison covers the whole u8 range rather than mostly clamped values
//	3 wt, 4 ytensor: the weights re-quantized per tensor (symmetric), prepacked by libtorch, and
//	  that layer's output with the fitted output scale and zero point
//	5 w, 6 bias (empty when the layer has none)
func layerSource(name string, l qlayer) string {
	var b strings.Builder
	kind := "linear"
	if l.conv() {
		kind = "conv2d"
	}
	fmt.Fprintf(&b, "def %s_w(self):\n", name)
	fmt.Fprintf(&b, "    p = getattr(self, %q)\n", l.attr)
	fmt.Fprintf(&b, "    w, b = ops.quantized.%s_unpack(p)\n", kind)
	if l.conv() {
		b.WriteString("    return w, torch.tensor(ops.quantized.conv2d_stride(p)), torch.tensor(ops.quantized.conv2d_padding(p)), " +
			"torch.tensor(ops.quantized.conv2d_dilation(p)), torch.tensor([ops.quantized.conv2d_groups(p)])\n\n")
	} else {
		b.WriteString("    return w\n\n")
	}
	fmt.Fprintf(&b, "def %s(self, x: Tensor):\n", name)
	fmt.Fprintf(&b, "    p = getattr(self, %q)\n", l.attr)
	fmt.Fprintf(&b, "    xq = torch.quantize_per_tensor(x, %s, %d, 13)\n", tsFloat(l.in.Scale), l.in.ZeroPoint)
	fmt.Fprintf(&b, "    y = ops.quantized.%s(xq, p, %s, %d)\n", l.op, tsFloat(l.out.Scale), l.out.ZeroPoint)
	fmt.Fprintf(&b, "    w, b = ops.quantized.%s_unpack(p)\n", kind)
	if l.conv() {
		b.WriteString("    st = ops.quantized.conv2d_stride(p)\n" +
			"    pa = ops.quantized.conv2d_padding(p)\n" +
			"    di = ops.quantized.conv2d_dilation(p)\n" +
			"    g = ops.quantized.conv2d_groups(p)\n" +
			"    yf = torch.conv2d(xq.dequantize(), w.dequantize(), b, st, pa, di, g)\n")
	} else {
		b.WriteString("    yf = torch.linear(xq.dequantize(), w.dequantize(), b)\n")
	}
	if l.relu() {
		b.WriteString("    yf = torch.relu(yf)\n")
	}
	b.WriteString("    lo = min(float(yf.min()), 0.0)\n" +
		"    hi = max(float(yf.max()), 0.0)\n" +
		"    osc = (hi - lo) / 255.0\n" +
		"    if osc <= 0.0:\n" +
		"        osc = 1.0\n" +
		"    oz = int(round(-lo / osc))\n")
	fmt.Fprintf(&b, "    yfit = ops.quantized.%s(xq, p, osc, oz)\n", l.op)
	b.WriteString("    wd = w.dequantize()\n" +
		"    wt = torch.quantize_per_tensor(wd, float(wd.abs().max()) / 127.0, 0, 12)\n")
	if l.conv() {
		b.WriteString("    p2 = ops.quantized.conv2d_prepack(wt, b, st, pa, di, g)\n")
	} else {
		b.WriteString("    p2 = ops.quantized.linear_prepack(wt, b)\n")
	}
	fmt.Fprintf(&b, "    yt = ops.quantized.%s(xq, p2, osc, oz)\n", l.op)
	b.WriteString("    bias = torch.zeros([0])\n" +
		"    if b is not None:\n" +
		"        bias = b\n" +
		"    return xq, y, yfit, wt, yt, w, bias\n")
	return b.String()
}

func data[T torch.Element](t *testing.T, what string, x *torch.Tensor) []T {
	t.Helper()
	s, err := torch.Data[T](x)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return s
}

func ints(t *testing.T, what string, x *torch.Tensor) []int {
	t.Helper()
	var out []int
	for _, v := range data[int64](t, what, x) {
		out = append(out, int(v))
	}
	return out
}

func affineOf(t *testing.T, what string, x *torch.Tensor) kernels.Affine {
	t.Helper()
	q, err := x.QParams()
	if err != nil || len(q.Scales) != 1 {
		t.Fatalf("%s: qparams %+v, %v: want one scale", what, q, err)
	}
	return kernels.Affine{Scale: q.Scales[0], ZeroPoint: int32(q.ZeroPoints[0])}
}

// weightQ returns a quantized weight's scales and zero points, one per output channel
// (per-channel along axis 0) or a single one (per-tensor).
func weightQ(t *testing.T, what string, w *torch.Tensor) ([]float64, []int32) {
	t.Helper()
	q, err := w.QParams()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if q.Axis > 0 {
		t.Fatalf("%s: quantized along axis %d; the reference wants output channels (axis 0)", what, q.Axis)
	}
	zps := make([]int32, len(q.ZeroPoints))
	for i, z := range q.ZeroPoints {
		zps[i] = int32(z)
	}
	return q.Scales, zps
}

// compare returns how many elements differ by one step and the largest difference.
func compare(got, want []uint8) (offByOne, worst int) {
	for i := range got {
		d := int(got[i]) - int(want[i])
		if d < 0 {
			d = -d
		}
		if d == 1 {
			offByOne++
		}
		worst = max(worst, d)
	}
	return offByOne, worst
}

// interior is the share of values strictly inside (0, 255): how much of the comparison is not
// decided by clamping alone.
func interior(y []uint8) float64 {
	n := 0
	for _, v := range y {
		if v > 0 && v < 255 {
			n++
		}
	}
	return float64(n) / float64(max(len(y), 1))
}

// geometry is what the reference needs besides the weights: the input shape and conv settings.
type geometry struct {
	shape                  []int64 // input shape
	conv                   kernels.QuantizedConv2d
	linIn, linOut, linRows int
}

// inputRun is one set of layer inputs and the arithmetic libtorch must match on it.
type inputRun struct {
	name  string
	qmax  int   // the quint8 inputs are uniform in [0, qmax]
	model arith // the reference arithmetic
}

func TestInt8LayersMatchKernelReference(t *testing.T) {
	man := fixtures.Load(t)
	exact := quant.ExactU8S8()
	for _, name := range []string{"digits", "resnet18"} {
		t.Run(name, func(t *testing.T) {
			f := man.Get(t, name)
			if f.QuantRef == nil {
				t.Fatalf("fixture %s has no INT8 reference model; rebuild with `make fixtures`", name)
			}
			// The engine decides how the packed weights are read: set it before loading.
			if err := torch.SetQEngine(f.QuantRef.Engine); err != nil {
				t.Fatalf("engine %q of %s: %v", f.QuantRef.Engine, name, err)
			}
			m, err := torch.Load(f.Path(f.QuantRef.File))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			graph, err := m.Graph()
			if err != nil {
				t.Fatal(err)
			}
			layers, err := quantLayers(graph)
			if err != nil {
				t.Fatal(err)
			}
			var nconv, nlin int
			for _, l := range layers {
				if l.conv() {
					nconv++
				} else {
					nlin++
				}
			}
			if nconv == 0 || nlin == 0 {
				t.Fatalf("%s: found %d quantized conv2d and %d linear nodes; want both (graph changed?)", name, nconv, nlin)
			}
			// Where torchspeed resolves reduce_range on (the engine's kernels add u8 x s8
			// product pairs into int16 with saturation: x86 without VNNI), full-range inputs
			// must match the saturating model and 7-bit inputs (what reduce_range gives) exact
			// math. Elsewhere full-range inputs must match exact math.
			saturates := quant.ResolveReduceRange("auto", f.QuantRef.Engine, exact)
			runs := []inputRun{{"u8", 255, exactSums}}
			if saturates {
				runs = []inputRun{{"u8", 255, pairSat}, {"u7", 127, exactSums}}
			}
			t.Logf("engine %s, exact u8 x s8 dot product (VNNI) %v: %d layers, full-range inputs checked against %s", f.QuantRef.Engine, exact, len(layers), runs[0].model)
			rng := rand.New(rand.NewPCG(7, uint64(len(layers))))
			seen := 0 // the largest step difference of a full-range output from exact math
			for i, l := range layers {
				t.Run(fmt.Sprintf("%d_%s_%s", i, l.op, l.attr[strings.LastIndex(l.attr, ".")+1:]), func(t *testing.T) {
					method := fmt.Sprintf("ts_int8check_%d", i)
					if err := m.DefineOps(layerSource(method, l)); err != nil {
						t.Fatalf("define %s: %v\n%s", method, err, layerSource(method, l))
					}
					for _, r := range runs {
						t.Run(r.name, func(t *testing.T) {
							seen = max(seen, checkLayer(t, m, method, l, rng, r))
						})
					}
				})
			}
			// A negative control for the saturation model: if full-range outputs also matched
			// exact math, the check could not tell saturating kernels from exact ones.
			if saturates && seen <= 1 {
				t.Errorf("no full-range output differs from exact math by more than one step (max %d): the inputs do not reach int16 saturation, so the saturation model is untested", seen)
			} else if saturates {
				t.Logf("full-range outputs differ from exact math by up to %d steps and match the saturation model", seen)
			}
		})
	}
}

// checkLayer runs the layer on inputs drawn as r says and compares libtorch's outputs with the
// reference of r.model. It returns the largest step difference of libtorch's outputs from
// exact math (0 when r.model is exact math and they match).
func checkLayer(t *testing.T, m *torch.Module, method string, l qlayer, rng *rand.Rand, r inputRun) int {
	wouts, err := m.RunMethod(method + "_w")
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(wouts)
	ws := wouts[0].Tensor.Shape()
	var g geometry
	if l.conv() {
		st, pa, di := ints(t, "stride", wouts[1].Tensor), ints(t, "padding", wouts[2].Tensor), ints(t, "dilation", wouts[3].Tensor)
		groups := ints(t, "groups", wouts[4].Tensor)[0]
		if len(ws) != 4 || len(st) != 2 || len(pa) != 2 || len(di) != 2 {
			t.Fatalf("conv weight %v, stride %v, padding %v, dilation %v: want 2-d", ws, st, pa, di)
		}
		g.conv = kernels.QuantizedConv2d{
			InChannels: int(ws[1]) * groups, OutChannels: int(ws[0]), KernelH: int(ws[2]), KernelW: int(ws[3]),
			Stride: [2]int{st[0], st[1]}, Padding: [2]int{pa[0], pa[1]}, Dilation: [2]int{di[0], di[1]}, Groups: groups,
		}
		// Any spatial size exercises the arithmetic; odd and unequal ones exercise the edges.
		h := max(11, (int(ws[2])-1)*di[0]+1)
		w := max(9, (int(ws[3])-1)*di[1]+1)
		g.shape = []int64{2, int64(g.conv.InChannels), int64(h), int64(w)}
	} else {
		if len(ws) != 2 {
			t.Fatalf("linear weight %v: want 2-d", ws)
		}
		g.linOut, g.linIn, g.linRows = int(ws[0]), int(ws[1]), 3
		g.shape = []int64{int64(g.linRows), ws[1]}
	}

	// Inputs spread over [0, r.qmax] of the layer's quint8 input.
	n := 1
	for _, d := range g.shape {
		n *= int(d)
	}
	x := make([]float32, n)
	for i := range x {
		q := rng.IntN(r.qmax + 1)
		x[i] = float32(float64(q-int(l.in.ZeroPoint)) * l.in.Scale)
	}
	xt, err := torch.NewTensor(x, g.shape)
	if err != nil {
		t.Fatal(err)
	}
	defer xt.Close()
	outs, err := m.RunMethod(method, xt)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(outs)
	if len(outs) != 7 {
		t.Fatalf("%s returned %d tensors, want 7", method, len(outs))
	}
	xq := data[uint8](t, "input", outs[0].Tensor)
	in := affineOf(t, "input", outs[0].Tensor)
	if in != l.in {
		t.Fatalf("input quantized with %+v, graph says %+v", in, l.in)
	}
	if top := slices.Max(xq); int(top) > r.qmax || r.qmax == 255 && top < 250 {
		t.Fatalf("quantized inputs reach %d, want up to %d", top, r.qmax)
	}
	wq := data[int8](t, "weight", outs[5].Tensor)
	wScales, wZPs := weightQ(t, "weight", outs[5].Tensor)
	bias, err := outs[6].Tensor.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	wt := data[int8](t, "per-tensor weight", outs[3].Tensor)
	wtScales, wtZPs := weightQ(t, "per-tensor weight", outs[3].Tensor)
	if len(wtScales) != 1 {
		t.Fatalf("per-tensor weight has %d scales", len(wtScales))
	}

	// reference computes the layer's output for xq with the given weights and output qparams
	// in the given arithmetic; its shape must be libtorch's.
	reference := func(model arith, w []int8, scales []float64, zps []int32, out kernels.Affine, y *torch.Tensor) ([]uint8, error) {
		if l.conv() {
			cv := g.conv
			cv.Weight, cv.WeightScales, cv.WeightZeroPoints, cv.Bias, cv.ReLU = w, scales, zps, bias, l.relu()
			xs := [4]int{int(g.shape[0]), int(g.shape[1]), int(g.shape[2]), int(g.shape[3])}
			var want []uint8
			var shape [4]int
			var err error
			if model == pairSat {
				want, shape, err = pairSatConv2dRef(xq, xs, in, &cv, out)
			} else {
				want, shape, err = kernels.QuantizedConv2dRef(xq, xs, in, &cv, out)
			}
			if err == nil && fmt.Sprint(shape[:]) != fmt.Sprint(y.Shape()) {
				return nil, fmt.Errorf("reference shape %v, libtorch %v", shape, y.Shape())
			}
			return want, err
		}
		lin := kernels.QuantizedLinear{In: g.linIn, Out: g.linOut, Weight: w, WeightScales: scales,
			WeightZeroPoints: zps, Bias: bias, ReLU: l.relu()}
		if model == pairSat {
			return pairSatLinearRef(xq, g.linRows, in, &lin, out)
		}
		return kernels.QuantizedLinearRef(xq, g.linRows, in, &lin, out)
	}

	cases := []struct {
		name     string
		y        *torch.Tensor
		w        []int8
		scales   []float64
		zps      []int32
		interior float64 // the least share of outputs inside (0, 255) for a meaningful check
	}{
		// The graph's own output scale: on these random inputs many values may clamp.
		{"graph-qparams", outs[1].Tensor, wq, wScales, wZPs, 0},
		{"fitted-qparams", outs[2].Tensor, wq, wScales, wZPs, 0.25},
		{"per-tensor-weight", outs[4].Tensor, wt, wtScales, wtZPs, 0.25},
	}
	fromExact := 0
	for _, c := range cases {
		got := data[uint8](t, c.name+" output", c.y)
		out := affineOf(t, c.name+" output", c.y)
		want, err := reference(r.model, c.w, c.scales, c.zps, out, c.y)
		if err != nil {
			t.Fatalf("%s: reference: %v", c.name, err)
		}
		if len(want) != len(got) {
			t.Fatalf("%s: reference has %d values, libtorch %d", c.name, len(want), len(got))
		}
		off, worst := compare(got, want)
		fromExact = max(fromExact, worst)
		if r.model != exactSums {
			ex, err := reference(exactSums, c.w, c.scales, c.zps, out, c.y)
			if err != nil {
				t.Fatalf("%s: exact reference: %v", c.name, err)
			}
			_, d := compare(got, ex)
			fromExact = max(fromExact, d)
		}
		share := interior(got)
		t.Logf("%s (%s): %d values, %d weight scale(s), out scale %.4g zp %d, %.0f%% inside (0,255), %d off by one step, max diff %d",
			c.name, r.model, len(got), len(c.scales), out.Scale, out.ZeroPoint, 100*share, off, worst)
		if worst > 1 {
			t.Errorf("%s: libtorch and the kernel reference (%s) differ by up to %d quantization steps", c.name, r.model, worst)
		}
		// One step apart only on rounding ties (a float32 result within rounding error of .5):
		// rare, so a large share means the arithmetic differs, not just the rounding.
		if float64(off) > 0.02*float64(len(got)) {
			t.Errorf("%s: %d of %d values are one step apart: more than rounding ties explain", c.name, off, len(got))
		}
		if share < c.interior {
			t.Errorf("%s: only %.0f%% of outputs inside (0, 255): the check is decided by clamping", c.name, 100*share)
		}
	}
	if len(wScales) > 1 {
		// A negative control: one scale for every channel must break the match, or the
		// comparison cannot see per-channel scales at all.
		lo, hi := wScales[0], wScales[0]
		for _, s := range wScales {
			lo, hi = min(lo, s), max(hi, s)
		}
		if hi > 1.5*lo {
			out := affineOf(t, "fitted output", outs[2].Tensor)
			got := data[uint8](t, "fitted output", outs[2].Tensor)
			want, err := reference(r.model, wq, []float64{wScales[0]}, []int32{wZPs[0]}, out, outs[2].Tensor)
			if err != nil {
				t.Fatal(err)
			}
			_, worst := compare(got, want)
			t.Logf("negative control (channel 0's scale for all %d channels): max diff %d steps", len(wScales), worst)
			if worst <= 1 {
				t.Errorf("negative control: a single weight scale still matches libtorch's per-channel output (max diff %d)", worst)
			}
		}
	}
	return fromExact
}

func TestQuantLayersParsesGraph(t *testing.T) {
	const graph = `graph(%self.1 : __torch__.M,
      %x.1 : Tensor):
  %3 : float = prim::Constant[value=0.0039215688593685627]() # :0:0
  %4 : int = prim::Constant[value=0]() # :0:0
  %5 : int = prim::Constant[value=13]() # :0:0
  %11 : float = prim::Constant[value=0.5]()
  %24 : int[] = prim::Constant[value=[1, 1]]()
  %42 : int = prim::Constant[value=106]()
  %xq.1 : Tensor = aten::quantize_per_tensor(%x.1, %3, %4, %5) # :0:0
  %p.0 : __torch__.torch.classes.quantized.Conv2dPackedParamsBase = prim::GetAttr[name="q._packed_0"](%self.1)
  %12 : Tensor = quantized::conv2d_relu(%xq.1, %p.0, %11, %4) # :2:19
  %x0.1 : Tensor = aten::max_pool2d(%12, %24, %24, %24, %24, %4)
  %f.1 : Tensor = aten::flatten(%x0.1, %4, %4)
  %p.1 : __torch__.torch.classes.quantized.LinearPackedParamsBase = prim::GetAttr[name="q._packed_1"](%self.1)
  %43 : Tensor = quantized::linear(%f.1, %p.1, %3, %42)
  %45 : Tensor = aten::dequantize(%43)
  return (%45)`
	got, err := quantLayers(graph)
	if err != nil {
		t.Fatal(err)
	}
	want := []qlayer{
		{op: "conv2d_relu", attr: "q._packed_0", in: kernels.Affine{Scale: 0.0039215688593685627}, out: kernels.Affine{Scale: 0.5}},
		{op: "linear", attr: "q._packed_1", in: kernels.Affine{Scale: 0.5}, out: kernels.Affine{Scale: 0.0039215688593685627, ZeroPoint: 106}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("quantLayers = %+v, want %+v", got, want)
	}

	bad := []struct{ name, graph, want string }{
		{"untraceable input", "  %3 : float = prim::Constant[value=0.5]()\n  %4 : int = prim::Constant[value=0]()\n" +
			"  %9 : Tensor = quantized::linear(%x.1, %p, %3, %4)", "cannot trace"},
		{"non-constant scale", "  %xq : Tensor = aten::quantize_per_tensor(%x, %s, %z, %d)", "not constants"},
	}
	for _, c := range bad {
		if _, err := quantLayers(c.graph); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}
