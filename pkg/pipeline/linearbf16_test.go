package pipeline

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// With optimize.linear_bf16 on, the traced transformer gets a "freeze + fast_linear +
// linear_bf16" row, validated against the original as a lower precision and kept; the artifact
// lists the freeze, fast_linear and linear_bf16 load passes with precision bf16, the report's
// validation checks it as bf16 and passes, report.md shows the row, and torchspeed.Load answers
// within BF16's error of the saved FP32 module. With the default (auto) and quantize.mode none,
// no BF16 variant is built.
func TestLinearBF16Variant(t *testing.T) {
	f := fixtures.Load(t).Get(t, "transformer_traced")
	out := t.TempDir()
	cfg := testConfig(t, f, out)
	cfg.Optimize.OptimizeForInference = config.Off
	cfg.Optimize.FastLinear = config.On
	cfg.Optimize.LinearBF16 = config.On
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	const name = "freeze + fast_linear + linear_bf16"
	s := mustStage(t, rep, name)
	if s.Status != report.StatusKept || !strings.Contains(s.Reason, "8 linear layers in BF16") || !strings.Contains(s.Reason, "validated against the original") {
		t.Errorf("row %s, %q: want kept (linear_bf16 is on) with 8 linears, validated", s.Status, s.Reason)
	}
	if !slices.ContainsFunc(rep.Decisions, func(d string) bool { return strings.HasPrefix(d, name+": optimize.linear_bf16 is on") }) {
		t.Errorf("no decision line for %s: %q", name, rep.Decisions)
	}
	if v := rep.Validation; v == nil || !v.Passed || v.CheckedPrecision != "bf16" {
		t.Errorf("validation %+v: want passed, checked as bf16", v)
	}
	if rep.Roofline != nil {
		t.Errorf("roofline %s: a BF16 model has no measured peak to be held against", rep.Roofline.Summary())
	}
	md, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(md), name) {
		t.Errorf("report.md has no %q row", name)
	}
	man, err := torchspeed.ParseManifest(mustExtra(t, *rep.Artifact))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(man.LoadPasses, []string{torchspeed.PassFreeze, torchspeed.PassFastLinear, torchspeed.PassLinearBF16}) || man.Precision != "bf16" {
		t.Fatalf("manifest: load passes %q, precision %q: want [freeze fast_linear linear_bf16], bf16", man.LoadPasses, man.Precision)
	}
	raw, m := loadBoth(t, *rep.Artifact, "")
	nodes, _ := m.Module().NodeCounts()
	if nodes["torchspeed::transformer_encoder_layer"] != 2 {
		t.Errorf("loaded artifact: node counts %v: want both encoder layers fused", nodes)
	}
	w, g := firstOutputs(t, f, raw, m)
	var dot, ww, gg, maxAbs float64
	for i := range w {
		dot += float64(w[i]) * float64(g[i])
		ww += float64(w[i]) * float64(w[i])
		gg += float64(g[i]) * float64(g[i])
		maxAbs = math.Max(maxAbs, math.Abs(float64(g[i]-w[i])))
	}
	if cos := dot / math.Sqrt(ww*gg); !(cos >= 0.9999) || maxAbs > 0.05 || maxAbs == 0 {
		t.Errorf("loaded artifact vs the saved FP32 module: cosine %.6f, max abs diff %.3g: want >= 0.9999, in (0, 0.05]", cos, maxAbs)
	}

	// auto with quantize.mode none: FP32 only.
	cfg = testConfig(t, f, t.TempDir())
	cfg.Optimize.FastLinear = config.On
	noVariant(t, cfg, "linear_bf16")
}
