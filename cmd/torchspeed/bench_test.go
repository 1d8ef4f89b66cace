package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// runBench runs `torchspeed bench args...` in this process and returns
// stdout, stderr and the error. It adds --runtime default unless args choose
// a runtime: torchspeed's settings re-execute the process, which would
// restart the test binary (tests of those settings run the built CLI).
func runBench(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--runtime") }) {
		args = append([]string{"--runtime", runtimeDefault}, args...)
	}
	c := newBenchCmd(&ui{})
	var out, errOut bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&errOut)
	c.SetArgs(args)
	err := c.Execute()
	checkWrittenReports(t)
	if err == nil {
		checkStdoutReport(t, append([]string{"bench"}, args...), out.String())
	}
	return out.String(), errOut.String(), err
}

func digits(t *testing.T) string {
	return fixtures.Load(t).Get(t, "digits").ModelPath()
}

func TestBenchSingleJSON(t *testing.T) {
	model := digits(t)
	out, _, err := runBench(t, "-m", model, "--input-shape", "1x1x8x8", "--runs", "30", "--warmup", "2", "--threads", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.RunReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, out)
	}
	if len(rep.Results) != 1 {
		t.Fatalf("%d results", len(rep.Results))
	}
	r := rep.Results[0]
	if r.Name != "digits.pt" || r.Stats.N != 30 || len(r.Samples) != 30 || r.WarmupRuns != 2 || r.Load <= 0 || r.First <= 0 {
		t.Errorf("result %+v", r)
	}
	if r.Stats.P50 <= 0 || !r.Stats.MedianCIOK {
		t.Errorf("stats %+v", r.Stats)
	}
	want, err := bench.HashFile(model)
	if err != nil {
		t.Fatal(err)
	}
	e := rep.Environment
	if e.ModelHashes["digits.pt"] != want || e.LibtorchVersion == "" || e.Threads != 1 || e.QuantizedEngine == "" {
		t.Errorf("environment %+v", e)
	}
	if rep.Settings["input-shape"] != "1x1x8x8" || rep.Settings["runs"] != "30" {
		t.Errorf("settings %v", rep.Settings)
	}
	// After the runs, the machine's interruptions on as many of the CPUs in use as the run had
	// threads (300 ms by default), with the tail they alone give fixed work as long as the
	// model's p50 on its one thread.
	in := rep.Interruptions
	if in == nil || len(in.CPUs) != 1 || in.CPUs[0].CPU != e.CPUsUsed[0] || in.Duration < 300*time.Millisecond {
		t.Fatalf("interruptions %+v on CPUs %v", in, e.CPUsUsed)
	}
	var found bool
	for _, f := range in.Floors {
		found = found || f.Length == r.Stats.P50 && f.Threads == 1 && f.P95P50 >= 1
	}
	if !found {
		t.Errorf("no floor at the p50 %v: %+v", r.Stats.P50, in.Floors)
	}
	out, _, err = runBench(t, "-m", model, "--input-shape", "1x1x8x8", "--runs", "5", "--warmup", "0", "--threads", "1", "--interrupts", "0", "--json")
	if err != nil || strings.Contains(out, `"interruptions": {`) || !strings.Contains(out, `"interruptions": null`) {
		t.Errorf("--interrupts 0: %v\n%.3000s", err, out)
	}
}

// TestBenchVsSelfWritesOutputs runs the A/A check and checks every output
// file; the verdict itself is checked statistically in pkg/bench, where the
// timing source is synthetic.
func TestBenchVsSelfWritesOutputs(t *testing.T) {
	model := digits(t)
	dir := t.TempDir()
	out, stderr, err := runBench(t, "-m", model, "--vs", model, "--input-shape", "1x1x8x8", "--runs", "40",
		"--warmup", "5", "--threads", "1", "-o", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"digits.pt#2 / digits.pt", "40 interleaved rounds", "p50 [95% CI]"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"bench.json", "bench.txt", "bench_latency.png", "bench_latency.svg"} {
		p := filepath.Join(dir, f)
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
		if !strings.Contains(stderr, "wrote "+p) {
			t.Errorf("stderr does not mention %s:\n%s", p, stderr)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "bench.txt"))
	if n := strings.Count(string(b), "BenchmarkInference/model=digits.pt#2-1\t1\t"); n != 40 {
		t.Errorf("bench.txt has %d lines for the second model, want 40", n)
	}
	var rep bench.RunReport
	b, _ = os.ReadFile(filepath.Join(dir, "bench.json"))
	if err := json.Unmarshal(b, &rep); err != nil || rep.Comparison == nil || len(rep.Comparison.Pairs) != 1 {
		t.Fatalf("bench.json: %v", err)
	}
	if v := rep.Comparison.Pairs[0].Verdict; v == "" {
		t.Error("no verdict")
	}
}

func TestBenchThroughputAndSweep(t *testing.T) {
	model := digits(t)
	out, _, err := runBench(t, "-m", model, "--input-shape", "1x1x8x8", "--streams", "2", "--threads", "1", "--runs", "20", "--warmup", "1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "throughput digits.pt: 2 streams, batch 1") || !strings.Contains(out, "all\t") && !strings.Contains(out, "all ") {
		t.Errorf("throughput table:\n%s", out)
	}
	dir := t.TempDir()
	out, log, err := runBench(t, "-m", model, "--input-shape", "1x1x8x8", "--sweep-batch", "1,4", "--sweep-threads", "1",
		"--sweep-streams", "1,2", "--runs", "10", "--warmup", "1", "--json", "--plot", dir)
	if err != nil {
		t.Fatal(err)
	}
	// Each batch size runs on a module whose first call had that shape (oneDNN's INT8
	// convolution keeps its first call's primitive); streams at the same batch share one.
	if n := strings.Count(log, "bench: sweep: a fresh copy of digits.pt for batch 4, 1 thread(s)"); n != 1 || strings.Count(log, "a fresh copy") != 1 {
		t.Errorf("want one fresh copy, for batch 4; log:\n%s", log)
	}
	var rep bench.RunReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Sweep == nil {
		t.Fatalf("sweep JSON: %v", err)
	}
	if len(rep.Sweep.Rows) != 4 || rep.Sweep.Recommendation.BestLatency == nil || rep.Sweep.Recommendation.BestThroughput == nil {
		t.Errorf("sweep %+v", rep.Sweep)
	}
	for _, row := range rep.Sweep.Rows {
		if row.Result.Inferences != 10*row.Point.Streams || row.Result.Batch != row.Point.Batch {
			t.Errorf("%s: %d inferences, batch %d", row.Point, row.Result.Inferences, row.Result.Batch)
		}
	}
	for _, f := range []string{"bench_sweep.png", "bench_sweep.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestBenchBadInput(t *testing.T) {
	model := digits(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	os.WriteFile(file, nil, 0o644)
	tooMany := strconv.Itoa(runtime.NumCPU() + 1)
	base := []string{"-m", model, "--input-shape", "1x1x8x8"}
	for _, c := range []struct {
		name  string
		args  []string
		usage bool // exit code 2
		want  []string
	}{
		{"no model", []string{"--input-shape", "1x1x8x8"}, true, []string{"--model is required"}},
		{"no inputs", []string{"-m", model}, true, []string{"--input-shape"}},
		{"missing model", []string{"-m", filepath.Join(dir, "nope.pt"), "--input-shape", "1"}, true, []string{"nope.pt", "file not found"}},
		{"zero duration", append(base, "--duration", "0s"), true, []string{"--duration 0s: must be positive"}},
		{"short interrupts", append(base, "--interrupts", "1ms"), true, []string{"--interrupts 1ms: want 0 (skip) or 10ms to 1m"}},
		{"zero runs", append(base, "--runs", "0"), true, []string{"--runs (bench.runs): 0 is not allowed"}},
		{"runs and duration", append(base, "--runs", "5", "--duration", "1s"), true, []string{"choose one"}},
		{"bad shape", []string{"-m", model, "--input-shape", "1xax8"}, true, []string{`--input-shape "1xax8"`}},
		{"bad dtype", append(base, "--dtype", "complex"), true, []string{`--dtype "complex"`}},
		{"dtype without random inputs", append(base, "--dtype", "int8"), true, []string{"bench: input [1 1 8 8]: random inputs of dtype int8 are not supported"}},
		{"bad order", append(base, "--vs", model, "--order", "random"), true, []string{"--order"}},
		{"unwritable output", append(base, "-o", filepath.Join(file, "out")), true, []string{"output folder", "a-file/out", "writable folder"}},
		{"sweep over cores", append(base, "--sweep-threads", tooMany), true, []string{"--sweep-threads: " + tooMany + " is not allowed"}},
		{"sweep points over cores", append(base, "--sweep-threads", "1", "--sweep-streams", tooMany), true, []string{"more CPUs than the", "streams=" + tooMany}},
		{"streams over cores", append(base, "--streams", tooMany, "--threads", "1"), true, []string{"need " + tooMany + " CPUs"}},
		{"sweep two models", append(base, "--vs", model, "--sweep-batch", "1"), true, []string{"one model"}},
		{"first inference fails", []string{"-m", model, "--input-shape", "1x3x5", "--runs", "5"}, false,
			[]string{`first inference of "digits.pt" failed`, "forward"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runBench(t, c.args...)
			if err == nil {
				t.Fatal("bench succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if got := exitcode.Of(err) == exitcode.Usage; got != c.usage {
				t.Errorf("usage error = %v, want %v (%v)", got, c.usage, err)
			}
		})
	}
}

func TestBenchConfig(t *testing.T) {
	model := digits(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "c.yaml")
	yaml := "model:\n  path: " + model + "\n  inputs:\n    - {name: x, shape: [1, 1, 8, 8], dtype: float32}\n" +
		"runtime:\n  threads: 1\nbench:\n  runs: 12\n  warmup: 3\n  seed: 9\noutput:\n  dir: " + filepath.Join(dir, "out") + "\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	// --runs on the command line beats bench.runs in the file.
	out, _, err := runBench(t, "-c", cfgPath, "--runs", "15", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.RunReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Results) != 1 {
		t.Fatalf("JSON: %v", err)
	}
	r := rep.Results[0]
	if r.Stats.N != 15 || r.WarmupRuns != 3 || rep.Settings["seed"] != "9" || rep.Settings["input-shape"] != "1x1x8x8" || rep.Environment.Threads != 1 {
		t.Errorf("config not applied: n=%d warmup=%d settings=%v threads=%d", r.Stats.N, r.WarmupRuns, rep.Settings, rep.Environment.Threads)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "bench.json")); err != nil {
		t.Errorf("output.dir not used: %v", err)
	}
	_, _, err = runBench(t, "-c", filepath.Join(dir, "missing.yaml"))
	if err == nil || exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing config: %v", err)
	}
}

// TestBenchArtifact benches an artifact whose manifest gives the inputs,
// the thread count and channels-last inputs, without --input-shape.
func TestBenchArtifact(t *testing.T) {
	m, err := torch.Load(digits(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	man := &torchspeed.Manifest{
		Format: version.ManifestFormat, Torchspeed: "test", Libtorch: torch.Version(), Precision: "fp32",
		Inputs:       []torchspeed.InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}},
		ChannelsLast: true, Runtime: torchspeed.Runtime{Threads: 1},
	}
	raw, err := man.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(t.TempDir(), "digits.torchspeed.pt")
	if err := m.Save(art, map[string][]byte{torchspeed.ManifestFile: raw}); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runBench(t, "-m", art, "--runs", "20", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "1 threads, as the artifact digits.torchspeed.pt was tuned for") {
		t.Errorf("stderr does not say where the thread count came from:\n%s", stderr)
	}
	var rep bench.RunReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Results) != 1 {
		t.Fatalf("JSON: %v", err)
	}
	if rep.Settings["input-shape"] != "1x1x8x8" || rep.Results[0].Stats.N != 20 || rep.Environment.Threads != 1 {
		t.Errorf("settings %v, n=%d, threads=%d", rep.Settings, rep.Results[0].Stats.N, rep.Environment.Threads)
	}
	if b, err := torch.BLAS(); err == nil && b.Library != "" && !strings.HasPrefix(rep.Environment.BLAS, b.Config) {
		t.Errorf("environment BLAS %q, want it to start with %q", rep.Environment.BLAS, b.Config)
	}
}

func TestBenchSpecs(t *testing.T) {
	b := &benchCmd{models: []string{"a/m.pt", "b/m.pt"}, vs: []string{"a/m.pt", "x.pt"}}
	var got []string
	for _, s := range b.specs() {
		got = append(got, s.Name)
	}
	want := []string{"a/m.pt", "b/m.pt", "a/m.pt#2", "x.pt"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("names %v, want %v", got, want)
	}
}
