package export

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/mkldnncheck"
	"github.com/torchspeed/torchspeed/internal/schemacheck"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/export/tritonpb"
	"github.com/torchspeed/torchspeed/pkg/pipeline"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// mkldnnBroken is why oneDNN cannot run here: the artifacts are made in this process, and a
// oneDNN that crashes would end the test binary (see pkg/pipeline's tests).
var mkldnnBroken string

var artifactDir string

func TestMain(m *testing.M) {
	mkldnncheck.ChildMain()
	reason, err := mkldnncheck.SelfCheck(context.Background(), "-test.run=^$")
	if err != nil {
		panic(err)
	}
	mkldnnBroken = reason
	dir, err := os.MkdirTemp("", "torchspeed-export-test-")
	if err != nil {
		panic(err)
	}
	artifactDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	artifactsMu sync.Mutex
	artifacts   = map[string]string{}
)

// artifact optimizes fixture name once per test binary (few timing runs: only the files
// matter here) and returns the artifact's path.
// A name ending in _int8 is the fixture quantized with static INT8 on its calibration set;
// _int8_fastqdq adds the fast_qdq load pass (optimize.fast_qdq on); _fastlinear keeps
// fast_linear (optimize.fast_linear on), _fastconv fast_conv (optimize.fast_conv on), _fuse
// fuse_conv_add (with _int8; optimize.fuse_conv_add on); a final _ofi turns
// optimize.optimize_for_inference on.
func artifact(t *testing.T, name string) (string, fixtures.Fixture) {
	t.Helper()
	base, cl := strings.CutSuffix(name, "_cl")
	base, ofi := strings.CutSuffix(base, "_ofi")
	base, fastConv := strings.CutSuffix(base, "_fastconv")
	base, fuse := strings.CutSuffix(base, "_fuse")
	base, fastLinear := strings.CutSuffix(base, "_fastlinear")
	base, fast := strings.CutSuffix(base, "_fastqdq")
	base, int8 := strings.CutSuffix(base, "_int8")
	f := fixtures.Load(t).Get(t, base)
	artifactsMu.Lock()
	defer artifactsMu.Unlock()
	if p, ok := artifacts[name]; ok {
		return p, f
	}
	c := config.Default()
	c.Model.Path = f.ModelPath()
	for _, in := range f.Inputs {
		ci := config.Input{Name: in.Name, Shape: in.Shape, DType: in.DType}
		if in.DType == "int64" {
			ci.Range = []int64{0, 10}
		}
		c.Model.Inputs = append(c.Model.Inputs, ci)
	}
	c.Runtime.Threads = 1
	if fastLinear {
		c.Optimize.FastLinear = config.On
	}
	if fastConv {
		c.Optimize.FastConv = config.On
	}
	if ofi {
		c.Optimize.OptimizeForInference = config.On
	}
	if cl {
		c.Optimize.ChannelsLast = config.On
	}
	if int8 {
		if f.Calib == nil || len(f.Calib.Inputs) != 1 {
			t.Fatalf("fixture %s has no calibration set", base)
		}
		c.Quantize.Mode, c.Quantize.Observer, c.Quantize.Force = "static", "minmax", true
		c.Calibration.Path, c.Calibration.Limit = f.Path(f.Calib.Inputs[0].File), 64
		if fast {
			c.Optimize.FastQDQ = config.On
		}
		if fuse {
			c.Optimize.FuseConvAdd = config.On
		}
	}
	c.Bench.Runs, c.Bench.Warmup, c.Bench.StageRuns = 4, 1, 3
	c.Output.Dir = filepath.Join(artifactDir, name)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	rep, err := pipeline.Run(context.Background(), &c, pipeline.Options{MKLDNNBroken: mkldnnBroken})
	if err != nil {
		t.Fatalf("optimize %s: %v", name, err)
	}
	if rep.Artifact == nil {
		t.Fatalf("optimize %s wrote no artifact", name)
	}
	if err := schemacheck.CheckFile("report.schema.json", filepath.Join(c.Output.Dir, "report.json")); err != nil {
		t.Errorf("optimize %s: %v", name, err)
	}
	artifacts[name] = *rep.Artifact
	return *rep.Artifact, f
}

// The fixtures the issue names: a CNN, a transformer, the small trained CNN.
var exportFixtures = []string{"digits", "digits_int8", "transformer_traced", "resnet18"}

// export triton writes a repository whose config.pbtxt parses back through the schema with
// every field equal to what the manifest and the model say, whose model.pt is the artifact,
// and which stock libtorch (ts_run) loads and runs to the artifact's answers.
func TestTritonExport(t *testing.T) {
	tsRun := tsRunPath(t)
	for _, name := range exportFixtures {
		t.Run(name, func(t *testing.T) {
			path, f := artifact(t, name)
			a, err := Inspect(path)
			if err != nil {
				t.Fatal(err)
			}
			repo := t.TempDir()
			e, err := WriteTriton(a, repo, TritonOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if e.ModelDir != filepath.Join(repo, f.Name) || e.ModelPath != filepath.Join(repo, f.Name, "1", "model.pt") {
				t.Errorf("layout: %+v", e)
			}
			cfg, err := ReadTritonConfig(e.ConfigPath)
			if err != nil {
				t.Fatal(err)
			}
			checkTritonConfig(t, cfg, a, f)
			text, _ := os.ReadFile(e.ConfigPath)
			for _, want := range []string{`platform: "pytorch_libtorch"`, "kind: KIND_CPU", `key: "INTRA_OP_THREAD_COUNT"`} {
				if !strings.Contains(string(text), want) {
					t.Errorf("config.pbtxt lacks %s:\n%s", want, text)
				}
			}
			if strings.Contains(string(text), "dynamic_batching") {
				t.Errorf("dynamic_batching written without a measurement:\n%s", text)
			}
			checkServedModel(t, a, path, e.ModelPath, e.SavedPasses, e.Notes)
			checkPlainLoad(t, tsRun, e.OpLibrary, e.ModelPath, path, a, f)
		})
	}
}

func checkTritonConfig(t *testing.T, cfg *tritonpb.ModelConfig, a *Artifact, f fixtures.Fixture) {
	t.Helper()
	man := a.Manifest
	if cfg.Name != f.Name || cfg.Platform != "pytorch_libtorch" {
		t.Errorf("name %q platform %q, want %q pytorch_libtorch", cfg.Name, cfg.Platform, f.Name)
	}
	// Every fixture's first dimension is a batch of one sample.
	if !a.Batchable {
		t.Errorf("%s not found batchable: %s", f.Name, a.BatchNote)
	}
	if cfg.MaxBatchSize != DefaultMaxBatch {
		t.Errorf("max_batch_size %d, want %d", cfg.MaxBatchSize, DefaultMaxBatch)
	}
	if len(cfg.Input) != len(man.Inputs) || len(man.Inputs) != len(f.Inputs) {
		t.Fatalf("%d inputs in config, %d in manifest, %d in fixture", len(cfg.Input), len(man.Inputs), len(f.Inputs))
	}
	for i, in := range cfg.Input {
		want := f.Inputs[i]
		if in.Name != fmt.Sprintf("INPUT__%d", i) || in.DataType.String() != tritonType(want.DType) || !slices.Equal(in.Dims, want.Shape[1:]) {
			t.Errorf("input %d: %v, want INPUT__%d %s %v", i, in, i, tritonType(want.DType), want.Shape[1:])
		}
	}
	if len(cfg.Output) != len(f.Outputs) {
		t.Fatalf("%d outputs in config, fixture has %d", len(cfg.Output), len(f.Outputs))
	}
	for i, out := range cfg.Output {
		want := f.Outputs[i]
		if out.Name != fmt.Sprintf("OUTPUT__%d", i) || out.DataType.String() != tritonType(want.DType) || !slices.Equal(out.Dims, want.Shape[1:]) {
			t.Errorf("output %d: %v, want OUTPUT__%d %s %v", i, out, i, tritonType(want.DType), want.Shape[1:])
		}
	}
	if len(cfg.InstanceGroup) != 1 || cfg.InstanceGroup[0].Kind != tritonpb.ModelInstanceGroup_KIND_CPU || cfg.InstanceGroup[0].Count != 1 {
		t.Errorf("instance_group %v, want one KIND_CPU group of 1", cfg.InstanceGroup)
	}
	if cfg.GetDynamicBatching() != nil {
		t.Errorf("dynamic_batching %v without a measurement", cfg.GetDynamicBatching())
	}
	want := map[string]string{
		"INTRA_OP_THREAD_COUNT": strconv.Itoa(man.Runtime.Threads), "INTER_OP_THREAD_COUNT": strconv.Itoa(man.Runtime.InteropThreads),
		"INFERENCE_MODE": "true", "DISABLE_OPTIMIZED_EXECUTION": "false", "ENABLE_JIT_EXECUTOR": "true", "ENABLE_JIT_PROFILING": "true",
	}
	if man.Runtime.Threads != 1 || man.Runtime.InteropThreads != 1 {
		t.Errorf("manifest runtime %+v: the artifact was made with 1 thread and 1 interop thread", man.Runtime)
	}
	if len(cfg.Parameters) != len(want) {
		t.Errorf("parameters %v, want %v", cfg.Parameters, want)
	}
	for k, v := range want {
		if got := cfg.Parameters[k].GetStringValue(); got != v {
			t.Errorf("parameter %s = %q, want %q", k, got, v)
		}
	}
}

func tritonType(npyType string) string {
	switch npyType {
	case "float32":
		return "TYPE_FP32"
	case "int64":
		return "TYPE_INT64"
	}
	return "unexpected " + npyType
}

func tsRunPath(t *testing.T) string {
	p, err := filepath.Abs("../../build/cmake/ts_run")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("ts_run not built (%v): run `make shim`", err)
	}
	return p
}

// checkPlainLoad runs model with ts_run (plain torch::jit::load after dlopen of opLib when not
// empty, contiguous inputs, as Triton feeds them) on the fixture's inputs and compares with the
// artifact run by torchspeed.Load.
func checkPlainLoad(t *testing.T, tsRun, opLib, model, artifactPath string, a *Artifact, f fixtures.Fixture) {
	t.Helper()
	dir := t.TempDir()
	args := []string{model, "--out", dir, "--threads", strconv.Itoa(max(1, a.Manifest.Runtime.Threads))}
	if opLib != "" {
		args = append(args, "--op-library", opLib)
	}
	if a.Manifest.QEngine != "" {
		args = append(args, "--engine", a.Manifest.QEngine)
	}
	arrays := f.InputArrays(t)
	var ins []*torch.Tensor
	for i, arr := range arrays {
		p := filepath.Join(dir, fmt.Sprintf("in%d.bin", i))
		var buf bytes.Buffer
		if err := binary.Write(&buf, binary.LittleEndian, arr.Data); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--input", fmt.Sprintf("%s:%s:%s", arr.DType, dimsString(arr.Shape), p))
		x, err := torch.NewTensorAny(arr.Data, arr.Shape)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		ins = append(ins, x)
	}
	out, err := exec.Command(tsRun, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ts_run %v: %v\n%s", args, err, out)
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
	for _, o := range outs {
		want, err := o.Tensor.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(dir, o.Name+".bin"))
		if err != nil {
			t.Fatalf("ts_run wrote no output %s: %v\n%s", o.Name, err, out)
		}
		got := make([]float32, len(raw)/4)
		if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, got); err != nil || len(got) != len(want) {
			t.Fatalf("output %s: %d values from ts_run, want %d (%v)", o.Name, len(got), len(want), err)
		}
		scale := 1e-6
		for _, w := range want {
			scale = math.Max(scale, math.Abs(float64(w)))
		}
		for i := range got {
			if d := math.Abs(float64(got[i]-want[i])) / scale; d > 1e-4 {
				t.Fatalf("output %s[%d]: plain libtorch %g, torchspeed.Load %g (relative difference %.3g)", o.Name, i, got[i], want[i], d)
			}
		}
	}
}

func dimsString(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return strings.Join(parts, "x")
}

// Hostile inputs get an error naming the input and what to do.
func TestTritonExportErrors(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	if _, err := Inspect(filepath.Join(t.TempDir(), "missing.pt")); err == nil || !strings.Contains(err.Error(), "missing.pt") {
		t.Errorf("missing artifact: %v", err)
	}
	if _, err := Inspect(f.ModelPath()); err == nil || !strings.Contains(err.Error(), "no torchspeed manifest") {
		t.Errorf("plain TorchScript file: %v", err)
	}
	junk := filepath.Join(t.TempDir(), "junk.pt")
	os.WriteFile(junk, []byte("not a zip"), 0o644)
	if _, err := Inspect(junk); err == nil || !strings.Contains(err.Error(), "junk.pt") {
		t.Errorf("junk file: %v", err)
	}
	path, _ := artifact(t, "digits")
	a, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	if _, err := WriteTriton(a, repo, TritonOptions{Name: "../x"}); err == nil || !strings.Contains(err.Error(), `"../x"`) {
		t.Errorf("bad name: %v", err)
	}
	if _, err := WriteTriton(a, repo, TritonOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteTriton(a, repo, TritonOptions{}); err == nil || !strings.Contains(err.Error(), "--overwrite") {
		t.Errorf("second export over the first: %v", err)
	}
	e, err := WriteTriton(a, repo, TritonOptions{Overwrite: true, MaxBatch: -1, Instances: 3})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ReadTritonConfig(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxBatchSize != 0 || !slices.Equal(cfg.Input[0].Dims, a.Inputs[0].Shape) || cfg.InstanceGroup[0].Count != 3 {
		t.Errorf("--max-batch -1 --instances 3: max_batch_size %d, dims %v, count %d", cfg.MaxBatchSize, cfg.Input[0].Dims, cfg.InstanceGroup[0].Count)
	}
}

// The cost measurement times both loaders and names what a plain load loses, from the
// manifest (no speed is asserted: that belongs in benchmarks).
func TestMeasureCost(t *testing.T) {
	path, _ := artifact(t, "digits")
	a, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := MeasureCost(a, path, nil, CostOptions{Runs: 20, Warmup: 2, Server: "Triton"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Rounds != 20 || c.PlainP50Ms <= 0 || c.TorchspeedP50Ms <= 0 || c.PlainP95Ms < c.PlainP50Ms || c.Ratio <= 0 || c.RatioLo > c.Ratio || c.RatioHi < c.Ratio {
		t.Errorf("cost figures: %+v", c)
	}
	want := fmt.Sprintf("Triton will run this model at p50 %.3f ms vs %.3f ms with torchspeed's loader", c.PlainP50Ms, c.TorchspeedP50Ms)
	if !strings.HasPrefix(c.Sentence, want) {
		t.Errorf("sentence %q, want it to start %q", c.Sentence, want)
	}
	man := a.Manifest
	for _, pass := range man.LoadPasses {
		if pass == torchspeed.PassOptimizeForInference && !strings.Contains(c.Sentence, "optimize_for_inference cannot be saved by libtorch") {
			t.Errorf("manifest re-applies %s, sentence does not say so: %q", pass, c.Sentence)
		}
	}
	if slices.Contains(man.LoadPasses, torchspeed.PassFastQDQ) && !strings.Contains(c.Sentence, "libtorch's own quantize_per_tensor and dequantize") {
		t.Errorf("manifest lists fast_qdq, sentence does not say a server runs ATen's ops: %q", c.Sentence)
	}
	if slices.Contains(man.LoadPasses, torchspeed.PassFastLinear) && !strings.Contains(c.Sentence, "torchspeed's GEMM over packed weights") {
		t.Errorf("manifest lists fast_linear, sentence does not say a server runs libtorch's linears: %q", c.Sentence)
	}
	if slices.Contains(man.LoadPasses, torchspeed.PassFastConv) && !strings.Contains(c.Sentence, "libtorch's own convolutions") {
		t.Errorf("manifest lists fast_conv, sentence does not say a server runs libtorch's convolutions: %q", c.Sentence)
	}
	if len(man.LoadPasses) == 0 && !man.ChannelsLast && !strings.Contains(c.Sentence, "nothing torchspeed applies at load time is lost") {
		t.Errorf("manifest has no load-time work, sentence: %q", c.Sentence)
	}
	t.Logf("%s (load passes %v, channels-last %v)", c.Sentence, man.LoadPasses, man.ChannelsLast)
}

// An INT8 artifact with the fast_qdq load pass serves as a graph that calls torchspeed's
// quantize/dequantize (the server loads the op library), or with --stock-ops as one with ATen's
// ops only; the cost sentence says what a server loses either way.
func TestServedModelWithFastQDQ(t *testing.T) {
	if !torch.FastQDQApplies() {
		t.Skip("libtorch has FBGEMM: fast_qdq swaps nothing")
	}
	checkServedOps(t, "digits_int8_fastqdq", torchspeed.PassFastQDQ, "torchspeed::quantize_per_tensor", "aten::quantize_per_tensor", "quantize_per_tensor")
}

// An FP32 artifact with the fast_linear load pass serves as a graph that calls
// torchspeed::transformer_encoder_layer (the traced layers fused whole), or with --stock-ops
// ATen's linears.
func TestServedModelWithFastLinear(t *testing.T) {
	checkServedOps(t, "transformer_traced_fastlinear", torchspeed.PassFastLinear, "torchspeed::transformer_encoder_layer", "aten::linear", "GEMM over packed weights")
}

// checkServedOps: the artifact lists pass; its served file calls op (and names pass among the
// passes it holds), and with stockOps calls stockOp and never a torchspeed:: operator, the cost
// sentence naming lost.
func checkServedOps(t *testing.T, name, pass, op, stockOp, lost string) {
	t.Helper()
	path, _ := artifact(t, name)
	a, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(a.Manifest.LoadPasses, pass) {
		t.Fatalf("artifact load passes %v: want %s", a.Manifest.LoadPasses, pass)
	}
	for _, stock := range []bool{false, true} {
		dst := filepath.Join(t.TempDir(), "model.pt")
		sm, err := writeServedModel(a, dst, stock)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := torch.LoadWithEngine(dst, a.Manifest.QEngine)
		if err != nil {
			t.Fatal(err)
		}
		counts, err := plain.NodeCounts()
		plain.Close()
		if err != nil {
			t.Fatal(err)
		}
		var custom []string
		for k := range counts {
			if strings.HasPrefix(k, "torchspeed::") {
				custom = append(custom, k)
			}
		}
		if stock {
			if len(custom) > 0 || sm.ops {
				t.Errorf("stock ops: the served file calls %v (ops %v)", custom, sm.ops)
			}
			if counts[stockOp] == 0 && !(stockOp == "aten::linear" && counts["aten::matmul"] > 0) {
				t.Errorf("stock ops: the served file calls no %s: %v", stockOp, counts)
			}
			if l := strings.Join(lostAtPlainLoad(a.Manifest, sm.passes), "; "); !strings.Contains(l, lost) {
				t.Errorf("stock ops: what a server loses: %q, want %q named", l, lost)
			}
			continue
		}
		if counts[op] == 0 || !sm.ops || !slices.Contains(sm.passes, pass) {
			t.Errorf("the served file calls no %s (ops %v, passes %v): %v", op, sm.ops, sm.passes, counts)
		}
		if l := strings.Join(lostAtPlainLoad(a.Manifest, sm.passes), "; "); strings.Contains(l, lost) {
			t.Errorf("what a server with the op library loses: %q names %q", l, lost)
		}
	}
}

// checkServedModel: the served file is the artifact unless it holds the graph after some of
// its load-time passes (passes); the notes say what happened to optimize_for_inference.
func checkServedModel(t *testing.T, a *Artifact, artifactPath, served string, passes []string, notes []string) {
	t.Helper()
	hasOFI := slices.Contains(a.Manifest.LoadPasses, torchspeed.PassOptimizeForInference)
	for _, p := range passes {
		if p == SavedChannelsLast {
			if !a.Manifest.ChannelsLast {
				t.Errorf("served file converts its inputs to channels-last, which the artifact does not")
			}
			continue
		}
		if !slices.Contains(a.Manifest.LoadPasses, p) {
			t.Errorf("served file holds %s, which the artifact does not list (%v)", p, a.Manifest.LoadPasses)
		}
	}
	if len(passes) > 0 {
		t.Logf("libtorch %s: %s served as its graph after %v", torch.Version(), filepath.Base(artifactPath), passes)
	} else {
		orig, _ := os.ReadFile(artifactPath)
		copied, _ := os.ReadFile(served)
		if !bytes.Equal(orig, copied) {
			t.Errorf("%s (%d bytes) is not the artifact (%d bytes)", served, len(copied), len(orig))
		}
	}
	if hasOFI && !strings.Contains(strings.Join(notes, "\n"), "optimize_for_inference graph") {
		t.Errorf("notes do not say what happened to optimize_for_inference: %q", notes)
	}
}
