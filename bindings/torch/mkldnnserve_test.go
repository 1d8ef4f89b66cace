package torch_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// optimizedFixture loads a fixture, freezes it and applies optimize_for_inference, as
// torchspeed.Load does for an artifact that lists the pass.
func optimizedFixture(t *testing.T, f fixtures.Fixture) *torch.Module {
	t.Helper()
	m := loadFixture(t, f)
	frozen, err := m.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	opt, err := frozen.OptimizeForInference()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { opt.Close() })
	return opt
}

// optimize_for_inference's oneDNN graph of real CNNs (plain, grouped and depthwise convolutions,
// ReLU6 clamps, residual adds) saved through ServeMKLDNN loads back plainly and answers exactly
// like the graph the pass made: the same primitives on weights laid out the same way. The pass's
// own graph does not load back (the reason ServeMKLDNN exists).
func TestServeMKLDNNSavesOptimizedCNNs(t *testing.T) {
	skipIfMKLDNNBroken(t)
	if why := torch.MKLDNNServeUnavailable(); why != "" {
		t.Skip(why)
	}
	man := fixtures.Load(t)
	for _, name := range []string{"digits", "mobilenet_v2", "resnet18"} {
		t.Run(name, func(t *testing.T) {
			f := man.Get(t, name)
			opt := optimizedFixture(t, f)
			before, err := opt.NodeCounts()
			if err != nil {
				t.Fatal(err)
			}
			if before["prim::ConstantMKLDNNTensor"] == 0 {
				t.Fatalf("optimize_for_inference made no oneDNN constants: %v", before)
			}
			dir := t.TempDir()
			if err := opt.Save(filepath.Join(dir, "ofi.pt"), nil); err == nil {
				if back, err := torch.Load(filepath.Join(dir, "ofi.pt")); err == nil {
					back.Close()
					t.Logf("libtorch %s loads the pass's own graph back", torch.Version())
				}
			}
			served, constants, others, err := opt.ServeMKLDNN()
			if err != nil {
				t.Fatal(err)
			}
			defer served.Close()
			if constants != before["prim::ConstantMKLDNNTensor"] {
				t.Errorf("%d constants replaced, the graph had %d", constants, before["prim::ConstantMKLDNNTensor"])
			}
			if want := before["prim::MKLDNNHardTanh_"] + before["prim::MKLDNNClamp_"] + before["prim::BroadcastMKLDNNTensors"]; others != want {
				t.Errorf("%d other nodes replaced, want %d", others, want)
			}
			path := filepath.Join(dir, "served.pt")
			if err := served.Save(path, nil); err != nil {
				t.Fatal(err)
			}
			back, err := torch.Load(path)
			if err != nil {
				t.Fatalf("the served graph does not load back: %v", err)
			}
			defer back.Close()
			after, err := back.NodeCounts()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"prim::ConstantMKLDNNTensor", "prim::MKLDNNHardTanh_", "prim::MKLDNNClamp_", "prim::BroadcastMKLDNNTensors"} {
				if after[k] != 0 {
					t.Errorf("the loaded graph still has %d %s", after[k], k)
				}
			}
			if after["prim::mkldnn_convolution"] != before["prim::mkldnn_convolution"] || after["torchspeed::mkldnn_constant"] != constants {
				t.Errorf("loaded graph %v: want the pass's %d oneDNN convolutions over %d torchspeed::mkldnn_constant", after, before["prim::mkldnn_convolution"], constants)
			}
			in := tensorsOf(t, f.InputArrays(t))
			want, err := opt.Forward(in...)
			if err != nil {
				t.Fatal(err)
			}
			defer torch.CloseOutputs(want)
			got, err := back.Forward(in...)
			if err != nil {
				t.Fatal(err)
			}
			defer torch.CloseOutputs(got)
			for i := range want {
				w, err := want[i].Tensor.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				g, err := got[i].Tensor.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(g, w) {
					t.Errorf("output %s: the loaded graph answers differently from the pass's (max abs diff %g)", want[i].Name, maxAbs(g, w))
				}
			}
		})
	}
}

// ChannelsLastInputs writes the conversion into forward: the same answers from a contiguous
// input, an aten::contiguous node in the graph, and a clear error for a position forward lacks.
func TestChannelsLastInputs(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	m := loadFixture(t, f)
	for _, bad := range [][]int{{1}, {-1}, {}} {
		if mod, err := m.ChannelsLastInputs(bad); err == nil {
			mod.Close()
			t.Errorf("ChannelsLastInputs(%v) on a one-input forward: no error", bad)
		}
	}
	cl, err := m.ChannelsLastInputs([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	counts, err := cl.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	if counts["aten::contiguous"] == 0 {
		t.Errorf("no aten::contiguous in forward: %v", counts)
	}
	in := tensorsOf(t, f.InputArrays(t))
	want, err := m.Forward(in...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(want)
	got, err := cl.Forward(in...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(got)
	w, _ := want[0].Tensor.Float32s()
	g, _ := got[0].Tensor.Float32s()
	if d := maxAbs(g, w); d > 1e-4 {
		t.Errorf("channels-last forward answers %g away from the original", d)
	}
}
