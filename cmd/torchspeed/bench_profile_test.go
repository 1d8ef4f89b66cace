package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
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

// frozenDigitsArtifact saves the frozen digits fixture as an artifact naming digits.pt as its
// original, in a folder that also holds a copy of that original.
func frozenDigitsArtifact(t *testing.T) string {
	t.Helper()
	src := digits(t)
	m, err := torch.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Eval(); err != nil {
		t.Fatal(err)
	}
	frozen, err := m.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	sum, err := bench.HashFile(src)
	if err != nil {
		t.Fatal(err)
	}
	man := &torchspeed.Manifest{
		Format: version.ManifestFormat, Torchspeed: "test", Libtorch: torch.Version(), Precision: "fp32",
		Inputs:     []torchspeed.InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}},
		Runtime:    torchspeed.Runtime{Threads: 1},
		SourceName: "digits.pt", SourceSHA256: sum,
	}
	raw, err := man.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	art := filepath.Join(dir, "digits.torchspeed.pt")
	if err := frozen.Save(art, map[string][]byte{torchspeed.ManifestFile: raw}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "digits.pt"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return art
}

// TestBenchProfile profiles an artifact alone: its original (found beside it) is profiled
// too, side by side; each profile's op counts are its graph's, and the CSV files hold the
// results and every op.
func TestBenchProfile(t *testing.T) {
	art := frozenDigitsArtifact(t)
	csvPath := filepath.Join(t.TempDir(), "res.csv")
	out, stderr, err := runBench(t, "-m", art, "--profile", "--runs", "20", "--json", "--csv", csvPath)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rep bench.RunReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out)
	}
	if len(rep.Profiles) != 2 || rep.Profiles[0].Model != "digits.pt" || rep.Profiles[1].Model != "digits.torchspeed.pt" {
		t.Fatalf("profiles %v: want the original beside the artifact, then the artifact", rep.Profiles)
	}
	// The graphs as bench runs them: the original as saved, the artifact as torchspeed.Load
	// gives it.
	loaded, err := torchspeed.Load(art, torchspeed.LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	graph, err := loaded.Module().NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	got := rep.Profiles[1].KindCounts()
	for kind, n := range graph {
		if !strings.HasPrefix(kind, "prim::") && got[kind] != n {
			t.Errorf("artifact %s: profiled %d calls, graph %d nodes (profile %v)", kind, got[kind], n, got)
		}
	}
	if len(got) == 0 || got["aten::batch_norm"] != 0 {
		t.Errorf("artifact's kinds %v: want the frozen graph's, batch norm folded", got)
	}
	// The traced original runs its convolutions and batch norms unfolded.
	orig := rep.Profiles[0].KindCounts()
	if orig["aten::_convolution"] != 2 || orig["aten::batch_norm"] != 2 || orig["aten::linear"] != 2 {
		t.Errorf("original's kinds %v: want 2 convolutions, 2 batch norms, 2 linears", orig)
	}
	for _, p := range rep.Profiles {
		if p.Runs != 20 || p.Total <= 0 || len(p.Nodes) == 0 {
			t.Errorf("%s: %d runs, total %v, %d nodes", p.Model, p.Runs, p.Total, len(p.Nodes))
		}
	}
	m := rep.Memory
	st, err := os.Stat(art)
	if err != nil {
		t.Fatal(err)
	}
	if m == nil || m.PeakRSSBytes == nil || *m.PeakRSSBytes <= 0 || m.Models["digits.torchspeed.pt"].FileBytes != st.Size() || m.Models["digits.torchspeed.pt"].TensorBytes <= 0 {
		t.Errorf("memory %+v: want the peak RSS and the artifact's size (%d bytes)", m, st.Size())
	}
	rows := readCSV(t, csvPath)
	if strings.Join(rows[0], ",") != strings.Join(bench.CSVColumns, ",") || len(rows) != 2 || rows[1][0] != "digits.torchspeed.pt" || rows[1][1] != "20" {
		t.Errorf("results CSV %v", rows)
	}
	ops := readCSV(t, filepath.Join(filepath.Dir(csvPath), "res_ops.csv"))
	if want := 1 + len(rep.Profiles[0].Nodes) + len(rep.Profiles[1].Nodes); len(ops) != want || strings.Join(ops[0], ",") != strings.Join(bench.OpCSVColumns, ",") {
		t.Errorf("ops CSV: %d rows, want %d with the header %v", len(ops), want, bench.OpCSVColumns)
	}
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows
}

// TestBenchTimeLimit: --time runs for a time instead of a count, as benchmark_app's -t.
func TestBenchTimeLimit(t *testing.T) {
	start := time.Now()
	out, stderr, err := runBench(t, "-m", digits(t), "--input-shape", "1x1x8x8", "--threads", "1", "--time", "500ms", "--interrupts", "0", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rep bench.RunReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Results) != 1 {
		t.Fatalf("JSON: %v\n%s", err, out)
	}
	r := rep.Results[0]
	if rep.Settings["duration"] != "500ms" || r.Elapsed < 500*time.Millisecond || r.Stats.N < 2 || time.Since(start) < 500*time.Millisecond {
		t.Errorf("settings %v, %d runs in %v: want runs for 500ms", rep.Settings, r.Stats.N, r.Elapsed)
	}
}

func TestBenchProfileBadFlags(t *testing.T) {
	model := digits(t)
	for name, args := range map[string][]string{
		"profile with streams":  {"--profile", "--streams", "2"},
		"json and csv stdout":   {"--json", "--csv", "-"},
		"time and runs":         {"--time", "1s", "--runs", "5"},
		"csv to a folder":       {"--csv", os.TempDir()},
		"profile to csv stdout": {"--profile", "--csv", "-"},
	} {
		t.Run(name, func(t *testing.T) {
			_, stderr, code := runBenchCLI(t, append([]string{"-m", model, "--input-shape", "1x1x8x8"}, args...)...)
			if code != exitcode.Usage || !strings.Contains(stderr, "bench: --") {
				t.Errorf("exit %d, want %d with the flag named:\n%s", code, exitcode.Usage, stderr)
			}
		})
	}
}

// TestOptimizeTimeAndRuns: a count and a time for the final benchmark is bad input, refused
// before any model work.
func TestOptimizeTimeAndRuns(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	_, stderr, code := cli(t, "", nil, "optimize", "-m", digits(t), "--input-shape", "1x1x8x8", "--runs", "5", "--time", "1s", "-o", out)
	if code != exitcode.Usage || !strings.Contains(stderr, "bench.duration (--duration)") {
		t.Errorf("exit %d, want %d naming both flags:\n%s", code, exitcode.Usage, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written: want nothing", out)
	}
}

// TestBenchProfileTypedStream profiles a model called with typed values over a stream of real
// speech (Silero VAD v4: forward(x, sr) with sr an int, the LSTM state carried between calls):
// every profiled run is one call, and the profile holds the ops of the 16 kHz branch, its LSTM
// and its convolutions.
func TestBenchProfileTypedStream(t *testing.T) {
	f := fixtures.Load(t).Get(t, "silero_v4")
	out, stderr, err := runBench(t, "-m", f.Path(f.File), "--input", "x=seq:"+f.Path("silero_v4_in_x.npy"),
		"--input", "sr=int:16000", "--profile", "--runs", "30", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rep bench.RunReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out)
	}
	if len(rep.Profiles) != 1 || rep.Profiles[0].Runs != 30 || len(rep.Profiles[0].Nodes) == 0 {
		t.Fatalf("profiles %+v: want one of 30 calls", rep.Profiles)
	}
	kinds := rep.Profiles[0].KindCounts()
	if kinds["aten::lstm"] != 1 || kinds["aten::conv1d"] == 0 {
		t.Errorf("kinds %v: want the 16 kHz branch's one LSTM call and its convolutions", kinds)
	}
}
