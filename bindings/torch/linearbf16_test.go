package torch_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/cpuid/v2"
	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/bindings/torch/internal/kerneltest"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// toBF16 is v rounded to the nearest BFloat16 (ties to even), as the BF16 GEMM rounds weights and
// inputs, back in a float32.
func toBF16(v float32) float32 {
	u := math.Float32bits(v)
	if u&0x7FFFFFFF > 0x7F800000 {
		return v
	}
	u = (u + 0x7FFF + (u>>16)&1) &^ 0xFFFF
	return math.Float32frombits(u)
}

// mapped is a new tensor of t's shape holding f of each element.
func mapped(t *testing.T, x *torch.Tensor, f func(float32) float32) *torch.Tensor {
	t.Helper()
	v, err := x.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(v))
	for i := range v {
		out[i] = f(v[i])
	}
	return newTensor(t, out, x.Shape()...)
}

func abs32(v float32) float32 { return float32(math.Abs(float64(v))) }

// bf16Case is one linear: x [.., K] times w [N, K] (+ b), then relu.
type bf16Case struct {
	what    string
	x, w, b *torch.Tensor
	relu    bool
}

// scriptedLinears are the first encoder layer's four linears of the scripted transformer fixture,
// fed with the fixture's input (the FFN's second linear with relu(linear1(input))).
func scriptedLinears(t *testing.T) []bf16Case {
	f := fixtures.Load(t).Get(t, "transformer_scripted")
	m := loadFixture(t, f)
	if err := m.Define(`
def ts_test_weights(self) -> List[Tensor]:
    l = getattr(self.layers, "0")
    return [l.self_attn.in_proj_weight, l.self_attn.in_proj_bias, l.self_attn.out_proj.weight,
            l.self_attn.out_proj.bias, l.linear1.weight, l.linear1.bias, l.linear2.weight, l.linear2.bias]
`); err != nil {
		t.Fatal(err)
	}
	v, err := m.Call("ts_test_weights")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	var ws []*torch.Tensor
	for i := range 8 {
		item, err := v.Item(i)
		if err != nil {
			t.Fatal(err)
		}
		w, err := item.ToTensor()
		item.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		ws = append(ws, w)
	}
	x := tensorsOf(t, f.InputArrays(t))[0]
	h, err := linearOn(1, x, ws[4], ws[5], true, kerneltest.ATen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return []bf16Case{{"in_proj", x, ws[0], ws[1], false}, {"out_proj", x, ws[2], ws[3], false},
		{"linear1+relu", x, ws[4], ws[5], true}, {"linear2", h, ws[6], ws[7], false}}
}

// bf16Allowed says whether this process's BF16 GEMM may use vdpbf16ps: the CPU has it (and
// AVX-512F) and TORCHSPEED_MAX_ISA does not cap below it.
func bf16Allowed() bool {
	switch strings.ToLower(os.Getenv("TORCHSPEED_MAX_ISA")) {
	case "scalar", "default", "avx2", "avx512":
		return false
	}
	return cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BF16)
}

// TestLinearBF16KernelsOnFixture runs every path of the BF16 GEMM (the graph op, vdpbf16ps, BF16
// widened to float on AVX-512F and on AVX2, ATen's linear on the widened weight) on the
// transformer fixture's weights and input and on odd shapes, against at::linear: within float
// rounding of at::linear on the BF16-rounded operands, and within the BF16 error bound (2^-8 of
// sum |x||w| per output) of FP32 at::linear. make check-isa runs it under TORCHSPEED_MAX_ISA
// caps, where the forced kernels above the cap must be refused.
func TestLinearBF16KernelsOnFixture(t *testing.T) {
	cases := scriptedLinears(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range []struct{ m, k, n int64 }{{1, 1, 1}, {7, 3, 17}, {9, 17, 33}, {17, 255, 100}, {2, 128, 32}} {
		x := newTensor(t, randFloats(r, int(s.m*s.k)), s.m, s.k)
		w := newTensor(t, randFloats(r, int(s.n*s.k)), s.n, s.k)
		b := newTensor(t, randFloats(r, int(s.n)), s.n)
		cases = append(cases, bf16Case{fmt.Sprintf("random M %d K %d N %d", s.m, s.k, s.n), x, w, b, s.k%2 == 1})
	}
	kernels := []kerneltest.Kernel{kerneltest.Fast, kerneltest.Scalar, kerneltest.AVX2, kerneltest.AVX512, kerneltest.AVX512BF16}
	ran := map[kerneltest.Kernel]int{}
	dot := bf16Allowed()
	for _, c := range cases {
		k := c.w.Shape()[1]
		xr, wr := mapped(t, c.x, toBF16), mapped(t, c.w, toBF16)
		want, err := linearOn(2, c.x, c.w, c.b, c.relu, kerneltest.ATen)
		if err != nil {
			t.Fatal(err)
		}
		wantR, err := linearOn(2, xr, wr, c.b, c.relu, kerneltest.ATen) // the BF16 paths' exact products
		if err != nil {
			t.Fatal(err)
		}
		wantS, err := linearOn(2, c.x, wr, c.b, c.relu, kerneltest.ATen) // Scalar: x not rounded
		if err != nil {
			t.Fatal(err)
		}
		bound, err := linearOn(1, mapped(t, c.x, abs32), mapped(t, c.w, abs32), mapped(t, c.b, abs32), false, kerneltest.ATen)
		if err != nil {
			t.Fatal(err)
		}
		for _, kernel := range kernels {
			var got *torch.Tensor
			torch.Do(func() {
				if err = torch.SetNumThreadsOnThisThread(2); err == nil {
					got, err = kerneltest.LinearBF16(c.x, c.w, c.b, c.relu, kernel)
				}
			})
			what := fmt.Sprintf("%s, kernel %d", c.what, kernel)
			if kernel == kerneltest.AVX512BF16 && dot == (err != nil) {
				t.Fatalf("%s: error %v; want one exactly when the CPU lacks AVX512_BF16 or TORCHSPEED_MAX_ISA caps it (%q)", what, err, os.Getenv("TORCHSPEED_MAX_ISA"))
			}
			if errors.Is(err, torch.Unsupported) && kernel != kerneltest.Fast && kernel != kerneltest.Scalar {
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			ref := wantR
			if kernel == kerneltest.Scalar || (kernel == kerneltest.Fast && !fastKernels()) {
				ref = wantS
			}
			checkBF16(t, what, got, ref, want, bound, k)
			got.Close()
			ran[kernel]++
		}
		want.Close()
		wantR.Close()
		wantS.Close()
		bound.Close()
	}
	if ran[kerneltest.Fast] == 0 || ran[kerneltest.Scalar] == 0 {
		t.Fatalf("cases per kernel %v: want Fast and Scalar at least", ran)
	}
	t.Logf("cases per kernel (0 where this CPU or TORCHSPEED_MAX_ISA leaves the kernel out): %v", ran)
}

// checkBF16: got within float rounding of ref (at::linear on the operands as the path rounds
// them) and within the BF16 bound of want (FP32 at::linear); bound holds sum |x||w| + |b| per
// output.
func checkBF16(t *testing.T, what string, got, ref, want, bound *torch.Tensor, k int64) {
	t.Helper()
	g, err := got.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	rv, _ := ref.Float32s()
	wv, _ := want.Float32s()
	bv, _ := bound.Float32s()
	if len(g) != len(wv) || len(rv) != len(wv) || len(bv) != len(wv) {
		t.Fatalf("%s: %d values, want %d", what, len(g), len(wv))
	}
	for i := range g {
		b := float64(bv[i])
		if d := math.Abs(float64(g[i] - rv[i])); d > 1e-6+4*float64(k)*0x1p-24*b {
			t.Fatalf("%s: element %d is %v, at::linear on the rounded operands %v (|diff| %.3g beyond float rounding)", what, i, g[i], rv[i], d)
		}
		if d := math.Abs(float64(g[i] - wv[i])); d > 1e-6+0x1p-8*b {
			t.Fatalf("%s: element %d is %v, FP32 at::linear %v (|diff| %.3g beyond BF16's bound %.3g)", what, i, g[i], wv[i], d, 0x1p-8*b)
		}
	}
}

// TestLinearBF16PassOnTransformer: on each transformer fixture made fast by FastLinear, LinearBF16
// converts every linear FastLinear swapped (four per encoder layer), leaves the node kinds as they
// are, converts nothing a second time nor in a module FastLinear did not touch, and the result
// answers within BF16's error of the original (cosine to it >= 0.9999).
func TestLinearBF16PassOnTransformer(t *testing.T) {
	skipWithoutFastKernels(t)
	man := fixtures.Load(t)
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
		if _, n, err := frozen.LinearBF16(); err != nil || n != 0 {
			t.Errorf("%s: LinearBF16 on a module FastLinear did not touch converted %d (%v): want 0", name, n, err)
		}
		fast, nl, _, err := frozen.FastLinear()
		if err != nil {
			t.Fatal(err)
		}
		bf, nb, err := fast.LinearBF16()
		if err != nil {
			t.Fatal(err)
		}
		if nb != nl || nb == 0 {
			t.Errorf("%s: %d linears converted to BF16, FastLinear swapped %d: want all", name, nb, nl)
		}
		if again, n, err := bf.LinearBF16(); err != nil || n != 0 {
			t.Errorf("%s: a second LinearBF16 converted %d (%v): want 0", name, n, err)
		} else {
			again.Close()
		}
		fc, _ := fast.NodeCounts()
		bc, _ := bf.NodeCounts()
		for _, op := range []string{"torchspeed::transformer_encoder_layer", "torchspeed::linear_packed"} {
			if fc[op] != bc[op] {
				t.Errorf("%s: %s nodes %d after LinearBF16, %d before", name, op, bc[op], fc[op])
			}
		}
		got, err := bf.Forward(in...)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			w, _ := want[i].Tensor.Float32s()
			g, _ := got[i].Tensor.Float32s()
			var dot, ww, gg, maxAbs, scale float64
			for j := range w {
				dot += float64(w[j]) * float64(g[j])
				ww += float64(w[j]) * float64(w[j])
				gg += float64(g[j]) * float64(g[j])
				maxAbs = math.Max(maxAbs, math.Abs(float64(w[j]-g[j])))
				scale = math.Max(scale, math.Abs(float64(w[j])))
			}
			cos := dot / math.Sqrt(ww*gg)
			// Layer-normed outputs of a few units: BF16's 2^-9 per operand moves them by hundredths.
			if !(cos >= 0.9999) || maxAbs > 0.02*math.Max(1, scale) {
				t.Errorf("%s output %s: cosine %.6f, max abs diff %.3g (largest |output| %.3g) from the original", name, want[i].Name, cos, maxAbs, scale)
			}
			t.Logf("%s: %d linears in BF16; cosine %.7f, max abs diff %.3g", name, nb, cos, maxAbs)
		}
		torch.CloseOutputs(got)
		torch.CloseOutputs(want)
		bf.Close()
		fast.Close()
		frozen.Close()
	}
}
