package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// baseHandlerStandIn is the part of TorchServe's ts.torch_handler.base_handler.BaseHandler the
// exported handler relies on: initialize loads the archive's serialized file with
// torch.jit.load and sets self.model. TorchServe itself (Java) is not needed to run the handler.
const baseHandlerStandIn = `import os, torch
class BaseHandler:
    def initialize(self, context):
        d = context.system_properties["model_dir"]
        self.model = torch.jit.load(os.path.join(d, context.manifest["model"]["serializedFile"]))
`

// The driver plays TorchServe: one request per sample with the JSON body the handler
// documents, then prints the handler's responses as JSON.
const handlerDriver = `import json, sys, types
import torch
from ts.torch_handler.base_handler import BaseHandler
sys.path.insert(0, sys.argv[1])
import torchspeed_handler as h
ctx = types.SimpleNamespace(system_properties={"model_dir": sys.argv[1]}, manifest={"model": {"serializedFile": sys.argv[2]}})
handler = h.TorchspeedHandler()
handler.initialize(ctx)
requests = json.load(open(sys.argv[3]))
out = handler.postprocess(handler.inference(handler.preprocess([{"body": json.dumps(r).encode()} for r in requests])))
json.dump({"responses": out, "threads": torch.get_num_threads(), "engine": torch.backends.quantized.engine}, sys.stdout)
`

// export torchserve writes the archiver's inputs with the manifest's settings, and its
// handler, run by Python's torch on the exported files, answers like the artifact; for an
// artifact whose graph calls torchspeed's operators, after loading the op library it archives.
func TestTorchServeExport(t *testing.T) {
	py := "/usr/bin/python3"
	for _, name := range append(slices.Clip(exportFixtures), "digits_int8_fastqdq") {
		t.Run(name, func(t *testing.T) {
			path, f := artifact(t, name)
			a, err := Inspect(path)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			e, err := WriteTorchServe(a, dir, TorchServeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkServedModel(t, a, path, filepath.Join(dir, f.Name+".pt"), e.SavedPasses, e.Notes)
			var mc TorchServeModelConfigFile
			b, err := os.ReadFile(filepath.Join(dir, TorchServeModelConfig))
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &mc); err != nil {
				t.Fatalf("model-config.yaml: %v\n%s", err, b)
			}
			if mc != (TorchServeModelConfigFile{MinWorkers: 1, MaxWorkers: 1, BatchSize: 1, MaxBatchDelay: 0, ResponseTimeout: 120}) {
				t.Errorf("model-config.yaml: %+v", mc)
			}
			props := readProperties(t, filepath.Join(dir, TorchServeConfigProperty))
			threads := a.Manifest.Runtime.Threads
			wantArgs := fmt.Sprintf("--ncores_per_instance %d --ninstances 1 --rank 0 --disable_iomp --use_default_allocator", threads)
			if props["cpu_launcher_enable"] != "true" || props["cpu_launcher_args"] != wantArgs || props["default_workers_per_model"] != "1" {
				t.Errorf("config.properties %v, want cpu_launcher_enable=true cpu_launcher_args=%q default_workers_per_model=1", props, wantArgs)
			}
			extra := "torchspeed_inputs.json"
			if callsTorchspeedOps(t, filepath.Join(dir, f.Name+".pt")) {
				extra += "," + torch.OpsLibraryName
				if !slices.Contains(e.Files, filepath.Join(dir, torch.OpsLibraryName)) {
					t.Errorf("the served graph calls torchspeed's operators (passes %v), files %v lack %s", e.SavedPasses, e.Files, torch.OpsLibraryName)
				}
			}
			wantCmd := fmt.Sprintf("torch-model-archiver --model-name %s --version 1.0 --serialized-file %s.pt --handler torchspeed_handler.py --extra-files %s --config-file model-config.yaml --export-path model-store --force", f.Name, f.Name, extra)
			script, _ := os.ReadFile(filepath.Join(dir, "archive.sh"))
			if !strings.Contains(string(script), wantCmd+"\n") || !strings.HasSuffix(e.ArchiverCommand, wantCmd) {
				t.Errorf("archiver command %q / archive.sh:\n%s\nwant %s", e.ArchiverCommand, script, wantCmd)
			}
			var spec TorchServeSpec
			b, _ = os.ReadFile(filepath.Join(dir, TorchServeSpecFile))
			if err := json.Unmarshal(b, &spec); err != nil {
				t.Fatal(err)
			}
			if len(spec.Inputs) != len(f.Inputs) || !spec.Batchable || spec.Threads != threads || spec.QEngine != a.Manifest.QEngine ||
				(spec.OpLibrary != "") != strings.Contains(extra, torch.OpsLibraryName) {
				t.Errorf("%s: %+v", TorchServeSpecFile, spec)
			}
			for i, in := range spec.Inputs {
				if in.Name != f.Inputs[i].Name || in.DType != f.Inputs[i].DType || !slices.Equal(in.Shape, f.Inputs[i].Shape) {
					t.Errorf("spec input %d: %+v, fixture %+v", i, in, f.Inputs[i])
				}
			}
			checkHandler(t, py, dir, f.Name, path, f.InputArrays(t))
		})
	}
}

// callsTorchspeedOps says whether the model file's graphs call any torchspeed:: operator.
func callsTorchspeedOps(t *testing.T, path string) bool {
	t.Helper()
	m, err := torch.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	counts, err := m.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	for op, n := range counts {
		if strings.HasPrefix(op, "torchspeed::") && n > 0 {
			return true
		}
	}
	return false
}

func readProperties(t *testing.T, path string) map[string]string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			props[k] = v
		}
	}
	return props
}

// checkHandler sends two requests (the fixture's sample and a second one) through the
// exported handler in Python and compares each response with the artifact's answer.
func checkHandler(t *testing.T, py, dir, name, artifactPath string, arrays []*npyArray) {
	t.Helper()
	stub := t.TempDir()
	if err := os.MkdirAll(filepath.Join(stub, "ts", "torch_handler"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, body := range map[string]string{
		"ts/__init__.py": "", "ts/torch_handler/__init__.py": "", "ts/torch_handler/base_handler.py": baseHandlerStandIn,
		"driver.py": handlerDriver,
	} {
		if err := os.WriteFile(filepath.Join(stub, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Two samples: the fixture's, and the same scaled (a different request in one batch).
	var requests []map[string]any
	var samples [][]*torch.Tensor
	for k := 0; k < 2; k++ {
		var req []any
		var ins []*torch.Tensor
		for _, arr := range arrays {
			data, nested := sampleData(arr, k)
			req = append(req, nested)
			x, err := torch.NewTensorAny(data, arr.Shape)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			ins = append(ins, x)
		}
		requests = append(requests, map[string]any{"inputs": req})
		samples = append(samples, ins)
	}
	reqFile := filepath.Join(stub, "requests.json")
	b, _ := json.Marshal(requests)
	os.WriteFile(reqFile, b, 0o644)
	cmd := exec.Command(py, filepath.Join(stub, "driver.py"), dir, name+".pt", reqFile)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+stub)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("handler under %s: %v\n%s", py, err, stderr.Bytes())
	}
	var res struct {
		Responses [][]any `json:"responses"`
		Threads   int     `json:"threads"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("handler output: %v\n%s", err, out)
	}
	if len(res.Responses) != 2 {
		t.Fatalf("%d responses to 2 requests", len(res.Responses))
	}
	m, err := torchspeed.Load(artifactPath, torchspeed.LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for k, ins := range samples {
		outs, err := m.Predict(ins...)
		if err != nil {
			t.Fatal(err)
		}
		defer torch.CloseOutputs(outs)
		if len(res.Responses[k]) != len(outs) {
			t.Fatalf("request %d: %d outputs, artifact gives %d", k, len(res.Responses[k]), len(outs))
		}
		for i, o := range outs {
			want, _ := o.Tensor.Float32s()
			got := flatten(res.Responses[k][i])
			if len(got) != len(want) {
				t.Fatalf("request %d output %d: %d values, want %d", k, i, len(got), len(want))
			}
			w64 := make([]float64, len(want))
			for j, v := range want {
				w64[j] = float64(v)
			}
			if d := maxRelDiff(got, w64); d > 1e-4 {
				t.Errorf("request %d output %d: handler differs from the artifact (max relative difference %.3g)", k, i, d)
			}
		}
	}
}

type npyArray = npy.Array

// sampleData is sample k of a fixture input: the data for a batch-of-one tensor, and the
// same sample without its batch dimension as nested lists, as a request carries it. Sample 1
// halves float inputs so the two requests differ.
func sampleData(arr *npyArray, k int) (any, any) {
	switch d := arr.Data.(type) {
	case []float32:
		v := append([]float32{}, d...)
		if k == 1 {
			for i := range v {
				v[i] *= 0.5
			}
		}
		return v, nest(toAny(v), arr.Shape[1:])
	case []int64:
		return d, nest(toAny(d), arr.Shape[1:])
	}
	panic(fmt.Sprintf("fixture dtype %T", arr.Data))
}

func toAny[T any](v []T) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

func nest(flat []any, shape []int64) any {
	if len(shape) == 0 {
		return flat[0]
	}
	step := len(flat) / int(shape[0])
	out := make([]any, shape[0])
	for i := range out {
		out[i] = nest(flat[i*step:(i+1)*step], shape[1:])
	}
	return out
}

func flatten(v any) []float64 {
	switch x := v.(type) {
	case float64:
		return []float64{x}
	case []any:
		var out []float64
		for _, e := range x {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return nil
}

// TestTorchServeLauncherArgsParse runs the exported cpu_launcher_args through the launcher's own
// argument parser (torch.backends.xeon.run_cpu, Debian's python3-torch), as TorchServe passes
// them: one worker gets one instance (run_cpu would otherwise start cores / threads copies);
// with N workers TorchServe's appended --ninstances N --rank i win.
func TestTorchServeLauncherArgsParse(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch.backends.xeon.run_cpu").Run(); err != nil {
		t.Skipf("no torch.backends.xeon.run_cpu in %s: %v", py, err)
	}
	args := strings.Fields(launcherArgs(2, "jemalloc"))
	for _, tc := range []struct {
		extra          []string
		ninst, rank, n int
	}{
		{nil, 1, 0, 2},
		{[]string{"--ninstances", "4", "--rank", "3"}, 4, 3, 2},
	} {
		argv := append(append(append([]string{}, args...), tc.extra...), "--no_python", "hostname")
		script := "import sys, json\nfrom argparse import ArgumentParser\nfrom torch.backends.xeon import run_cpu\n" +
			"p = ArgumentParser()\nrun_cpu.create_args(p)\na = p.parse_args(sys.argv[1:])\n" +
			"print(json.dumps([a.ninstances, a.rank, a.ncores_per_instance, a.enable_jemalloc, a.disable_iomp]))"
		out, err := exec.Command(py, append([]string{"-c", script}, argv...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("run_cpu's parser on %q: %v\n%s", argv, err, out)
		}
		var got []any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		want := []any{float64(tc.ninst), float64(tc.rank), float64(tc.n), true, true}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q: ninstances, rank, ncores_per_instance, jemalloc, disable_iomp = %v, want %v", argv, got, want)
		}
	}
}
