package pipeline

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// With optimize.fast_linear on, the traced transformer gets a "freeze + fast_linear" row, timed
// in the stage rounds and kept; the artifact on disk is the frozen model with ATen's linears and
// the freeze and fast_linear load passes; torchspeed.Load swaps all eight linears (not with
// StockOps) and answers within 1e-5 of the saved module.
func TestFP32FastLinear(t *testing.T) {
	f := fixtures.Load(t).Get(t, "transformer_traced")
	cfg := testConfig(t, f, t.TempDir())
	cfg.Optimize.OptimizeForInference = config.Off
	cfg.Optimize.FastLinear = config.On
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	const name = "freeze + fast_linear"
	s := stageNamed(rep, name)
	if s == nil {
		t.Fatalf("no %q row: stages %+v", name, rep.Stages)
	}
	t.Logf("%s: %s, %s", name, s.Status, s.Reason)
	if s.Status != report.StatusKept || !strings.Contains(s.Reason, "8 linear(s) swapped") || !strings.Contains(s.Reason, "2 with a fused relu") {
		t.Errorf("row %s, %q: want kept (fast_linear is on) with 8 linears, 2 relus", s.Status, s.Reason)
	}
	if s.Measurement == nil || *s.Measurement != "stages" || s.P50Ms == nil || s.MaxAbsErr == nil || *s.MaxAbsErr > 1e-5 {
		t.Errorf("row not timed in the stage rounds or too far from the original: measurement %v, p50 %v, max abs err %v", s.Measurement, s.P50Ms, s.MaxAbsErr)
	}
	if fr := stageNamed(rep, "freeze"); fr == nil || fr.Status != report.StatusSuperseded {
		t.Errorf("freeze row %+v: want superseded", fr)
	}
	if !slices.ContainsFunc(rep.Decisions, func(d string) bool { return strings.HasPrefix(d, name+": optimize.fast_linear is on") }) {
		t.Errorf("no decision line for %s: %q", name, rep.Decisions)
	}
	man, err := torchspeed.ParseManifest(mustExtra(t, *rep.Artifact))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(man.LoadPasses, []string{torchspeed.PassFreeze, torchspeed.PassFastLinear}) || man.Precision != "fp32" {
		t.Fatalf("manifest: load passes %q, precision %q: want [freeze fast_linear], fp32", man.LoadPasses, man.Precision)
	}
	raw, m := loadBoth(t, *rep.Artifact, "")
	stock, err := torchspeed.Load(*rep.Artifact, torchspeed.LoadOptions{KeepThreads: true, StockOps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stock.Close()
	rawNodes, _ := raw.NodeCounts()
	nodes, _ := m.Module().NodeCounts()
	stockNodes, _ := stock.Module().NodeCounts()
	if rawNodes["torchspeed::linear_packed"] != 0 || nodes["torchspeed::linear_packed"] != 8 || nodes["aten::linear"] != 0 || stockNodes["torchspeed::linear_packed"] != 0 {
		t.Errorf("linear_packed calls: on disk %d, loaded %d (aten::linear %d), loaded with StockOps %d: want 0, 8 (0), 0",
			rawNodes["torchspeed::linear_packed"], nodes["torchspeed::linear_packed"], nodes["aten::linear"], stockNodes["torchspeed::linear_packed"])
	}
	w, g := firstOutputs(t, f, raw, m)
	for i := range w {
		if math.Abs(float64(g[i]-w[i])) > 1e-5 {
			t.Fatalf("output element %d: %v with fast_linear, %v without", i, g[i], w[i])
		}
	}

	// Off: no variant is built.
	cfg = testConfig(t, f, t.TempDir())
	cfg.Optimize.FastLinear = config.Off
	rep, err = Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Stages {
		if strings.HasSuffix(s.Name, "fast_linear") {
			t.Errorf("optimize.fast_linear false, yet a %q row (%s)", s.Name, s.Status)
		}
	}
}

// decideFastLinear on given p50s: auto keeps the variant of the chosen stage only when it is
// faster, true keeps it anyway, and a variant of a stage that was not chosen is rejected.
func TestDecideFastLinear(t *testing.T) {
	for _, c := range []struct {
		toggle   config.Toggle
		fast     float64
		onBest   bool
		want     state
		inReason string
	}{
		{config.Auto, 0.10, true, stKept, "2.00x faster than freeze"},
		{config.Auto, 0.25, true, stRejected, "not faster than freeze"},
		{config.Auto, 0.20, true, stRejected, "not faster than freeze"},
		{config.On, 0.25, true, stKept, "optimize.fast_linear is on"},
		{config.Auto, 0.10, false, stRejected, "freeze + optimize_for_inference was not kept"},
	} {
		cfg := config.Default()
		cfg.Optimize.FastLinear = c.toggle
		freeze := &candidate{name: "freeze", kind: kindFreeze, status: stKept}
		ofi := &candidate{name: "freeze + optimize_for_inference", kind: kindOFI, status: stRejected}
		base := freeze
		if !c.onBest {
			base = ofi
		}
		fast := &candidate{name: base.name + " + fast_linear", kind: kindFP32Fast, status: stCandidate, base: base, reason: "8 linear(s) swapped"}
		r := &run{cfg: &cfg, rep: &report.Report{}, cands: []*candidate{freeze, ofi, fast}}
		p50 := map[string]float64{"freeze": 0.20, ofi.name: 0.22, fast.name: c.fast}
		got := r.decideFastLinear(freeze, p50)
		if fast.status != c.want || !strings.Contains(fast.reason, c.inReason) {
			t.Errorf("%s, p50 %.2f vs 0.20, on the chosen stage %v: %s %q, want %s with %q", c.toggle, c.fast, c.onBest, fast.status, fast.reason, c.want, c.inReason)
		}
		if (c.want == stKept) != (got == fast) {
			t.Errorf("%s, p50 %.2f: best is %s", c.toggle, c.fast, got.name)
		}
	}
}
