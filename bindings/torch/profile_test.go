package torch_test

import (
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

func TestOpFLOPs(t *testing.T) {
	man := fixtures.Load(t)
	cases := []struct {
		fixture string
		// want is 2 x the multiply-adds, from the architecture: digits by hand (conv 1->16 and
		// 16->32 3x3 on 8x8, fc 512->64->10); resnet18 1,814,073,344 and mobilenet_v2
		// 300,774,272 multiply-adds at 224x224, the counts published for torchvision's models.
		want  float64
		byOp  map[string]float64
		calls map[string]int64
	}{
		{"digits", 675072, map[string]float64{"aten::_convolution": 2 * (16*9*64 + 32*16*9*64), "aten::addmm": 2 * (512*64 + 64*10)},
			map[string]int64{"aten::_convolution": 2, "aten::addmm": 2}},
		{"resnet18", 2 * 1814073344, nil, map[string]int64{"aten::_convolution": 20, "aten::addmm": 1}},
		{"mobilenet_v2", 2 * 300774272, nil, map[string]int64{"aten::_convolution": 52, "aten::addmm": 1}},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			f := man.Get(t, c.fixture)
			m := loadFixture(t, f)
			inputs := tensorsOf(t, f.InputArrays(t))
			total, byOp, err := m.OpFLOPs(inputs...)
			if err != nil {
				t.Fatal(err)
			}
			if total != c.want {
				t.Errorf("total %.0f FLOP, want %.0f (%v)", total, c.want, byOp)
			}
			for op, v := range c.byOp {
				if byOp[op] != v {
					t.Errorf("%s: %.0f FLOP, want %.0f", op, byOp[op], v)
				}
			}
			work, err := m.OpWork(inputs...)
			if err != nil {
				t.Fatal(err)
			}
			for op, n := range c.calls {
				if work[op].Calls != n {
					t.Errorf("%s: %d calls, want %d", op, work[op].Calls, n)
				}
			}
		})
	}

	// Work scales with the batch: the counts come from the shapes of this run.
	t.Run("batch", func(t *testing.T) {
		f := man.Get(t, "digits")
		m := loadFixture(t, f)
		x := f.InputArrays(t)[0]
		one, err := x.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		shape := append([]int64{3 * x.Shape[0]}, x.Shape[1:]...)
		x3, err := torch.NewTensor(append(append(append([]float32{}, one...), one...), one...), shape)
		if err != nil {
			t.Fatal(err)
		}
		defer x3.Close()
		total, _, err := m.OpFLOPs(x3)
		if err != nil {
			t.Fatal(err)
		}
		if want := 3 * 675072.0 * float64(x.Shape[0]); total != want {
			t.Errorf("batch %d: %.0f FLOP, want %.0f", shape[0], total, want)
		}
	})

	// The same network scripted and traced reaches different ops (mm + _addmm_activation or
	// addmm); the work is the same.
	t.Run("scripted-vs-traced", func(t *testing.T) {
		var totals []float64
		for _, name := range []string{"transformer_scripted", "transformer_traced"} {
			f := man.Get(t, name)
			total, _, err := loadFixture(t, f).OpFLOPs(tensorsOf(t, f.InputArrays(t))...)
			if err != nil {
				t.Fatal(err)
			}
			if total <= 0 {
				t.Fatalf("%s: %g FLOP, want > 0", name, total)
			}
			totals = append(totals, total)
		}
		if totals[0] != totals[1] {
			t.Errorf("scripted %.0f FLOP, traced %.0f", totals[0], totals[1])
		}
	})

	t.Run("errors", func(t *testing.T) {
		f := man.Get(t, "digits")
		m := loadFixture(t, f)
		x := tensorsOf(t, f.InputArrays(t))[0]
		bad, err := torch.NewTensor([]float32{1, 2, 3}, []int64{3})
		if err != nil {
			t.Fatal(err)
		}
		defer bad.Close()
		for _, c := range []struct {
			name   string
			inputs []*torch.Tensor
			want   string
		}{
			{"too many inputs", []*torch.Tensor{x, x}, "takes 1 input"},
			{"nil input", []*torch.Tensor{nil}, "input 0 is nil"},
			{"wrong shape", []*torch.Tensor{bad}, "count FLOPs"},
		} {
			if _, _, err := m.OpFLOPs(c.inputs...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
			}
		}
		m.Close()
		if _, _, err := m.OpFLOPs(x); err == nil {
			t.Error("closed module: no error")
		}
	})
}

func TestDefineOps(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "digits")
	m := loadFixture(t, f)
	// ops.<namespace>.<op> reaches operators outside aten, which Define cannot name.
	src := func(name string) string {
		return "def " + name + "(self, x: Tensor):\n" +
			"    q = torch.quantize_per_tensor(x, 0.5, 3, 13)\n" +
			"    return ops.quantized.relu6(q, False).int_repr()\n"
	}
	// (A failed define can leave the method's name taken: use another one below.)
	if err := m.Define(src("ts_plain")); err == nil {
		t.Error("Define resolved ops.quantized; DefineOps would be unneeded")
	}
	if err := m.DefineOps(src("ts_qroundtrip")); err != nil {
		t.Fatal(err)
	}
	x, err := torch.NewTensor([]float32{-1, 0, 1, 2.5, 10}, []int64{5})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	outs, err := m.RunMethod("ts_qroundtrip", x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(outs)
	d, err := torch.DataAny(outs[0].Tensor)
	if err != nil {
		t.Fatal(err)
	}
	// round(x/0.5)+3 clamped to [zp, zp+6/0.5] by relu6: 3, 3, 5, 8, 15.
	if got, want := fmtAny(d), "[3 3 5 8 15]"; got != want {
		t.Errorf("relu6 of quantized x = %s, want %s", got, want)
	}
	if err := m.DefineOps("def broken(self:\n"); err == nil {
		t.Error("syntax error: no error")
	}
}

// TestOpProfile: on frozen CNNs every op of the graph goes through the dispatcher, so the
// profile's count per op kind is the graph's node count of that kind, and the op times fit in
// the forward's.
func TestOpProfile(t *testing.T) {
	man := fixtures.Load(t)
	for _, name := range []string{"digits", "resnet18"} {
		t.Run(name, func(t *testing.T) {
			f := man.Get(t, name)
			frozen, err := loadFixture(t, f).Freeze()
			if err != nil {
				t.Fatal(err)
			}
			defer frozen.Close()
			inputs := tensorsOf(t, f.InputArrays(t))
			graph, err := frozen.NodeCounts()
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int{}
			for kind, n := range graph {
				if !strings.HasPrefix(kind, "prim::") {
					want[kind] = n
				}
			}
			// The profiling executor settles its graph in the first forwards: count the last.
			var prof torch.OpTiming
			for range 3 {
				if prof, err = frozen.OpProfile(inputs...); err != nil {
					t.Fatal(err)
				}
			}
			got := map[string]int{}
			var sum int64
			for _, op := range prof.Ops {
				got[op.Op]++
				sum += op.NS
				if op.NS <= 0 || op.Shapes == "" {
					t.Errorf("%s: %d ns, shapes %q: want a positive time and the input shapes", op.Op, op.NS, op.Shapes)
				}
			}
			if len(got) != len(want) {
				t.Errorf("profiled kinds %v, graph's %v", got, want)
			}
			for kind, n := range want {
				if got[kind] != n {
					t.Errorf("%s: profiled %d calls, the graph has %d nodes (profile %v)", kind, got[kind], n, got)
				}
			}
			if sum > prof.TotalNS || prof.TotalNS <= 0 {
				t.Errorf("ops took %d ns of a %d ns forward", sum, prof.TotalNS)
			}
			if first := prof.Ops[0]; first.Op != "aten::_convolution" || !strings.HasPrefix(first.Shapes, "[1,") {
				t.Errorf("first op %+v: want the first convolution on a batch of 1", first)
			}
			// The call stack survives freezing: each op names the submodule that ran it.
			scopes := map[string]bool{}
			for _, op := range prof.Ops {
				scopes[op.Scope] = true
			}
			want1 := map[string]string{"digits": "conv1", "resnet18": "conv1"}[name]
			if prof.Ops[0].Scope != want1 {
				t.Errorf("first op's module %q, want %q", prof.Ops[0].Scope, want1)
			}
			if name == "resnet18" && (!scopes["layer1.0.conv1"] || !scopes["layer4.1.conv2"] || !scopes["fc"]) {
				t.Errorf("modules %v: want layer1.0.conv1, layer4.1.conv2 and fc among them", scopes)
			}
		})
	}
}

// TestOpProfileBadInputs: wrong inputs are an error naming the model, with no profile left
// installed (the next forward is an ordinary one).
func TestOpProfileBadInputs(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	m := loadFixture(t, f)
	wrong, err := torch.NewTensor([]float32{1, 2, 3}, []int64{1, 3})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if _, err := m.OpProfile(wrong); err == nil || !strings.Contains(err.Error(), "profile ops of") {
		t.Errorf("a [1,3] input to a conv net: error %v, want one saying what failed", err)
	}
	if _, err := m.OpProfile(wrong, wrong); err == nil {
		t.Error("two inputs to a one-input model: want an error")
	}
	inputs := tensorsOf(t, f.InputArrays(t))
	p, err := m.OpProfile(inputs...)
	if err != nil || len(p.Ops) == 0 {
		t.Fatalf("after failed profiles: %v, %d ops", err, len(p.Ops))
	}
	// A failed forward leaves no callback or profile behind: the next profile lists the first
	// convolution at the top level, once.
	if p.Ops[0].Op != "aten::_convolution" || len(p.Ops) != 11 {
		t.Errorf("ops %v after a failed profile, want the 11 of the traced graph, aten::_convolution first", p.Ops)
	}
}
