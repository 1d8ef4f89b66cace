package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/npy"
)

// Every typed fixture's 100-call reference stream through `run --save` matches PyTorch's.
func TestCLIRunSaveMatchesStreams(t *testing.T) {
	man := fixtures.Load(t)
	for _, c := range []struct{ fixture, method string }{
		{"streaming", "forward"}, {"typed_args", "forward"}, {"two_methods", "forward"}, {"two_methods", "embed"},
	} {
		f := man.Get(t, c.fixture)
		worst := streamRun(t, f, c.method)
		t.Logf("%s.%s: %d calls, max abs diff %.3g", c.fixture, c.method, f.Stream(t, c.method).Calls, worst)
		if worst > streamTolerance {
			t.Errorf("%s.%s: max abs diff %.3g > %g", c.fixture, c.method, worst, streamTolerance)
		}
	}
}

// config init writes a config that run -c and bench -c accept; with the stream's data given to
// config init, run -c reproduces PyTorch's stream.
func TestCLITypedConfigInit(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "streaming")
	s := f.Stream(t, "forward")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	_, stderr, code := cli(t, dir, nil, "config", "init", "-m", f.ModelPath(), "-o", cfg,
		"--input", "seq:"+f.Path(s.Args[0].Tensor.File), "--input", "sr=int:16000")
	if code != 0 {
		t.Fatalf("config init: exit %d: %s", code, stderr)
	}
	body, _ := os.ReadFile(cfg)
	for _, want := range []string{"# stateful: yes (forward assigns _c, _context", "reset_method: reset_states", `type: "int"`, "value: 16000", `data: "seq:`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("config lacks %q:\n%s", want, body)
		}
	}
	out := filepath.Join(dir, "out.npz")
	stdout, stderr, code := cli(t, dir, nil, "run", "-c", cfg, "--save", out)
	if code != 0 || !strings.Contains(stdout, "stateful: yes") {
		t.Fatalf("run -c: exit %d\n%s%s", code, stdout, stderr)
	}
	all := make([]int, s.Calls)
	for i := range all {
		all[i] = i
	}
	if d := compareSaved(t, f, s, out, all); d > streamTolerance {
		t.Errorf("run -c: max abs diff %.3g", d)
	}
	if _, stderr, code := cli(t, dir, nil, "bench", "-c", cfg, "--runs", "30", "--warmup", "2", "--threads", "1", "--runtime", "default"); code != 0 {
		t.Errorf("bench -c: exit %d: %s", code, stderr)
	}

	// Without values: every argument with its type, defaults from the schema, TODOs elsewhere.
	typed := man.Get(t, "typed_args")
	stdout, stderr, code = cli(t, dir, nil, "config", "init", "-m", typed.ModelPath())
	if code != 0 {
		t.Fatalf("config init typed_args: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"# stateful: no", `type: "Optional[Tensor]"`, `type: "List[Tensor]"`, `type: "Tuple[Tensor, Tensor]"`,
		`type: "float"`, "value: null   # TODO: the float to pass", `value: "mean"   # the schema's default`, "value: 2   # the schema's default"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("typed_args config lacks %q:\n%s", want, stdout)
		}
	}
}

// bench --streams 2 on the stateful fixture: each stream its own session, no crash.
func TestCLIBenchStreamsStateful(t *testing.T) {
	f := fixtures.Load(t).Get(t, "streaming")
	x := "x=seq:" + f.Path(f.Stream(t, "forward").Args[0].Tensor.File)
	runs := "300"
	if os.Getenv("TORCHSPEED_STREAM_RUNS") != "" {
		runs = os.Getenv("TORCHSPEED_STREAM_RUNS") // 5000 by hand
	}
	stdout, stderr, code := cli(t, t.TempDir(), nil, "bench", "-m", f.ModelPath(), "--input", x, "--input", "sr=int:16000",
		"--streams", "2", "--threads", "1", "--runs", runs, "--warmup", "5", "--runtime", "default", "--json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var rep struct {
		Throughput struct {
			Streams    int `json:"streams"`
			Inferences int `json:"inferences"`
		} `json:"throughput"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if n, _ := strconv.Atoi(runs); rep.Throughput.Streams != 2 || rep.Throughput.Inferences != 2*n {
		t.Errorf("throughput: %+v, want 2 streams of %s runs", rep.Throughput, runs)
	}
}

// Each bad input exits 2 with a message naming the argument, and --save leaves no file.
func TestCLITypedBadInputs(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "streaming")
	chunks := f.Path(f.Stream(t, "forward").Args[0].Tensor.File)
	typed := man.Get(t, "typed_args")
	wrongShape := typed.Path(typed.Stream(t, "forward").Args[0].Tensor.File) // [100, 1, 5, 8]
	dir := t.TempDir()
	out := filepath.Join(dir, "out.npz")
	config := func(inputs string) string {
		p := filepath.Join(dir, fmt.Sprintf("c%d.yaml", len(inputs)))
		body := fmt.Sprintf("model:\n  path: %s\n  inputs:\n%s", f.ModelPath(), inputs)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	x := "x=seq:" + chunks
	short := filepath.Join(dir, "short.npy") // 10 calls
	if err := npy.WriteFile(short, rowsOf(t, typed.Array(t, *typed.Stream(t, "forward").Args[0].Tensor), []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"wrong scalar type", []string{"run", "-m", f.ModelPath(), "--input", x, "--input", "sr=float:0.5"}, []string{"argument sr", "int:N"}},
		{"not a value", []string{"run", "-m", f.ModelPath(), "--input", x, "--input", "sr=16000"}, []string{"sr=16000", "int:N"}},
		{"missing argument", []string{"run", "-m", f.ModelPath(), "--input", x}, []string{"missing argument sr (int)", "--input sr=int:N"}},
		{"unknown argument", []string{"run", "-m", f.ModelPath(), "--input", x, "--input", "rate=int:1"}, []string{`no argument "rate"`, "sr: int"}},
		{"unknown method", []string{"run", "-m", f.ModelPath(), "--method", "stream"}, []string{`no method "stream"`, "reset_states"}},
		{"seq wrong shape", []string{"run", "-c", config(fmt.Sprintf("    - {name: x, data: \"seq:%s\", shape: [1, 256]}\n    - {name: sr, type: int, value: 16000}\n", wrongShape))},
			[]string{"argument x", "[1 5 8]", "[1 256]"}},
		{"seq lengths differ", []string{"run", "-m", typed.ModelPath(), "--input", "x=seq:" + wrongShape, "--input", "mask=none",
			"--input", "extras=seq:" + short, "--input", "pair=" + chunks + "," + chunks, "--input", "scale=float:1", "--input", "normalize=bool:true"},
			[]string{"argument extras", "holds 10 calls", "holds 100", "as long"}},
		{"batch_dim out of range", []string{"run", "-c", config(fmt.Sprintf("    - {name: x, data: \"seq:%s\", batch_dim: 2}\n    - {name: sr, type: int, value: 16000}\n", chunks))},
			[]string{"argument x", "batch_dim 2 is out of range"}},
		{"constant of the wrong type in a config", []string{"run", "-c", config("    - {name: x, shape: [1, 256]}\n    - {name: sr, type: float, value: 0.5}\n")},
			[]string{"argument sr is declared float", "int"}},
		{"unknown reset method", []string{"bench", "--runtime", runtimeDefault, "--runs", "5", "-c", config(fmt.Sprintf("    - {name: x, data: \"seq:%s\"}\n    - {name: sr, type: int, value: 16000}\n  reset_method: clear\n", chunks))},
			[]string{"bench: --method or model.reset_method", `reset method "clear"`, "reset_states"}},
		{"bench wrong scalar type", []string{"bench", "--runtime", runtimeDefault, "-m", f.ModelPath(), "--input", x, "--input", "sr=bool:true", "--runs", "5"}, []string{"argument sr"}},
	} {
		args := c.args
		if args[0] == "run" {
			args = append(args, "--save", out)
		}
		var stderr string
		var code int
		if i == 0 {
			_, stderr, code = cli(t, dir, nil, args...) // the binary's exit code
		} else {
			_, stderr, code = inProcess(args...) // the command's code, without a process start each
		}
		if code != exitcode.Usage {
			t.Errorf("%s: exit %d, want %d: %s", c.name, code, exitcode.Usage, stderr)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: message lacks %q: %s", c.name, w, stderr)
			}
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: left %s behind", c.name, out)
		}
	}
}

// A model shaped like Silero VAD v4 (an nn.LSTM with flattened weights, (h, c) in attributes):
// run replays its chunk stream as PyTorch does on one copy, and bench runs two streams.
func TestCLIRunBenchLSTMFlatWeights(t *testing.T) {
	f := fixtures.Load(t).Get(t, "vad_lstm")
	if worst := streamRun(t, f, "forward"); worst > streamTolerance {
		t.Errorf("run: max abs diff %.3g from PyTorch > %g", worst, streamTolerance)
	}
	x := "x=seq:" + f.Path(f.Stream(t, "forward").Args[0].Tensor.File)
	stdout, stderr, code := cli(t, t.TempDir(), nil, "bench", "-m", f.ModelPath(), "--input", x, "--input", "sr=int:16000",
		"--streams", "2", "--threads", "1", "--runs", "40", "--warmup", "2", "--runtime", "default", "--json")
	if code != 0 {
		t.Fatalf("bench --streams 2: exit %d\n%s", code, stderr)
	}
	var rep struct {
		Throughput struct {
			Streams    int `json:"streams"`
			Inferences int `json:"inferences"`
		} `json:"throughput"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if rep.Throughput.Streams != 2 || rep.Throughput.Inferences != 80 {
		t.Errorf("throughput: %+v, want 2 streams of 40 runs", rep.Throughput)
	}
}

// run prints a method that returns List[str] (a demo app's get_classes), as text and in --json.
func TestCLIRunStrOutputs(t *testing.T) {
	f := fixtures.Load(t).Get(t, "classes")
	dir := t.TempDir()
	stdout, stderr, code := cli(t, dir, nil, "run", "-m", f.ModelPath(), "--method", "get_classes")
	if code != 0 {
		t.Fatalf("run --method get_classes: exit %d\n%s", code, stderr)
	}
	quoted := make([]string, len(f.Classes))
	for i, c := range f.Classes {
		quoted[i] = strconv.Quote(c)
	}
	if want := fmt.Sprintf("str[%d]  [%s]", len(f.Classes), strings.Join(quoted, ", ")); !strings.Contains(stdout, want) {
		t.Errorf("output lacks %q:\n%s", want, stdout)
	}
	stdout, stderr, code = cli(t, dir, nil, "run", "-m", f.ModelPath(), "--method", "get_classes", "--json")
	if code != 0 {
		t.Fatalf("run --json: exit %d\n%s", code, stderr)
	}
	var out struct {
		Outputs []struct {
			Name   string   `json:"name"`
			DType  string   `json:"dtype"`
			Shape  []int64  `json:"shape"`
			Values []string `json:"values"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(out.Outputs) != 1 || out.Outputs[0].DType != "str" || !slices.Equal(out.Outputs[0].Values, f.Classes) ||
		!slices.Equal(out.Outputs[0].Shape, []int64{int64(len(f.Classes))}) {
		t.Errorf("--json outputs %+v, want one str output %v", out.Outputs, f.Classes)
	}
}

// config init records the dtype of --input data (uint8 images of a demo-app model), so that
// optimize -c accepts the config it wrote.
func TestCLIConfigInitDataDType(t *testing.T) {
	f := fixtures.Load(t).Get(t, "classes")
	x := f.Stream(t, "forward").Args[0].Tensor
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	if _, stderr, code := cli(t, dir, nil, "config", "init", "-m", f.ModelPath(), "-o", cfg, "--input", "x=seq:"+f.Path(x.File)); code != 0 {
		t.Fatalf("config init: exit %d: %s", code, stderr)
	}
	body, _ := os.ReadFile(cfg)
	if want := "dtype: " + x.DType; x.DType != "uint8" || !strings.Contains(string(body), want) {
		t.Fatalf("config lacks %q (data dtype %s):\n%s", want, x.DType, body)
	}
	quick := strings.Replace(strings.Replace(string(body), "runs: 200", "runs: 10", 1), "threads: 0", "threads: 1", 1)
	if err := os.WriteFile(cfg, []byte(quick), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := cli(t, dir, nil, "optimize", "--quiet", "-c", cfg); code != 0 {
		t.Fatalf("optimize -c: exit %d: %s", code, stderr)
	}
}

// A model calling a custom operator loads only after the library that registers it: without
// it run says which operator is missing and how to load it; --op-library (run, optimize) and
// model.op_libraries (bench -c, a path relative to the config) load it; a missing library is a
// usage error naming it.
func TestCLIOpLibraries(t *testing.T) {
	f := fixtures.Load(t).Get(t, "custom_op")
	lib := f.Path(f.OpLibrary)
	dir := t.TempDir()
	x := f.Path(f.Stream(t, "forward").Args[0].Tensor.File)
	_, stderr, code := cli(t, dir, nil, "run", "-m", f.ModelPath(), "--input", "x=seq:"+x)
	if code == 0 || !strings.Contains(stderr, "tsfixture::scale_shift") || !strings.Contains(stderr, "--op-library") {
		t.Errorf("run without the library: exit %d, want the operator and --op-library named: %s", code, stderr)
	}
	missing := filepath.Join(dir, "libmissing.so")
	_, stderr, code = cli(t, dir, nil, "run", "-m", f.ModelPath(), "--input", "x=seq:"+x, "--op-library", missing)
	if code != exitcode.Usage || !strings.Contains(stderr, missing) || !strings.Contains(stderr, "not found") {
		t.Errorf("run with a missing library: exit %d, want %d naming %s: %s", code, exitcode.Usage, missing, stderr)
	}
	if worst := streamRun(t, f, "forward", "--op-library", lib); worst > streamTolerance {
		t.Errorf("run --op-library: max abs diff %.3g from PyTorch", worst)
	}
	if err := os.Symlink(lib, filepath.Join(dir, "libops.so")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "c.yaml")
	body := fmt.Sprintf("model:\n  path: %s\n  op_libraries: [libops.so]\n  inputs:\n    - {name: x, data: \"seq:%s\"}\n", f.ModelPath(), x)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := cli(t, t.TempDir(), nil, "bench", "-c", cfg, "--runs", "5", "--warmup", "1", "--threads", "1", "--runtime", "default"); code != 0 {
		t.Errorf("bench -c with model.op_libraries: exit %d: %s", code, stderr)
	}
	out := t.TempDir()
	if _, stderr, code := cli(t, dir, nil, "optimize", "--quiet", "-m", f.ModelPath(), "--input-shape", "2x6", "--op-library", lib,
		"--threads", "1", "--runs", "10", "-o", out); code != 0 {
		t.Errorf("optimize --op-library: exit %d: %s", code, stderr)
	}
}
