package main

import (
	"github.com/torchspeed/torchspeed/internal/exitcode"

	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/runenv"
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
	var rep bench.Report
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
	var rep bench.Report
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
	out, _, err = runBench(t, "-m", model, "--input-shape", "1x1x8x8", "--sweep-batch", "1,4", "--sweep-threads", "1",
		"--sweep-streams", "1,2", "--runs", "10", "--warmup", "1", "--json", "--plot", dir)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
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
		{"missing model", []string{"-m", filepath.Join(dir, "nope.pt"), "--input-shape", "1"}, true, []string{"nope.pt", "no such file"}},
		{"zero duration", append(base, "--duration", "0s"), true, []string{"--duration 0s: must be positive"}},
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
	var rep bench.Report
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
	var rep bench.Report
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

// scrubbedEnv is this process's environment without the variables that change how
// libtorch's threads run or carry torchspeed's settings (runenv.ScrubEnv).
func scrubbedEnv() []string { return runenv.ScrubEnv(os.Environ()) }

// runBenchCLI runs the built CLI's bench with a scrubbed environment and
// returns stdout, stderr and the exit code.
func runBenchCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(torchspeedBin(t), append([]string{"bench"}, args...)...)
	cmd.Env = scrubbedEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestCLIBenchRuntimeSettings checks that bench applies torchspeed's runtime
// settings (in the process that measures, after its re-exec) and records
// them, and that --runtime default leaves the environment alone.
func TestCLIBenchRuntimeSettings(t *testing.T) {
	model := digits(t)
	base := []string{"-m", model, "--input-shape", "1x1x8x8", "--runs", "10", "--warmup", "1", "--json"}
	for _, c := range []struct {
		name    string
		args    []string
		applied bool
	}{
		{"torchspeed", nil, true},
		{"torchspeed one thread", []string{"--threads", "1", "--mode", "latency"}, true},
		{"default", []string{"--runtime", "default"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, code := runBenchCLI(t, append(base, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			var rep bench.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("stdout is not the JSON report: %v\n%s", err, out)
			}
			s, env := rep.Settings, rep.Environment
			if s["threads"] != strconv.Itoa(env.Threads) {
				t.Errorf("settings threads %q, environment threads %d", s["threads"], env.Threads)
			}
			if !c.applied {
				if s["runtime"] != runtimeDefault || len(env.OpenMPEnv) != 0 || s["env OMP_NUM_THREADS"] != "" {
					t.Errorf("default runtime changed something: settings %v, OpenMP env %v", s, env.OpenMPEnv)
				}
				return
			}
			if s["runtime"] != runtimeTorchspeed || s["cpus"] == "" || s["openmp"] == "" || s["mode"] == "" || s["allocator"] == "" {
				t.Errorf("settings lack the runtime: %v", s)
			}
			if !strings.HasPrefix(s["applied 1"], "affinity ") {
				t.Errorf("applied actions: %v", s)
			}
			// The measuring process has the variables it reports: they were
			// set before its OpenMP runtime started, by the re-exec.
			// OMP_NUM_THREADS sizes the pool; the count in use may be lower when bench
			// measured fewer threads faster.
			threads, _ := strconv.Atoi(s["threads"])
			if want := s["env OMP_NUM_THREADS"]; want == "" || env.OpenMPEnv["OMP_NUM_THREADS"] != want || threads < 1 || strconv.Itoa(max(threads, atoiOr(want))) != want {
				t.Errorf("OMP_NUM_THREADS: settings %q, process %q, threads %q", want, env.OpenMPEnv["OMP_NUM_THREADS"], s["threads"])
			}
			for k, v := range s {
				if name, ok := strings.CutPrefix(k, "env "); ok && (strings.HasPrefix(name, "OMP_") || strings.HasPrefix(name, "GOMP_")) && env.OpenMPEnv[name] != v {
					t.Errorf("%s: settings %q, process %q", name, v, env.OpenMPEnv[name])
				}
			}
			if c.args != nil && s["threads"] != "1" {
				t.Errorf("--threads 1 gave %s threads", s["threads"])
			}
		})
	}
}

// Bad runtime choices fail before anything is loaded, with exit code 2.
func TestCLIBenchRuntimeBadInput(t *testing.T) {
	model := digits(t)
	base := []string{"-m", model, "--input-shape", "1x1x8x8", "--runs", "3"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown runtime", []string{"--runtime", "fast"}, `--runtime "fast"`},
		{"unknown mode", []string{"--mode", "fastest"}, `bench: --mode (runtime.mode): fastest is not allowed`},
		{"missing NUMA node", []string{"--numa-node", "63"}, "63"},
		{"bad NUMA node", []string{"--numa-node", "-2"}, "bench: --numa-node (runtime.numa_node): -2 is not allowed"},
		{"unknown allocator", []string{"--allocator", "hoard"}, "hoard"},
		{"settings with default runtime", []string{"--runtime", "default", "--allocator", "jemalloc"}, "--allocator"},
		{"serve two models", []string{"--serve", "--vs", model}, "--serve"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runBenchCLI(t, append(base, c.args...)...)
			if code != exitcode.Usage || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d (want %d), stderr lacks %q:\n%s", code, exitcode.Usage, c.want, stderr)
			}
		})
	}
}

// startBenchServers starts `torchspeed bench --serve` processes that take turns, one per
// argument list, each with its environment.
func startBenchServers(tb testing.TB, envs [][]string, args ...[]string) *benchrun.Servers {
	tb.Helper()
	var specs []benchrun.ServerSpec
	for i, a := range args {
		specs = append(specs, benchrun.ServerSpec{Name: fmt.Sprintf("server %d", i), Argv: append([]string{torchspeedBin(tb), "bench", "--serve"}, a...), Env: envs[i]})
	}
	s, err := benchrun.StartServers(context.Background(), specs, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestCLIBenchServe(t *testing.T) {
	s := startBenchServers(t, [][]string{scrubbedEnv()}, []string{"-m", digits(t), "--input-shape", "1x1x8x8", "--warmup", "2", "--threads", "1"})
	ctx := context.Background()
	if st := s.Ready[0]; st["runtime"] != runtimeTorchspeed || st["threads"] != "1" || st["input-shape"] != "1x1x8x8" {
		t.Errorf("ready settings %v", st)
	}
	for _, k := range []int{5, 1} {
		lat, err := s.Turn(ctx, 0, 0, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(lat) != k {
			t.Errorf("run %d gave %d latencies", k, len(lat))
		}
		for _, d := range lat {
			if d <= 0 || d > time.Minute {
				t.Errorf("latency %v", d)
			}
		}
	}
	for _, bad := range []string{"run 0", "run x", "go"} {
		line, err := s.Ask(ctx, 0, bad)
		if err != nil || !strings.HasPrefix(line, "error ") || !strings.Contains(line, "run K") {
			t.Errorf("%q answered %q, %v", bad, line, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("quit: %v", err)
	}
}

var (
	rsRounds = flag.Int("rounds", 20, "BenchmarkRuntimeSettings/BenchmarkBenchVsCpp: interleaved rounds")
	rsRuns   = flag.Int("round-runs", 10, "BenchmarkRuntimeSettings/BenchmarkBenchVsCpp: timed inferences per side per round")
	// Each side idles while the other runs its round; the first inferences after that pay for
	// waking the core and refilling caches, which a process serving steadily does not. Both
	// sides drop the same number.
	rsRoundWarmup = flag.Int("round-warmup", 5, "BenchmarkRuntimeSettings: untimed inferences at the start of each side's round")
	rsThreads     = flag.Int("rs-threads", 0, "BenchmarkRuntimeSettings: --threads for both sides (0: each side's own default)")
	rsArgs        = flag.String("rs-args", "", "BenchmarkRuntimeSettings: space-separated extra bench flags for the torchspeed side (e.g. --allocator jemalloc)")
	rsSamples     = flag.String("rs-samples", "", "BenchmarkRuntimeSettings: write each side's latencies (ns, in the order taken) as JSON to this file")
	rsDefaultEnv  = flag.String("rs-default-env", "", "BenchmarkRuntimeSettings: space-separated NAME=VALUE added to the default side's environment (to compare a setting against torchspeed's)")
	rsModels      = flag.String("rs-models", "", "BenchmarkRuntimeSettings: comma-separated artifacts (their manifest gives the inputs) instead of the resnet18 and transformer fixtures")
	rsEnv         = flag.String("rs-env", "", "BenchmarkRuntimeSettings: space-separated NAME=VALUE added to the torchspeed side's environment (to try a setting)")
)

// BenchmarkRuntimeSettings compares libtorch's defaults with torchspeed's
// runtime settings (issue 5): two long-lived `bench --serve` processes, one
// with --runtime default and no OpenMP/MKL/OpenBLAS variables, one applying
// torchspeed's settings, take turns in rounds (the order alternating), and
// each side's latencies are pooled. OpenMP reads its variables at process
// start, so interleaving processes is the only way to compare them in one run.
// The side not measuring is stopped (SIGSTOP), so neither is timed next to the
// other's spinning workers. Each round also times a fixed loop as long as
// torchspeed's median (the machine floor): the spread the machine adds to any
// work of that length.
//
//	go test -run XXX -bench RuntimeSettings -benchtime 1x ./cmd/torchspeed/ -rounds 30 -round-runs 20
//
// -rs-threads, -rs-env, -rs-args and -rs-default-env try other settings on one
// side; -rs-samples writes every latency for a closer look.
func BenchmarkRuntimeSettings(b *testing.B) {
	type model struct{ name, path, shape string }
	var models []model
	if *rsModels != "" {
		// Artifacts carry their input spec in the manifest.
		for _, p := range strings.Split(*rsModels, ",") {
			models = append(models, model{filepath.Base(p), p, ""})
		}
	} else {
		m := fixtures.Load(b)
		for _, c := range []struct{ fixture, shape string }{
			{"resnet18", "1x3x224x224"},
			{"transformer_traced", "1x16x128"},
		} {
			models = append(models, model{c.fixture, m.Get(b, c.fixture).ModelPath(), c.shape})
		}
	}
	for _, c := range models {
		b.Run(c.name, func(b *testing.B) {
			args := []string{"-m", c.path, "--warmup", "20"}
			if c.shape != "" {
				args = append(args, "--input-shape", c.shape)
			}
			if *rsThreads > 0 {
				args = append(args, "--threads", strconv.Itoa(*rsThreads))
			}
			ctx := context.Background()
			// Both start stopped, and each runs only in its turn: their idle workers would
			// otherwise spin on the CPUs of the side measuring (libgomp and OpenBLAS spin for
			// a while after each call), and each would be timed as if sharing the machine
			// with the other.
			srv := startBenchServers(b,
				[][]string{append(scrubbedEnv(), strings.Fields(*rsDefaultEnv)...), append(scrubbedEnv(), strings.Fields(*rsEnv)...)},
				append(slices.Clone(args), "--runtime", runtimeDefault),
				append(append(slices.Clone(args), "--runtime", runtimeTorchspeed), strings.Fields(*rsArgs)...))
			names := []string{"default", "torchspeed"}
			for i := range names {
				b.Logf("%s: %s", names[i], describeSettings(srv.Ready[i]))
			}
			// The machine's own spread: a fixed loop as long as torchspeed's median, on as
			// many threads, timed in the same rounds while both servers are paused. Its
			// length is set from torchspeed's first rounds (floorAfter), when the machine has
			// settled; it joins the rotation from then on.
			var floor *floorLoop
			floorAfter := min(3, *rsRounds-1)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			// No collection in this process while it times the floor loop.
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			var floorLat []time.Duration
			samples := make([][]time.Duration, 2)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for r := 0; r < *rsRounds; r++ {
					// Three turns per round, each taking each place in turn: the floor loop
					// (side 2), default, torchspeed.
					for j := range 3 {
						side := (j + r) % 3
						if side == 2 {
							if r < floorAfter {
								continue
							}
							if floor == nil {
								ts, err := bench.Summarize(samples[1])
								if err != nil {
									b.Fatal(err)
								}
								floor = newFloorLoop(b, max(1, atoiOr(srv.Ready[1]["threads"])), ts.P50)
							}
							for k := 0; k < *rsRoundWarmup+*rsRuns; k++ {
								if d := floor.run(); k >= *rsRoundWarmup {
									floorLat = append(floorLat, d)
								}
							}
							continue
						}
						lat, err := srv.Turn(ctx, side, *rsRoundWarmup, *rsRuns)
						if err != nil {
							b.Fatalf("%s: %v", names[side], err)
						}
						samples[side] = append(samples[side], lat...)
					}
				}
			}
			b.StopTimer()
			if *rsSamples != "" {
				raw, err := json.Marshal(map[string][]time.Duration{names[0]: samples[0], names[1]: samples[1], "floor": floorLat})
				if err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(*rsSamples, raw, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			var st [2]bench.Summary
			for i := range names {
				var err error
				if st[i], err = bench.Summarize(samples[i]); err != nil {
					b.Fatal(err)
				}
				tail := float64(st[i].P95) / float64(st[i].P50)
				b.ReportMetric(float64(st[i].P50)/1e6, names[i]+"-p50-ms")
				b.ReportMetric(float64(st[i].P95)/1e6, names[i]+"-p95-ms")
				b.ReportMetric(tail, names[i]+"-p95/p50")
			}
			cmp, err := bench.ComparePair(&bench.Result{Name: names[0], Samples: samples[0]},
				&bench.Result{Name: names[1], Samples: samples[1]}, bench.DefaultResamples, 1)
			if err != nil {
				b.Fatal(err)
			}
			ratio, lo, hi := cmp.Ratio, cmp.RatioLo, cmp.RatioHi
			b.ReportMetric(ratio, "torchspeed/default-p50")
			b.ReportMetric(float64(st[1].P95)/float64(st[0].P95), "torchspeed/default-p95")
			b.ReportMetric(float64(st[1].P99)/float64(st[0].P99), "torchspeed/default-p99")
			tail := float64(st[1].P95) / float64(st[1].P50)
			fs, err := bench.Summarize(floorLat)
			if err != nil {
				b.Fatal(err)
			}
			floorTail := float64(fs.P95) / float64(fs.P50)
			b.ReportMetric(floorTail, "floor-p95/p50")
			// "No worse": the ratio's 95% interval reaches 1 or lies below it.
			b.Logf("%d samples per side; torchspeed p95/p50 %.2f (issue 5 wants <= 1.3), p50 ratio %.3f [95%% CI %.3f, %.3f] (wants no worse than 1): %s",
				len(samples[1]), tail, ratio, lo, hi, map[bool]string{true: "holds", false: "does NOT hold"}[tail <= 1.3 && lo <= 1])
			b.Logf("U test: %s", cmp.Verdict)
			b.Logf("machine floor: a fixed loop on %d thread(s), p50 %v, p95/p50 %.2f in the same rounds (no library, allocation or hand-off: the spread this machine adds by itself)",
				floor.threads, fs.P50, floorTail)
		})
	}
}

// floorLoop is fixed arithmetic over a 160 KiB buffer per thread (L2-resident, like a
// small model's weights), split over threads that meet at the end as an OpenMP region's do:
// the calling goroutine takes the first share, locked worker goroutines the others. Its
// latency spread is what the machine adds by itself.
type floorLoop struct {
	threads int
	passes  int
	bufs    [][]float32
	start   []chan struct{}
	done    chan struct{}
}

var floorSink float32

func newFloorLoop(tb testing.TB, threads int, target time.Duration) *floorLoop {
	f := &floorLoop{threads: threads, passes: 1, done: make(chan struct{})}
	for range threads {
		buf := make([]float32, 40<<10)
		for i := range buf {
			buf[i] = float32(i) * 1e-6
		}
		f.bufs = append(f.bufs, buf)
	}
	for _, buf := range f.bufs[1:] {
		start := make(chan struct{})
		f.start = append(f.start, start)
		go func() {
			runtime.LockOSThread()
			for range start {
				f.work(buf)
				f.done <- struct{}{}
			}
		}()
	}
	tb.Cleanup(func() {
		for _, c := range f.start {
			close(c)
		}
	})
	for range 50 { // out of idle, as the rounds around it are
		f.run()
	}
	for range 3 { // converge on the target length
		var lat []time.Duration
		for range 21 {
			lat = append(lat, f.run())
		}
		slices.Sort(lat)
		f.passes = max(1, int(float64(f.passes)*float64(target)/float64(max(lat[10], time.Microsecond))+0.5))
	}
	return f
}

func (f *floorLoop) work(buf []float32) {
	var s float32
	for range f.passes {
		for i, v := range buf {
			s += v * 1.0001
			buf[i] = v*0.99999 + 1e-7
		}
	}
	if s == 42 { // keeps the work; never true in practice
		floorSink = s
	}
}

func (f *floorLoop) run() time.Duration {
	t0 := time.Now()
	for _, c := range f.start {
		c <- struct{}{}
	}
	f.work(f.bufs[0])
	for range f.start {
		<-f.done
	}
	return time.Since(t0)
}

// describeSettings picks the settings that tell the two sides apart.
func describeSettings(s map[string]string) string {
	var parts []string
	for _, k := range []string{"runtime", "threads", "interop_threads", "cpus", "mode", "allocator"} {
		if v, ok := s[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	var env []string
	for k, v := range s {
		if name, ok := strings.CutPrefix(k, "env "); ok && !strings.HasPrefix(name, "TORCHSPEED_") {
			env = append(env, name+"="+v)
		}
	}
	slices.Sort(env)
	return strings.Join(append(parts, env...), " ")
}

// BenchmarkBenchVsCpp checks bench's timing loop against a plain C++ loop
// (issue 6): resnet18 at 2 threads, in interleaved rounds on the same
// inference thread, bench.Run over the target `torchspeed bench` times
// against Module.TimeForward; -rounds x -round-runs runs per side (200 with
// 10 x 20).
//
//	go test -run XXX -bench BenchVsCpp -benchtime 1x ./cmd/torchspeed/ -rounds 10 -round-runs 20
//
// Both loops run in this process, so under its OpenMP settings: prefix the
// command with `torchspeed launch --` to measure under torchspeed's.
func BenchmarkBenchVsCpp(b *testing.B) {
	model := fixtures.Load(b).Get(b, "resnet18").ModelPath()
	l, err := benchrun.LoadModel(benchrun.ModelSpec{Path: model, Name: "resnet18.pt"}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Model.Close()
	if err := torch.SetNumThreads(2); err != nil {
		b.Fatal(err)
	}
	inputs, err := benchrun.MakeInputs([]benchrun.InputSpec{{Shape: []int64{1, 3, 224, 224}, DType: torch.Float32}}, 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer benchrun.CloseTensors(inputs)
	target := l.Target(inputs)
	warm := bench.Options{Runs: 1, Warmup: 20}
	torch.Do(func() { _, err = bench.Run(target, warm) })
	if err != nil {
		b.Fatal(err)
	}
	var goLat, cLat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := 0; r < *rsRounds; r++ {
			benchFirst := r%2 == 0
			for j := range 2 {
				if (j == 0) == benchFirst {
					var res *bench.Result
					torch.Do(func() { res, err = bench.Run(target, bench.Options{Runs: *rsRuns}) })
					if err != nil {
						b.Fatal(err)
					}
					goLat = append(goLat, res.Samples...)
					continue
				}
				// One extra run, dropped, as bench.Run's untimed first one.
				ns, err := l.Model.Module().TimeForward(*rsRuns+1, inputs...)
				if err != nil {
					b.Fatal(err)
				}
				for _, v := range ns[1:] {
					cLat = append(cLat, time.Duration(v))
				}
			}
		}
	}
	b.StopTimer()
	gs, err := bench.Summarize(goLat)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := bench.Summarize(cLat)
	if err != nil {
		b.Fatal(err)
	}
	ratio := float64(gs.P50) / float64(cs.P50)
	b.ReportMetric(float64(gs.P50)/1e6, "bench-p50-ms")
	b.ReportMetric(float64(cs.P50)/1e6, "cpp-p50-ms")
	b.ReportMetric(ratio, "bench/cpp-p50")
	b.Logf("OpenMP/MKL environment of this process (run it under `torchspeed launch --` for torchspeed's): %v", bench.CaptureEnvironment().OpenMPEnv)
	b.Logf("%d runs per side at %d threads: bench p50 %v [%v, %v], C++ p50 %v [%v, %v], ratio %.3f (issue 6 wants within 5%%)",
		len(goLat), torch.NumThreads(), gs.P50, gs.MedianLo, gs.MedianHi, cs.P50, cs.MedianLo, cs.MedianHi, ratio)
}

func atoiOr(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
