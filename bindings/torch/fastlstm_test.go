package torch_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/bindings/torch/internal/kerneltest"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// lstmCase is one LSTM: input [T, B, in] ([B, T, in] batch-first), layers of h units.
type lstmCase struct {
	in, h, layers, t, b int64
	batchFirst          bool
}

func (c lstmCase) String() string {
	return fmt.Sprintf("in %d, hidden %d, %d layers, %d steps, batch %d, batch-first %v", c.in, c.h, c.layers, c.t, c.b, c.batchFirst)
}

// lstmData makes the input, the state and the weights of c, uniform in [-scale, scale] (the input
// and state in [-1, 1]).
func lstmData(t *testing.T, r *rand.Rand, c lstmCase, scale float32) (x, h0, c0 *torch.Tensor, params []*torch.Tensor) {
	shape := []int64{c.t, c.b, c.in}
	if c.batchFirst {
		shape = []int64{c.b, c.t, c.in}
	}
	x = newTensor(t, randFloats(r, int(c.t*c.b*c.in)), shape...)
	h0 = newTensor(t, randFloats(r, int(c.layers*c.b*c.h)), c.layers, c.b, c.h)
	c0 = newTensor(t, randFloats(r, int(c.layers*c.b*c.h)), c.layers, c.b, c.h)
	scaled := func(n int64) []float32 {
		v := randFloats(r, int(n))
		for i := range v {
			v[i] *= scale
		}
		return v
	}
	for l := int64(0); l < c.layers; l++ {
		in := c.in
		if l > 0 {
			in = c.h
		}
		params = append(params, newTensor(t, scaled(4*c.h*in), 4*c.h, in), newTensor(t, scaled(4*c.h*c.h), 4*c.h, c.h),
			newTensor(t, scaled(4*c.h), 4*c.h), newTensor(t, scaled(4*c.h), 4*c.h))
	}
	return x, h0, c0, params
}

// TestFastLSTMMatchesATen runs torchspeed::lstm's loop on every instruction set this CPU has
// (scalar, AVX2, AVX-512, and the graph op's own choice) over Silero VAD v4's shape (two layers of
// 64, one step, batch 1), odd widths, several steps and batch rows, batch-first or not, and large
// weights that saturate the gates; outputs and both states must match ATen's LSTM within float
// reordering error.
func TestFastLSTMMatchesATen(t *testing.T) {
	cases := []struct {
		c     lstmCase
		scale float32
	}{
		{lstmCase{64, 64, 2, 1, 1, true}, 0.2},
		{lstmCase{17, 13, 1, 5, 3, false}, 0.5},
		{lstmCase{8, 40, 3, 4, 2, true}, 0.3},
		{lstmCase{1, 1, 1, 3, 1, false}, 1},
		{lstmCase{24, 20, 2, 6, 1, false}, 8}, // |gates| up to ~400: sigmoid and tanh saturate
	}
	kernels := []kerneltest.Kernel{kerneltest.Fast, kerneltest.Scalar, kerneltest.AVX2, kerneltest.AVX512}
	r := rand.New(rand.NewPCG(34, 1))
	for _, tc := range cases {
		x, h0, c0, params := lstmData(t, r, tc.c, tc.scale)
		var want [3]*torch.Tensor
		var errs [4]error
		var got [4][3]*torch.Tensor
		var fast [4]bool
		var err error
		torch.Do(func() {
			if err = torch.SetNumThreadsOnThisThread(1); err != nil {
				return
			}
			if want[0], want[1], want[2], _, err = kerneltest.LSTM(x, h0, c0, params, int(tc.c.layers), tc.c.batchFirst, kerneltest.ATen); err != nil {
				return
			}
			for i, k := range kernels {
				got[i][0], got[i][1], got[i][2], fast[i], errs[i] = kerneltest.LSTM(x, h0, c0, params, int(tc.c.layers), tc.c.batchFirst, k)
			}
		})
		if err != nil {
			t.Fatalf("%v: ATen: %v", tc.c, err)
		}
		for i, k := range kernels {
			if errors.Is(errs[i], torch.Unsupported) && k != kerneltest.Fast {
				t.Logf("%v: kernel %d: not on this CPU", tc.c, k)
				continue
			}
			if errs[i] != nil {
				t.Fatalf("%v: kernel %d: %v", tc.c, k, errs[i])
			}
			if !fast[i] {
				t.Errorf("%v: kernel %d: ATen's LSTM ran, not torchspeed's loop", tc.c, k)
			}
			for j, name := range []string{"output", "h_n", "c_n"} {
				if !sameShape(t, want[j], got[i][j]) {
					t.Fatalf("%v: kernel %d: %s shape differs from ATen's", tc.c, k, name)
				}
				ws, gs := float32s(t, want[j]), float32s(t, got[i][j])
				for e := range ws {
					// Float reordering over in+h products per gate, carried through the steps.
					tol := 2e-6 * float64(tc.c.in+tc.c.h) * float64(tc.c.t) * (1 + math.Abs(float64(ws[e])))
					if d := math.Abs(float64(gs[e] - ws[e])); !(d <= tol) {
						t.Fatalf("%v: kernel %d: %s element %d is %.7g, ATen's %.7g (tolerance %.2g)", tc.c, k, name, e, gs[e], ws[e], tol)
					}
				}
				got[i][j].Close()
			}
		}
		for _, w := range want {
			w.Close()
		}
	}
}

func sameShape(t *testing.T, a, b *torch.Tensor) bool {
	t.Helper()
	return fmt.Sprint(a.Shape()) == fmt.Sprint(b.Shape())
}

// TestFastLSTMFallbacks: what torchspeed's loop does not cover runs ATen's LSTM and gives its
// answer, or its error: an input width that does not match the weights, a state for another batch
// size (which at::lstm itself takes: nn.LSTM's checks are in its TorchScript code), a float64
// input.
func TestFastLSTMFallbacks(t *testing.T) {
	c := lstmCase{16, 8, 2, 2, 1, false}
	r := rand.New(rand.NewPCG(34, 2))
	x, h0, c0, params := lstmData(t, r, c, 0.3)
	wide := newTensor(t, randFloats(r, 2*1*17), 2, 1, 17)
	badState := newTensor(t, randFloats(r, 2*2*8), 2, 2, 8)
	x64, err := torch.NewTensor(make([]float64, 2*1*16), []int64{2, 1, 16})
	if err != nil {
		t.Fatal(err)
	}
	defer x64.Close()
	for _, tc := range []struct {
		name      string
		x, h0, c0 *torch.Tensor
	}{
		{"input width 17, weights 16", wide, h0, c0},
		{"h0 [2, 2, 8] for batch 1", x, badState, c0},
		{"float64 input", x64, h0, c0},
	} {
		var errA, errF error
		var fast bool
		var a, f [3]*torch.Tensor
		torch.Do(func() {
			a[0], a[1], a[2], _, errA = kerneltest.LSTM(tc.x, tc.h0, tc.c0, params, 2, false, kerneltest.ATen)
			f[0], f[1], f[2], fast, errF = kerneltest.LSTM(tc.x, tc.h0, tc.c0, params, 2, false, kerneltest.Fast)
		})
		if fast {
			t.Errorf("%s: torchspeed's loop ran", tc.name)
		}
		if (errA == nil) != (errF == nil) || (errA != nil && errA.Error() != errF.Error()) {
			t.Errorf("%s: ATen's error %v, torchspeed's op %v: want the same", tc.name, errA, errF)
			continue
		}
		if errA != nil {
			continue
		}
		for j := range a {
			if fmt.Sprint(float32s(t, a[j])) != fmt.Sprint(float32s(t, f[j])) {
				t.Errorf("%s: output %d differs from ATen's", tc.name, j)
			}
			a[j].Close()
			f[j].Close()
		}
	}
}

// TestFastLinearPassOnSileroV4: Silero VAD v4 as its authors ship it gets its LSTM calls (two
// layers of 64, in each sample-rate branch with and without a carried state) swapped for
// torchspeed::lstm, and each call of the recorded speech stream answers within the
// float-reordering bound of PyTorch's, the state carried from call to call.
func TestFastLinearPassOnSileroV4(t *testing.T) {
	skipWithoutFastKernels(t)
	f := fixtures.Load(t).Get(t, "silero_v4")
	m := loadFixture(t, f)
	fr, err := m.Freeze("reset_states")
	if err != nil {
		t.Fatal(err)
	}
	fast, linears, _, err := fr.FastLinear()
	fr.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	counts, err := fast.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	if counts["aten::lstm"] != 0 || counts["torchspeed::lstm"] != 4 || linears != 16 {
		t.Fatalf("node counts after the pass %v (%d linears swapped); want 4 torchspeed::lstm (16 linears), no aten::lstm", counts, linears)
	}
	calls, worst := replayStream(t, fast, f, sileroBound)
	t.Logf("%d LSTM calls swapped; %d calls within %.2g of PyTorch's", counts["torchspeed::lstm"], calls, worst)
}
