package export

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// Artifacts whose load-time passes call torchspeed's operators, INT8 and FP32: a Triton export
// serves their graphs with those operators, and stock libtorch runs them once the op library is
// loaded: a C++ program that only dlopens it and calls torch::jit::load (ts_run), and Debian's
// Python PyTorch through torch.ops.load_library and torch.jit.load. Both answer like
// torchspeed.Load on the artifact.
func TestStockLibtorchRunsOps(t *testing.T) {
	tsRun := tsRunPath(t)
	python := "/usr/bin/python3"
	for _, c := range []struct {
		name string
		pass string
		op   string
	}{
		{"digits_int8_fastqdq", torchspeed.PassFastQDQ, "torchspeed::quantize_per_tensor"},
		{"digits_fastconv", torchspeed.PassFastConv, "torchspeed::conv2d_gemm"},
		{"transformer_traced_fastlinear", torchspeed.PassFastLinear, "torchspeed::transformer_encoder_layer"},
		// A CNN's optimize_for_inference graph (oneDNN convolutions), channels-last input.
		{"digits_ofi_cl", torchspeed.PassOptimizeForInference, "torchspeed::mkldnn_constant"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.pass == torchspeed.PassFastQDQ && !torch.FastQDQApplies() {
				t.Skip("libtorch has FBGEMM: fast_qdq swaps nothing")
			}
			if c.pass == torchspeed.PassOptimizeForInference && (mkldnnBroken != "" || torch.MKLDNNServeUnavailable() != "") {
				t.Skip(mkldnnBroken + torch.MKLDNNServeUnavailable())
			}
			path, f := artifact(t, c.name)
			a, err := Inspect(path)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(a.Manifest.LoadPasses, c.pass) {
				t.Fatalf("artifact load passes %v: want %s", a.Manifest.LoadPasses, c.pass)
			}
			if strings.HasSuffix(c.name, "_cl") && !a.Manifest.ChannelsLast {
				t.Fatalf("artifact %s: channels_last forced on, manifest says off", c.name)
			}
			repo := t.TempDir()
			e, err := WriteTriton(a, repo, TritonOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if e.OpLibrary != filepath.Join(repo, f.Name, torch.OpsLibraryName) || !slices.Contains(e.SavedPasses, c.pass) {
				t.Fatalf("op library %q, saved passes %v: want the library beside config.pbtxt and %s saved", e.OpLibrary, e.SavedPasses, c.pass)
			}
			if e.EnvPath == "" {
				t.Fatalf("no %s written for a model that needs the op library preloaded", RuntimeEnvFile)
			}
			raw, err := os.ReadFile(e.EnvPath)
			if err != nil {
				t.Fatal(err)
			}
			env := string(raw)
			if !strings.Contains(env, "\nLD_PRELOAD="+e.OpLibrary+"\n") {
				t.Errorf("%s does not preload %s:\n%s", e.EnvPath, e.OpLibrary, env)
			}
			mod, err := torch.LoadWithEngine(e.ModelPath, a.Manifest.QEngine)
			if err != nil {
				t.Fatal(err)
			}
			counts, err := mod.NodeCounts()
			mod.Close()
			if err != nil {
				t.Fatal(err)
			}
			if counts[c.op] == 0 {
				t.Fatalf("model.pt calls no %s: %v", c.op, counts)
			}
			checkServedManifest(t, e.ModelPath, a.Manifest, e.SavedPasses)
			checkPlainLoad(t, tsRun, e.OpLibrary, e.ModelPath, path, a, f)
			checkPythonLoad(t, python, e.OpLibrary, e.ModelPath, path, a, f)
			if c.pass == torchspeed.PassOptimizeForInference {
				// The oneDNN weights are laid out by the loading process for its own CPU: a
				// server capped to AVX2 (another blocking than AVX-512's) answers alike.
				checkPythonLoad(t, python, e.OpLibrary, e.ModelPath, path, a, f, "ONEDNN_MAX_CPU_ISA=AVX2")
			}
			// Without the library stock libtorch cannot resolve the operators: the export must
			// ship it, and the test above proves the library is what makes the graph load.
			out, err := exec.Command(tsRun, e.ModelPath).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "torchspeed") {
				t.Errorf("ts_run without the op library: err %v, output %s: want an unknown torchspeed operator", err, out)
			}
		})
	}
}

// checkServedManifest: the served file's manifest lists no load-time pass and no channels-last
// conversion that its graph already holds, so torchspeed.Load does not apply them again; a
// channels-last artifact's served graph converts its inputs itself.
func checkServedManifest(t *testing.T, model string, artifact *torchspeed.Manifest, saved []string) {
	t.Helper()
	served, err := Inspect(model)
	if err != nil {
		t.Fatal(err)
	}
	if len(served.Manifest.LoadPasses) != 0 {
		t.Errorf("the served manifest still lists load-time passes %v", served.Manifest.LoadPasses)
	}
	if artifact.ChannelsLast != slices.Contains(saved, SavedChannelsLast) {
		t.Errorf("artifact channels_last %v, saved passes %v: the served graph must convert its inputs exactly when the artifact does", artifact.ChannelsLast, saved)
	}
	if served.Manifest.ChannelsLast {
		t.Errorf("the served manifest says channels_last although its graph converts the inputs")
	}
	mod, err := torch.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	counts, err := mod.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	if artifact.ChannelsLast && counts["aten::contiguous"] == 0 {
		t.Errorf("the served graph of a channels-last artifact has no aten::contiguous: %v", counts)
	}
	if counts["prim::ConstantMKLDNNTensor"] != 0 {
		t.Errorf("the served graph keeps prim::ConstantMKLDNNTensor, which serialization drops: %v", counts)
	}
}

// checkPythonLoad runs model in Python PyTorch (torch.ops.load_library(opLib), torch.jit.load)
// on the fixture's inputs and compares with the artifact run by torchspeed.Load.
func checkPythonLoad(t *testing.T, python, opLib, model, artifactPath string, a *Artifact, f fixtures.Fixture, env ...string) {
	t.Helper()
	dir := t.TempDir()
	engine := a.Manifest.QEngine
	if engine == "" {
		engine = "-"
	}
	args := []string{"testdata/stock_load.py", opLib, strconv.Itoa(max(1, a.Manifest.Runtime.Threads)), engine, model, dir}
	for _, in := range f.Inputs {
		args = append(args, f.Path(in.File))
	}
	cmd := exec.Command(python, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", python, args, err, out)
	}
	want := torchspeedOutputs(t, artifactPath, f)
	for i, w := range want {
		got, err := npy.ReadFile(filepath.Join(dir, strconv.Itoa(i)+".npy"))
		if err != nil {
			t.Fatalf("Python wrote no output %d: %v", i, err)
		}
		g, ok := got.Data.([]float32)
		if !ok || len(g) != len(w) {
			t.Fatalf("output %d: Python gave %s %v, torchspeed.Load %d floats", i, got.DType, got.Shape, len(w))
		}
		scale := 1e-6
		for _, v := range w {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		for j := range g {
			if d := math.Abs(float64(g[j]-w[j])) / scale; d > 1e-4 {
				t.Fatalf("output %d[%d]: Python %g, torchspeed.Load %g (relative difference %.3g)", i, j, g[j], w[j], d)
			}
		}
	}
}

// torchspeedOutputs runs the artifact with torchspeed.Load on the fixture's inputs.
func torchspeedOutputs(t *testing.T, artifactPath string, f fixtures.Fixture) [][]float32 {
	t.Helper()
	var ins []*torch.Tensor
	for _, arr := range f.InputArrays(t) {
		x, err := torch.NewTensorAny(arr.Data, arr.Shape)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		ins = append(ins, x)
	}
	m, err := torchspeed.Load(artifactPath, torchspeed.LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	outs, err := m.Predict(ins...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(outs)
	var res [][]float32
	for _, o := range outs {
		v, err := o.Tensor.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, v)
	}
	return res
}

// A CNN's optimize_for_inference graph (oneDNN convolutions) does not load back in libtorch 1.13
// as the pass leaves it: the served graph holds it with torchspeed's serializable oneDNN constants
// (where this build has them), so nothing of the pass is lost; otherwise it holds the artifact's
// other passes and the note says optimize_for_inference was left out and why. With stock
// operators only, the pass is never in the served file.
func TestServedModelKeepsOFI(t *testing.T) {
	if mkldnnBroken != "" {
		t.Skip(mkldnnBroken)
	}
	path, _ := artifact(t, "multi_fastlinear_ofi")
	a, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(a.Manifest.LoadPasses, torchspeed.PassOptimizeForInference) || !slices.Contains(a.Manifest.LoadPasses, torchspeed.PassFastLinear) {
		t.Fatalf("artifact load passes %v: want optimize_for_inference and fast_linear", a.Manifest.LoadPasses)
	}
	dst := filepath.Join(t.TempDir(), "model.pt")
	sm, err := writeServedModel(a, dst, false)
	if err != nil {
		t.Fatal(err)
	}
	if !sm.ops || !slices.Contains(sm.passes, torchspeed.PassFastLinear) {
		t.Fatalf("served passes %v (ops %v): want fast_linear with torchspeed's operators", sm.passes, sm.ops)
	}
	plain, err := torch.Load(dst)
	if err != nil {
		t.Fatalf("the served file does not load plainly: %v (note %q)", err, sm.note)
	}
	counts, err := plain.NodeCounts()
	plain.Close()
	if err != nil {
		t.Fatal(err)
	}
	if counts["torchspeed::linear_packed"] == 0 {
		t.Errorf("the served file calls no torchspeed::linear_packed: %v", counts)
	}
	lost := strings.Join(lostAtPlainLoad(a.Manifest, sm.passes), "; ")
	if torch.MKLDNNServeUnavailable() == "" {
		if !slices.Contains(sm.passes, torchspeed.PassOptimizeForInference) || counts["torchspeed::mkldnn_constant"] == 0 || counts["prim::mkldnn_convolution"] == 0 {
			t.Fatalf("served passes %v, nodes %v: want optimize_for_inference's oneDNN convolutions over torchspeed::mkldnn_constant (note %q)", sm.passes, counts, sm.note)
		}
		if strings.Contains(lost, "optimize_for_inference") {
			t.Errorf("what a server loses: %q, though the served graph holds optimize_for_inference", lost)
		}
	} else {
		if slices.Contains(sm.passes, torchspeed.PassOptimizeForInference) {
			t.Logf("libtorch %s loads this optimize_for_inference graph back: %s", torch.Version(), sm.note)
		} else {
			if !strings.Contains(sm.note, "the optimize_for_inference graph is left out") {
				t.Errorf("note %q does not say optimize_for_inference was left out", sm.note)
			}
			if !strings.Contains(lost, "optimize_for_inference cannot be saved") {
				t.Errorf("what a server loses: %q, want optimize_for_inference named", lost)
			}
		}
	}
	stock := filepath.Join(t.TempDir(), "model.pt")
	ss, err := writeServedModel(a, stock, true)
	if err != nil {
		t.Fatal(err)
	}
	if ss.ops || slices.Contains(ss.passes, torchspeed.PassFastLinear) {
		t.Errorf("stock-ops served file: passes %v, ops %v: want no torchspeed operator", ss.passes, ss.ops)
	}
	sp, err := torch.Load(stock)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sp.NodeCounts()
	sp.Close()
	if err != nil {
		t.Fatal(err)
	}
	for op, n := range sc {
		if strings.HasPrefix(op, "torchspeed::") && n > 0 {
			t.Errorf("stock-ops served file calls %s", op)
		}
	}
}
