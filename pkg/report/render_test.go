package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/schemacheck"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
)

func f(v float64) *float64 { return &v }
func i(v int) *int         { return &v }
func s(v string) *string   { return &v }

func sample() *Report {
	cfg := config.Default()
	cfg.Model.Path = "m.pt"
	return &Report{
		Config:     &cfg,
		Torchspeed: "test", Libtorch: "1.13.0", Started: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), WallMs: 1500,
		Outcome: OutcomePassed,
		Model:   ModelInfo{Path: "m.pt", SHA256: "abcdef0123456789abcdef", Bytes: 10, Inputs: []InputSpec{{Name: "x", DType: "float32", Shape: []int64{1, 3, 8, 8}}}, Nodes: 40},
		Stages: []Stage{
			{Name: "original", Status: StatusBaseline, Precision: "fp32", Measurement: s("stages"), Threads: i(2), P50Ms: f(2), P95Ms: f(3), BaselineP50Ms: f(2), Speedup: f(1), SpeedupLo: f(1), SpeedupHi: f(1), Nodes: i(40)},
			{Name: "freeze", Status: StatusKept, Precision: "fp32", Reason: "1.50x faster", Measurement: s("stages"), Threads: i(2), P50Ms: f(1.3333), P95Ms: f(1.9), BaselineP50Ms: f(2),
				Speedup: f(1.5), SpeedupLo: f(1.4), SpeedupHi: f(1.6), MaxAbsErr: f(2e-6), Cosine: f(1), Nodes: i(20), NodeDelta: map[string]int{"prim::GetAttr": -20}},
			{Name: "freeze + optimize_for_inference", Status: StatusFailed, Precision: "fp32", Reason: "boom"},
		},
		Decisions:  []string{"threads: 2 (measured 1: p50 3 ms; 2: p50 2 ms)"},
		Validation: &Validation{Checked: "freeze", CheckedPrecision: "fp32", Samples: 16, Data: "calib.npy", Passed: false, Metrics: Metrics{Cosine: f(0.97)}, Failures: []string{"cosine 0.97 < 0.99"}},
		Bench: &Bench{Runs: 100, Threads: 2, Precision: "fp32", Optimized: "freeze", OriginalP50: 2, OptimizedP50: 1.3, OptimizedP95: 1.8, Speedup: 2 / 1.3,
			SpeedupLo: 1.5, SpeedupHi: 1.6, UTestP: 0.001, Significant: true, Verdict: "optimized is faster: 1.54x"},
		Artifact: s("out/m.torchspeed.pt"),
		Memory: &Memory{PeakRSSBytes: new(int64(221065216)), Original: bench.ModelSize{FileBytes: 170282, TensorBytes: 153912},
			Artifact: &bench.ModelSize{FileBytes: 158789, TensorBytes: 153128}},
		Warnings: []string{"noisy"},
		Settings: Settings{Threads: 2, Env: []EnvVar{{Name: "GOMP_SPINCOUNT", Value: "3000"}}},
	}
}

func TestRenderings(t *testing.T) {
	r := sample()
	var md, tbl, js bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Summary", "- Deploy `out/m.torchspeed.pt`: freeze, FP32, 2 intra-op threads.",
		"Speed: 1.54x the original at p50 (95% CI 1.50 to 1.60)",
		"| freeze | kept | fp32 | 2 | 1.33 | 1.90 | 2.00 | 1.50x [1.40, 1.60] | 2e-06 / 1.00000 | stages | 20 | prim::GetAttr -20 |",
		"- **freeze**: 1.50x faster",
		"- **freeze + optimize_for_inference**: boom",
		"**FAIL**", "- failed: cosine 0.97 < 0.99", "Speedup: optimized is faster: 1.54x; throughput",
		"| environment GOMP_SPINCOUNT | 3000 |",
		"Artifact: `out/m.torchspeed.pt`", "- noisy",
		"Memory: the original 170.3 kB file, 153.9 kB of tensors; the artifact 158.8 kB file, 153.1 kB of tensors; optimize's peak resident memory 221.1 MB.", "**ofi**", "**U test**", "**roofline**", "superseded",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if !strings.Contains(tbl.String(), "Memory: the original 170.3 kB file") {
		t.Errorf("table lacks the memory line:\n%s", tbl.String())
	}
	if !strings.Contains(tbl.String(), "validation of freeze (fp32, 16 samples: calib.npy): FAIL") {
		t.Errorf("table:\n%s", tbl.String())
	}
	if err := schemacheck.Check("report.schema.json", js.Bytes()); err != nil {
		t.Error(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back["artifact"] != "out/m.torchspeed.pt" || len(back["stages"].([]any)) != 3 || back["schema_version"] != float64(SchemaVersion) {
		t.Errorf("json: %v", back)
	}
	if b := back["bench"].(map[string]any); b["interruptions"] != nil {
		t.Errorf("interruptions not measured: %v, want null", b["interruptions"])
	}
	// Not measured is null, not 0 or -1.
	failed := back["stages"].([]any)[2].(map[string]any)
	for _, k := range []string{"p50_ms", "speedup", "threads", "cosine"} {
		if v, ok := failed[k]; !ok || v != nil {
			t.Errorf("failed stage %s = %v (present %v), want null", k, v, ok)
		}
	}
}

// With the machine's interruptions measured, the final benchmark states the p95/p50 they
// alone give fixed work as long as the optimized p50, beside the model's own.
func TestRenderMachineFloor(t *testing.T) {
	r := sample()
	tr := cpu.GapTrace{CPU: 0, Elapsed: 2 * time.Second, Threshold: 2 * time.Microsecond, Reads: 1e8}
	for at := time.Duration(0); at < 2*time.Second; at += 10 * time.Millisecond {
		tr.Gaps = append(tr.Gaps, cpu.Gap{At: at, Len: 400 * time.Microsecond}) // 4%, one call in 7 hit
		tr.Count, tr.Lost, tr.Longest = tr.Count+1, tr.Lost+400*time.Microsecond, 400*time.Microsecond
	}
	in, err := cpu.SummarizeGaps([]cpu.GapTrace{tr})
	if err != nil {
		t.Fatal(err)
	}
	p50 := time.Duration(r.Bench.OptimizedP50 * 1e6)
	fl, ok := in.Floor(p50, 1)
	if !ok || fl < 1.25 || fl > 1.35 {
		t.Fatalf("floor at %v: %.3f, %v; want 1.31 (one call in 7 waits 0.4 ms)", p50, fl, ok)
	}
	in.Floors = append(in.Floors, cpu.TailFloor{Length: p50, Threads: 1, P95P50: fl})
	r.Bench.Interruptions = in
	var md, js bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("fixed work as long as the optimized p50 on 1 thread gets p95/p50 %.2f from the machine's interruptions alone (the optimized model: 1.38). Its CPUs were interrupted 100 times a second, 4.0%% of their time lost", fl)
	if !strings.Contains(md.String(), want) {
		t.Errorf("markdown lacks %q:\n%s", want, md.String())
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := schemacheck.Check("report.schema.json", js.Bytes()); err != nil {
		t.Error(err)
	}
	if strings.Contains(md.String(), "interrupted more while") {
		t.Error("a floor below the model's tail was called busier")
	}
	// A floor above the model's own tail comes from a busier stretch, and says so.
	r.Bench.OptimizedP95 = 1.4
	md.Reset()
	if err := r.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "(the optimized model: 1.08)") ||
		!strings.Contains(md.String(), "The machine was interrupted more while this was measured than during the runs.") {
		t.Errorf("floor above the tail not explained (%v):\n%s", err, md.String())
	}
	r.Bench.Interruptions.Floors = nil // measured, but no floor at this length: no sentence
	md.Reset()
	if err := r.WriteMarkdown(&md); err != nil || strings.Contains(md.String(), "machine's own tail") {
		t.Errorf("a floor without one at the p50 was stated (%v)", err)
	}
}

// A verdict never contradicts its interval or its test.
func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		sp, lo, hi, p float64
		want          string
		sig           bool
	}{
		{1.10, 0.68, 1.75, 0.015, "no clear difference: the interval includes 1", false},
		{1.10, 1.02, 1.20, 0.30, "no clear difference (", false},
		{2.00, 1.80, 2.20, 0.001, "optimized is faster: 2.00x", true},
		{0.50, 0.45, 0.55, 0.001, "optimized is slower: it takes 2.00x the time", true},
	} {
		got, sig := Verdict(c.sp, c.lo, c.hi, c.p)
		if !strings.HasPrefix(got, c.want) || sig != c.sig {
			t.Errorf("Verdict(%v, [%v, %v], p=%v) = %q, %v; want %q..., %v", c.sp, c.lo, c.hi, c.p, got, sig, c.want, c.sig)
		}
	}
}

// NaN and infinite figures do not lose the report: they are written as null and listed.
func TestNonFiniteFigures(t *testing.T) {
	r := sample()
	r.Validation.Metrics.MaxAbsError = f(math.Inf(1))
	r.Validation.Metrics.Cosine = f(math.NaN())
	r.Stages[1].MaxAbsErr = f(math.Inf(1))
	var js, md bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatalf("WriteJSON: %v", err)
	}
	if err := schemacheck.Check("report.schema.json", js.Bytes()); err != nil {
		t.Error(err)
	}
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	var back struct {
		NonFinite  []string `json:"non_finite"`
		Validation struct {
			Metrics map[string]any `json:"metrics"`
		} `json:"validation"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	want := []string{"stages[1].max_abs_error", "validation.metrics.cosine", "validation.metrics.max_abs_error"}
	if strings.Join(back.NonFinite, ",") != strings.Join(want, ",") {
		t.Errorf("non_finite = %q, want %q", back.NonFinite, want)
	}
	if v, ok := back.Validation.Metrics["max_abs_error"]; !ok || v != nil {
		t.Errorf("max_abs_error = %v, want null", v)
	}
	if !strings.Contains(md.String(), "NaN or infinite figures") {
		t.Errorf("markdown does not say which figures were non-finite:\n%s", md.String())
	}
}

// The fallback's attempts say why a layer stayed FP32, in markdown and in JSON the schema takes.
func TestFallbackAttempts(t *testing.T) {
	r := sample()
	r.Quantize = &Quantize{Mode: "static", Engine: "onednn", FP32Layers: []string{"conv1"}, QuantizedOpCount: 3, Kept: true,
		Attempts: []FallbackAttempt{
			{Cosine: f(0.97), Failures: []string{"min_cosine: 0.97 below the limit 0.98 by 0.01"}},
			{FP32Layers: []string{"conv1"}, Cosine: f(0.986), Passed: true, P50Ms: f(1.25)},
		}}
	r.Validation.Layers = []Layer{{Layer: "conv1", Type: "Conv2d", Cosine: f(0.986), Top1Agreement: f(1)}}
	var md, js bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"### INT8 fallback",
		"| none | 0.970000 | fail: min_cosine: 0.97 below the limit 0.98 by 0.01 | - |",
		"| conv1 | 0.986000 | pass | 1.250 |",
		"| conv1 | Conv2d | 0.986000 | 1.0000 |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := schemacheck.Check("report.schema.json", js.Bytes()); err != nil {
		t.Error(err)
	}
	if !strings.Contains(js.String(), `"attempts": [`) || !strings.Contains(js.String(), `"failures": []`) {
		t.Errorf("json lacks the attempts (a passing one with failures as []):\n%s", js.String())
	}
}

// Top-1 agreement says over how many samples it was taken and how many ties were left out, in
// markdown, the table and JSON the schema takes.
func TestTop1CountsRendered(t *testing.T) {
	r := sample()
	r.Validation.Metrics = Metrics{Cosine: f(0.978), Top1Agreement: f(0.625), Top1Counted: i(16), Top1Tied: i(0)}
	var md, tbl, js bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| top1_agreement | 0.6250 |", "| top1_counted | 16 |", "| top1_tied | 0 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if !strings.Contains(tbl.String(), "top1_agreement=0.6250 top1_counted=16 top1_tied=0") {
		t.Errorf("table:\n%s", tbl.String())
	}
	if err := schemacheck.Check("report.schema.json", js.Bytes()); err != nil {
		t.Error(err)
	}
	if !strings.Contains(js.String(), `"top1_counted": 16`) || !strings.Contains(js.String(), `"top1_tied": 0`) {
		t.Errorf("json lacks the counts:\n%s", js.String())
	}
	// Without a class-score output the counts are absent, not 0.
	r.Validation.Metrics, r.Summary = Metrics{Cosine: f(0.978)}, nil
	js.Reset()
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), "top1_counted") {
		t.Error("top1_counted written without a class-score output")
	}
}

// Stage rows timed at another thread count than the final benchmark's are named, in the
// terminal table and in the Markdown, so a row's p50 is not read against the final line's.
func TestThreadsNote(t *testing.T) {
	r := sample()
	r.Bench.Threads = 1
	var md, tbl bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{"markdown": md.String(), "table": tbl.String()} {
		if !strings.Contains(out, "rows at 2 thread(s) were timed before the thread count was chosen; the final benchmark ran at 1 thread") {
			t.Errorf("%s has no note on the stage rows' thread count:\n%s", what, out)
		}
	}
	r = sample()
	if n := r.threadsNote(); n != "" {
		t.Errorf("note %q with every row at the final count", n)
	}
}

// An already-INT8 input deployed as it came is not called calibrated.
func TestDeployPrecisionOfINT8Input(t *testing.T) {
	r := sample()
	r.Model.Precision, r.Bench.Precision = "int8-static", "int8-static"
	if got := r.deployPrecision("int8-static"); got != "INT8 (static, as the input model was quantized)" {
		t.Errorf("got %q", got)
	}
	r.Model.Precision = "fp32"
	if got := r.deployPrecision("int8-static"); got != "INT8 (static, calibrated)" {
		t.Errorf("got %q", got)
	}
}
