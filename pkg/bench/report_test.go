package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/internal/schemacheck"
	"github.com/torchspeed/torchspeed/pkg/cpu"
)

func sampleReport(t *testing.T) *RunReport {
	t.Helper()
	clk := &SimClock{}
	c, err := Compare([]Target{
		NewSyntheticTarget("resnet18.pt", clk, noisyModel, 1),
		NewSyntheticTarget("resnet18 int8.pt", clk, shifted(noisyModel, 0.6), 2),
	}, CompareOptions{Options: Options{Runs: 60, Warmup: 3, Clock: clk}, Resamples: 200})
	if err != nil {
		t.Fatal(err)
	}
	c.Results[0].Load = 210 * time.Millisecond
	var calls []Point
	sw, err := Sweep(SweepConfig{Batches: []int{1, 2}, Threads: []int{1}, Streams: []int{1, 2}, AvailableCPUs: 2}, fakeRun(&calls))
	if err != nil {
		t.Fatal(err)
	}
	env := CaptureEnvironment()
	env.CPUModel = "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
	env.ISA = []string{"AVX2", "AVX512F", "AVX512VNNI"}
	env.Threads = 2
	env.LibtorchVersion = "1.13.1"
	env.QuantizedEngine = "onednn"
	env.OpenMPEnv = map[string]string{"OMP_WAIT_POLICY": "PASSIVE"}
	env.ModelHashes = map[string]string{"resnet18.pt": "ab12"}
	return &RunReport{
		Environment: env,
		Settings:    map[string]string{"input-shape": "1x3x224x224", "dtype": "float32"},
		Comparison:  c,
		Sweep:       sw,
	}
}

func TestWriteTable(t *testing.T) {
	r := sampleReport(t)
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"p50 [95% CI]", "resnet18.pt", "resnet18 int8.pt", "210ms", // load column
		"60 interleaved rounds", "ratio of medians", "resnet18 int8.pt is ", "% faster than resnet18.pt",
		"pareto", "recommended: lowest latency", "recommended: highest throughput",
		"warning: resnet18.pt: only 60 runs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	r := sampleReport(t)
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back RunReport
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Comparison == nil || len(back.Comparison.Results[1].Samples) != 60 ||
		back.Comparison.Pairs[0].Verdict != r.Comparison.Pairs[0].Verdict ||
		back.Environment.LibtorchVersion != "1.13.1" || len(back.Sweep.Rows) != 4 {
		t.Errorf("round trip lost data: %+v", back)
	}
	for _, key := range []string{`"p50_ns"`, `"median_ci_lo_ns"`, `"u_test"`, `"environment"`, `"pareto"`} {
		if !strings.Contains(b.String(), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

// benchLine is the result-line grammar of golang.org/design/14313:
// name, iterations, then value-unit pairs.
var benchLine = regexp.MustCompile(`^Benchmark[^a-z\s]\S*-\d+\t\d+(\t[-0-9.e+]+ \S+)+$`)

func TestWriteBenchfmt(t *testing.T) {
	r := sampleReport(t)
	var b bytes.Buffer
	if err := r.WriteBenchfmt(&b); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	config := map[string]string{}
	results := map[string]int{}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "Benchmark"):
			if !benchLine.MatchString(line) {
				t.Errorf("malformed result line %q", line)
			}
			results[strings.Fields(line)[0]]++
		default:
			k, v, ok := strings.Cut(line, ": ")
			if !ok || k == "" || !unicode.IsLower(rune(k[0])) || strings.ContainsFunc(k, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsUpper(r) }) {
				t.Errorf("malformed config line %q", line)
			}
			config[k] = v
		}
	}
	for k, want := range map[string]string{
		"goos": r.Environment.GOOS, "cpu": r.Environment.CPUModel, "libtorch": "1.13.1",
		"env-omp_wait_policy": "PASSIVE", "sha256-resnet18.pt": "ab12", "input-shape": "1x3x224x224",
	} {
		if config[k] != want {
			t.Errorf("config %s = %q, want %q", k, config[k], want)
		}
	}
	// Spaces in a model name would end the benchmark name.
	if results["BenchmarkInference/model=resnet18.pt-2"] != 60 || results["BenchmarkInference/model=resnet18_int8.pt-2"] != 60 {
		t.Errorf("want one line per sample, 60 each; got %v", results)
	}
	if results["BenchmarkThroughput/model=batch_1_threads_1_streams_2/batch=1/streams=2-1"] != 1 {
		t.Errorf("sweep lines missing: %v", results)
	}
}

// TestBenchstatReadsOutput runs the real benchstat when it is installed
// (go install golang.org/x/perf/cmd/benchstat@latest); the format test above
// does not depend on it.
func TestBenchstatReadsOutput(t *testing.T) {
	bs, err := exec.LookPath("benchstat")
	if err != nil {
		for _, p := range []string{filepath.Join(os.Getenv("HOME"), "go/bin/benchstat"), "/tmp/gobin/benchstat"} {
			if _, e := os.Stat(p); e == nil {
				bs, err = p, nil
			}
		}
	}
	if err != nil {
		t.Skip("benchstat not installed")
	}
	r := sampleReport(t)
	r.Sweep = nil
	path := filepath.Join(t.TempDir(), "a.txt")
	if err := WriteFileAtomic(path, r.WriteBenchfmt); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bs, "-col", "/model", path).CombinedOutput()
	if err != nil {
		t.Fatalf("benchstat: %v\n%s", err, out)
	}
	s := string(out)
	t.Logf("benchstat -col /model:\n%s", s)
	if !strings.Contains(s, "resnet18_int8.pt") || !strings.Contains(s, "sec/op") || strings.Contains(s, "need >=") {
		t.Errorf("benchstat did not compare the two models:\n%s", s)
	}
	if !strings.Contains(s, "-40") { // the int8 model is 40% faster
		t.Errorf("benchstat should report about -40%%:\n%s", s)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A failing writer leaves the old file and no temp file behind.
	err := WriteFileAtomic(path, func(w io.Writer) error {
		io.WriteString(w, "half")
		return errors.New("encoder broke")
	})
	if err == nil || !strings.Contains(err.Error(), "encoder broke") {
		t.Errorf("err = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("file = %q after a failed write, want the old content", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temp files left behind: %v", ents)
	}
	if err := WriteFileAtomic(path, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("file = %q, want new", b)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != safefile.FileMode() {
		t.Errorf("mode %v, want %v (0666 less the umask, as every file torchspeed writes)", st.Mode().Perm(), safefile.FileMode())
	}
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "x.json"), func(io.Writer) error { return nil }); err == nil ||
		!strings.Contains(err.Error(), "folder exists and is writable") {
		t.Errorf("missing folder: err = %v", err)
	}
}

func TestCheckWritableDir(t *testing.T) {
	dir := t.TempDir()
	if err := CheckWritableDir(filepath.Join(dir, "new", "sub")); err != nil {
		t.Errorf("creatable folder: %v", err)
	}
	file := filepath.Join(dir, "afile")
	os.WriteFile(file, nil, 0o644)
	if err := CheckWritableDir(filepath.Join(file, "sub")); err == nil || !strings.Contains(err.Error(), "choose a writable folder") {
		t.Errorf("folder under a file: err = %v", err)
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(dir, "ro")
		os.Mkdir(ro, 0o555)
		if err := CheckWritableDir(ro); err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Errorf("read-only folder: err = %v", err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0ns", 999: "999ns", 1500: "1.50µs", 12345: "12.3µs", 845000: "845µs",
		12340000: "12.3ms", 1200000000: "1.20s", 123 * time.Second: "123s",
		9999600: "10.0ms", 999700: "1.00ms", -1500: "-1.50µs",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%d) = %q, want %q", d, got, want)
		}
	}
}

func TestBenchName(t *testing.T) {
	for in, want := range map[string]string{"a b/c=d.pt": "a_b_c_d.pt", "": "_", "resnet18": "resnet18"} {
		if got := BenchName(in); got != want {
			t.Errorf("BenchName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("OMP_NUM_THREADS", "2")
	t.Setenv("GOMP_SPINCOUNT", "0")
	t.Setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
	e := CaptureEnvironment()
	if e.OpenMPEnv["OMP_NUM_THREADS"] != "2" || e.OpenMPEnv["GOMP_SPINCOUNT"] != "0" {
		t.Errorf("OpenMPEnv = %v", e.OpenMPEnv)
	}
	if e.Allocator != "jemalloc" {
		t.Errorf("Allocator = %q, want jemalloc from LD_PRELOAD", e.Allocator)
	}
	if e.GOMAXPROCS < 1 || e.LogicalCPUs < 1 || e.GoVersion == "" || e.Date.IsZero() || e.TorchspeedVersion == "" {
		t.Errorf("incomplete: %+v", e)
	}
	if len(e.CPUsUsed) == 0 || len(e.CPUsUsed) > e.LogicalCPUs {
		t.Errorf("CPUsUsed = %v with %d CPUs", e.CPUsUsed, e.LogicalCPUs)
	}
	for in, want := range map[string]string{"": "glibc", "libtcmalloc_minimal.so.4": "tcmalloc", "/x/libfoo.so:/y/libmimalloc.so": "mimalloc"} {
		if got := allocatorFromPreload(in); got != want {
			t.Errorf("allocatorFromPreload(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHashFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.pt")
	os.WriteFile(p, []byte("abc"), 0o644)
	h, err := HashFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// sha256("abc"), FIPS 180-2 test vector.
	if h != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("HashFile = %s", h)
	}
	if _, err := HashFile(p + ".missing"); err == nil || !strings.Contains(err.Error(), "m.pt.missing") {
		t.Errorf("missing file: err = %v", err)
	}
}

// bench.json matches docs/schema/bench.schema.json for a comparison, a single model and an
// empty report, and reads back into the same RunReport (settings included).
func TestBenchJSONSchema(t *testing.T) {
	cmp := sampleReport(t)
	cmp.Settings["env GOMP_SPINCOUNT"] = "3000"
	cmp.Settings["runs"], cmp.Settings["order"] = "30", "shuffled"
	cmp.Settings["instance 1 cpus"], cmp.Settings["instance 1 numa_node"] = "1", "0"
	cmp.Settings["applied 1"], cmp.Settings["applied 2"] = "affinity 0-1", "OMP_PROC_BIND unset"
	single := sampleReport(t)
	single.Results, single.Comparison, single.Sweep = single.Comparison.Results[:1], nil, nil
	single.Results[0].Load = 0 // not timed: null
	// A gap of 40 µs every millisecond on one CPU, measured for 2 s.
	tr := cpu.GapTrace{CPU: 0, Elapsed: 2 * time.Second, Threshold: 2 * time.Microsecond, Reads: 1e8}
	for at := time.Duration(0); at < 2*time.Second; at += time.Millisecond {
		tr.Gaps = append(tr.Gaps, cpu.Gap{At: at, Len: 40 * time.Microsecond})
		tr.Count, tr.Lost, tr.Longest = tr.Count+1, tr.Lost+40*time.Microsecond, 40*time.Microsecond
	}
	var err error
	if single.Interruptions, err = cpu.SummarizeGaps([]cpu.GapTrace{tr}); err != nil {
		t.Fatal(err)
	}
	p50 := single.Results[0].Stats.P50
	single.AddResultFloors(4)         // more threads than CPUs measured: one
	single.AddResultFloors(1)         // once per p50
	fl := single.Interruptions.Floors // 0.1, 1 and 10 ms, then the p50's
	if n := len(fl); n != 4 || fl[3].Length != p50 || fl[3].Threads != 1 {
		t.Fatalf("floors after AddResultFloors: %+v (p50 %v)", single.Interruptions.Floors, p50)
	}
	var table bytes.Buffer
	if err := single.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("from the interruptions alone for fixed work of %s on 1 thread(s)", FormatDuration(p50)); !strings.Contains(table.String(), want) ||
		!strings.Contains(table.String(), "interrupted 1000 times a second, 4.0% of their time lost") {
		t.Errorf("table lacks the machine's floor (%q):\n%s", want, table.String())
	}
	for name, r := range map[string]*RunReport{"comparison": cmp, "single": single, "empty": {Settings: map[string]string{}}} {
		var b bytes.Buffer
		if err := r.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if err := schemacheck.Check("bench.schema.json", b.Bytes()); err != nil {
			t.Errorf("%s: %v\n%.2000s", name, err, b.String())
		}
		var back RunReport
		if err := json.Unmarshal(b.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Settings, r.Settings) && len(r.Settings) > 0 {
			t.Errorf("%s: settings %v, read back %v", name, r.Settings, back.Settings)
		}
		if (back.Interruptions == nil) != (r.Interruptions == nil) || r.Interruptions != nil && len(back.Interruptions.Floors) != len(r.Interruptions.Floors) {
			t.Errorf("%s: interruptions %+v, read back %+v", name, r.Interruptions, back.Interruptions)
		}
		if len(back.LatencyResults()) != len(r.LatencyResults()) {
			t.Errorf("%s: %d models read back, want %d", name, len(back.LatencyResults()), len(r.LatencyResults()))
		}
		if strings.Contains(b.String(), `"env GOMP`) || strings.Contains(b.String(), `"N1"`) {
			t.Errorf("%s: a key with a space or a Go field name:\n%.1000s", name, b.String())
		}
	}
	var b bytes.Buffer
	single.WriteJSON(&b)
	if !strings.Contains(b.String(), `"load_ns": null`) {
		t.Errorf("not-timed load is not null:\n%.800s", b.String())
	}
	if !strings.Contains(cmpJSON(t, cmp), `"runs": 30`) {
		t.Error("runs is not a number")
	}
}

func cmpJSON(t *testing.T, r *RunReport) string {
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A verdict never contradicts its interval, in the table or in bench.json.
func TestVerdictAgreesWithInterval(t *testing.T) {
	r := sampleReport(t)
	p := &r.Comparison.Pairs[0]
	p.Significant, p.Verdict, p.RatioLo, p.RatioHi, p.UTest.P = true, "x is 9.5% faster (p=0.015)", 0.57, 1.47, 0.015
	var tbl bytes.Buffer
	if err := r.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	js := cmpJSON(t, r)
	for name, out := range map[string]string{"table": tbl.String(), "json": js} {
		if strings.Contains(out, "9.5% faster") || !strings.Contains(out, "includes 1") {
			t.Errorf("%s keeps a verdict its interval contradicts:\n%.3000s", name, out)
		}
	}
	if !strings.Contains(js, `"significant": false`) {
		t.Error("bench.json calls it significant")
	}
}
