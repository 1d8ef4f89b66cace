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
// against the kept stage (the quick search's "fast variants" measurement) and kept; the artifact on disk is the frozen model with ATen's linears and
// the freeze and fast_linear load passes; torchspeed.Load fuses both traced encoder layers into
// torchspeed's layer op with its eight linears (not with StockOps) and answers within 1e-5 of the
// saved module.
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
	s := mustStage(t, rep, name)
	if s.Status != report.StatusKept || !strings.Contains(s.Reason, "8 linear layers swapped") || !strings.Contains(s.Reason, "2 with a fused relu") {
		t.Errorf("row %s, %q: want kept (fast_linear is on) with 8 linears, 2 relus", s.Status, s.Reason)
	}
	// The quick search (the default) times the kept stage's variants in a measurement of their own.
	if s.Measurement == nil || *s.Measurement != "fast variants" || s.P50Ms == nil || s.MaxAbsErr == nil || *s.MaxAbsErr > 1e-5 {
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
	const layer = "torchspeed::transformer_encoder_layer"
	if rawNodes[layer] != 0 || nodes[layer] != 2 || nodes["aten::linear"]+nodes["torchspeed::linear_packed"] != 0 || stockNodes[layer]+stockNodes["torchspeed::linear_packed"] != 0 {
		t.Errorf("encoder layer calls: on disk %d, loaded %d (linears left %d), loaded with StockOps %d: want 0, 2 (0), 0",
			rawNodes[layer], nodes[layer], nodes["aten::linear"]+nodes["torchspeed::linear_packed"], stockNodes[layer])
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
	noVariant(t, cfg, "fast_linear")
}

// noVariant runs optimize with cfg and fails if the stage table has a row of the pass.
func noVariant(t *testing.T, cfg *config.Config, pass string) {
	t.Helper()
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Stages {
		if strings.HasSuffix(s.Name, pass) {
			t.Errorf("optimize.%s false, yet a %q row (%s)", pass, s.Name, s.Status)
		}
	}
}

// decideFastChain on given p50s, fast_linear alone: auto keeps the variant of the chosen stage only when it is
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
		{config.Auto, 0.10, false, stRejected, "built on freeze + optimize_for_inference, which was not kept"},
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
		got := r.decideFastChain(freeze, p50)
		if fast.status != c.want || !strings.Contains(fast.reason, c.inReason) {
			t.Errorf("%s, p50 %.2f vs 0.20, on the chosen stage %v: %s %q, want %s with %q", c.toggle, c.fast, c.onBest, fast.status, fast.reason, c.want, c.inReason)
		}
		if (c.want == stKept) != (got == fast) {
			t.Errorf("%s, p50 %.2f: best is %s", c.toggle, c.fast, got.name)
		}
	}
}

// With optimize.fast_linear and optimize.fast_conv on, the digits CNN gets "freeze + fast_conv"
// and "freeze + fast_linear + fast_conv" rows, timed against the kept stage; the second is kept (built
// on the kept fast_linear variant), the first rejected (its base was not kept). The artifact is
// the frozen model with ATen's ops and the freeze, fast_linear and fast_conv load passes;
// torchspeed.Load swaps both convolutions (not with StockOps) and answers within 5e-5 of the saved
// module (logits up to ~20; freeze + fast_linear alone is 1e-5 from the original). With fast_conv
// off no such row is built.
func TestFP32FastConv(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	cfg := testConfig(t, f, t.TempDir())
	cfg.Quantize.Mode = "none"
	cfg.Optimize.OptimizeForInference = config.Off
	cfg.Optimize.ChannelsLast = config.Off // one chain: freeze, then the fast variants
	cfg.Optimize.FastLinear = config.On
	cfg.Optimize.FastConv = config.On
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	const name = "freeze + fast_linear + fast_conv"
	s := mustStage(t, rep, name)
	if s.Status != report.StatusKept || !strings.Contains(s.Reason, "2 convolutions swapped") || !strings.Contains(s.Reason, "2 with a fused relu") {
		t.Errorf("row %s, %q: want kept (fast_conv is on) with 2 convolutions, 2 relus", s.Status, s.Reason)
	}
	if s.Measurement == nil || *s.Measurement != "fast variants" || s.P50Ms == nil || s.MaxAbsErr == nil || *s.MaxAbsErr > 5e-5 {
		t.Errorf("row not timed in the stage rounds or too far from the original: measurement %v, p50 %v, max abs err %v", deref(s.Measurement), deref(s.P50Ms), deref(s.MaxAbsErr))
	}
	if fc := stageNamed(rep, "freeze + fast_conv"); fc == nil || fc.Status != report.StatusRejected || !strings.Contains(fc.Reason, "the config sets optimize.fast_linear on, which this variant lacks") {
		t.Errorf("freeze + fast_conv row %+v: want rejected, without fast_linear, which is on", fc)
	}
	if fl := stageNamed(rep, "freeze + fast_linear"); fl == nil || fl.Status != report.StatusSuperseded {
		t.Errorf("freeze + fast_linear row %+v: want superseded", fl)
	}
	if !slices.ContainsFunc(rep.Decisions, func(d string) bool { return strings.HasPrefix(d, name+": optimize.fast_conv is on") }) {
		t.Errorf("no decision line for %s: %q", name, rep.Decisions)
	}
	man, err := torchspeed.ParseManifest(mustExtra(t, *rep.Artifact))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{torchspeed.PassFreeze, torchspeed.PassFastLinear, torchspeed.PassFastConv}; !slices.Equal(man.LoadPasses, want) || man.Precision != "fp32" {
		t.Fatalf("manifest: load passes %q, precision %q: want %q, fp32", man.LoadPasses, man.Precision, want)
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
	// conv2 + relu + max-pool is one torchspeed::conv2d_pool.
	const op, pool = "torchspeed::conv2d_gemm", "torchspeed::conv2d_pool"
	if rawNodes[op]+rawNodes[pool] != 0 || nodes[op] != 1 || nodes[pool] != 1 || nodes["aten::_convolution"] != 0 || nodes["torchspeed::linear_packed"] != 2 || stockNodes[op]+stockNodes[pool] != 0 {
		t.Errorf("conv2d_gemm + conv2d_pool calls: on disk %d, loaded %d + %d (aten::_convolution %d, linear_packed %d), loaded with StockOps %d: want 0, 1 + 1 (0, 2), 0",
			rawNodes[op]+rawNodes[pool], nodes[op], nodes[pool], nodes["aten::_convolution"], nodes["torchspeed::linear_packed"], stockNodes[op]+stockNodes[pool])
	}
	w, g := firstOutputs(t, f, raw, m)
	for i := range w {
		if math.Abs(float64(g[i]-w[i])) > 5e-5 {
			t.Fatalf("output element %d: %v with fast_conv, %v without", i, g[i], w[i])
		}
	}

	cfg = testConfig(t, f, t.TempDir())
	cfg.Quantize.Mode = "none"
	cfg.Optimize.OptimizeForInference = config.Off
	cfg.Optimize.FastConv = config.Off
	noVariant(t, cfg, "fast_conv")
}

// decideFastChain on given p50s with fast_conv variants: the fastest chain of variants is kept
// (one set on must be in it), whether or not its first step was faster alone, and the variants of
// candidates not kept are rejected.
func TestDecideFastConv(t *testing.T) {
	for _, c := range []struct {
		toggle       config.Toggle
		lin, conv    float64 // p50 of freeze + fast_linear and of freeze + fast_linear + fast_conv
		wantLinConv  state
		wantBest     string
		wantFreezeFC state
	}{
		{config.Auto, 0.10, 0.08, stKept, "freeze + fast_linear + fast_conv", stRejected},
		{config.Auto, 0.10, 0.11, stRejected, "freeze + fast_linear", stRejected},
		{config.On, 0.10, 0.11, stKept, "freeze + fast_linear + fast_conv", stRejected},
		// fast_linear alone slower than freeze, but the fastest with fast_conv: kept together.
		{config.Auto, 0.30, 0.08, stKept, "freeze + fast_linear + fast_conv", stRejected},
		{config.Auto, 0.30, 0.17, stRejected, "freeze + fast_conv", stKept},
	} {
		cfg := config.Default()
		cfg.Optimize.FastConv = c.toggle
		freeze := &candidate{name: "freeze", kind: kindFreeze, status: stKept}
		lin := &candidate{name: "freeze + fast_linear", kind: kindFP32Fast, status: stCandidate, base: freeze, reason: "2 linear(s) swapped"}
		fc := &candidate{name: "freeze + fast_conv", kind: kindFP32Conv, status: stCandidate, base: freeze, reason: "2 convolution(s) swapped"}
		lfc := &candidate{name: "freeze + fast_linear + fast_conv", kind: kindFP32Conv, status: stCandidate, base: lin, reason: "2 convolution(s) swapped"}
		r := &run{cfg: &cfg, rep: &report.Report{}, cands: []*candidate{freeze, lin, fc, lfc}}
		p50 := map[string]float64{"freeze": 0.20, lin.name: c.lin, fc.name: 0.15, lfc.name: c.conv}
		got := r.decideFastChain(freeze, p50)
		if got.name != c.wantBest || lfc.status != c.wantLinConv || fc.status != c.wantFreezeFC {
			t.Errorf("%s, p50 fast_linear %.2f, + fast_conv %.2f: best %s, %s %s (%q), %s %s (%q); want %s, %s, %s", c.toggle, c.lin, c.conv,
				got.name, lfc.name, lfc.status, lfc.reason, fc.name, fc.status, fc.reason, c.wantBest, c.wantLinConv, c.wantFreezeFC)
		}
	}
}
