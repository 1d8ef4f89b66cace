package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func sample() *Report {
	return &Report{
		Torchspeed: "test", Libtorch: "1.13.0", Started: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), WallMs: 1500,
		Model: ModelInfo{Path: "m.pt", SHA256: "abcdef0123456789abcdef", Bytes: 10, Inputs: []string{"x float32[1 3 8 8]"}, Nodes: 40},
		Stages: []Stage{
			{Name: "original", Status: "baseline", P50Ms: 2, P95Ms: 3, Speedup: 1, SpeedupLo: 1, SpeedupHi: 1, Measured: true, Nodes: 40},
			{Name: "freeze", Status: "kept", Reason: "1.50x faster", P50Ms: 1.3333, P95Ms: 1.9, Speedup: 1.5, SpeedupLo: 1.4, SpeedupHi: 1.6, Measured: true,
				MaxAbsErr: 2e-6, Cosine: 1, Nodes: 20, NodeDelta: map[string]int{"prim::GetAttr": -20}},
			{Name: "freeze + optimize_for_inference", Status: "failed", Reason: "boom"},
		},
		Decisions:  []string{"threads: 2 (measured 1: p50 3 ms; 2: p50 2 ms)"},
		Validation: &Validation{Samples: 16, Data: "calib.npy", Passed: false, Metrics: map[string]float64{"cosine": 0.97}, Failures: []string{"cosine 0.97 < 0.99"}},
		Bench:      &Bench{Runs: 100, Threads: 2, OriginalP50: 2, OptimizedP50: 1.3, OptimizedP95: 1.8, Speedup: 1.54, SpeedupLo: 1.5, SpeedupHi: 1.6, Verdict: "optimized is 54% faster"},
		Artifact:   "out/m.torchspeed.pt",
		Warnings:   []string{"noisy"},
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
		"| freeze | kept | 1.33 | 1.90 | 1.50x [1.40, 1.60] | 2e-06 / 1.00000 | 20 | prim::GetAttr -20 |",
		"- **freeze**: 1.50x faster",
		"- **freeze + optimize_for_inference**: boom",
		"**FAIL**", "- failed: cosine 0.97 < 0.99", "Speedup 1.54x (95% CI 1.50 to 1.60)",
		"Artifact: `out/m.torchspeed.pt`", "- noisy",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	lines := strings.Split(tbl.String(), "\n")
	if !strings.HasPrefix(lines[0], "stage") || !strings.Contains(tbl.String(), "validation (16 samples): FAIL") {
		t.Errorf("table:\n%s", tbl.String())
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back["artifact"] != "out/m.torchspeed.pt" || len(back["stages"].([]any)) != 3 {
		t.Errorf("json: %v", back)
	}
}
