package pipeline

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// int8Config is static INT8 of fixture f on its calibration data, INT8 kept whatever it
// measures (force), so the tests do not depend on timings.
func int8Config(t *testing.T, f fixtures.Fixture, out string) *config.Config {
	c := testConfig(t, f, out)
	c.Quantize.Mode, c.Quantize.Force = "static", true
	c.Calibration.Kind, c.Calibration.Path = "npy", f.Path(f.Calib.Inputs[0].File)
	return c
}

func stageNamed(rep *report.Report, name string) *report.Stage {
	for i := range rep.Stages {
		if rep.Stages[i].Name == name {
			return &rep.Stages[i]
		}
	}
	return nil
}

// mustStage returns the report's row called name, logged, and fails the test without one.
func mustStage(t *testing.T, rep *report.Report, name string) *report.Stage {
	t.Helper()
	s := stageNamed(rep, name)
	if s == nil {
		t.Fatalf("no %q row: stages %+v", name, rep.Stages)
	}
	t.Logf("%s: %s, %s", name, s.Status, s.Reason)
	return s
}

// An INT8 model with an FP32 island (resnet18's conv1 kept FP32 by quantize.skip) gets an
// "INT8 static + optimize_for_inference" candidate; kept (optimize_for_inference: true), the
// artifact is the INT8 model plus the load-time pass, and torchspeed.Load answers like that.
func TestINT8OFI(t *testing.T) {
	if mkldnnBroken != "" {
		t.Skip("optimize_for_inference needs oneDNN: " + mkldnnBroken)
	}
	f := fixtures.Load(t).Get(t, "resnet18")
	out := t.TempDir()
	cfg := int8Config(t, f, out)
	cfg.Quantize.Skip = []string{"conv1"}
	// conv1 alone in FP32, and a quicker run: no fallback (thresholds loosened to pass
	// without it), 4 calibration samples, no channels-last candidate.
	cfg.Quantize.Fallback, cfg.Validation.MinTop1Agreement, cfg.Validation.MinCosine = false, 0, 0.9
	cfg.Calibration.Limit, cfg.Optimize.ChannelsLast = 4, config.Off
	cfg.Optimize.OptimizeForInference, cfg.Optimize.FastQDQ, cfg.Optimize.FuseConvAdd = config.On, config.Off, config.Off
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	const name = "INT8 static + optimize_for_inference"
	s := mustStage(t, rep, name)
	t.Logf("%s: p50 %v ms", name, deref(s.P50Ms))
	if s.Status != report.StatusKept || !strings.Contains(s.Reason, "outputs match INT8 static's: cosine") || s.Precision != "int8-static" {
		t.Errorf("row %s, %s, %q: want kept (optimize_for_inference is on), int8-static, with the comparison with INT8 static", s.Status, s.Precision, s.Reason)
	}
	if s.Measurement == nil || *s.Measurement != "INT8 vs FP32" || s.P50Ms == nil {
		t.Errorf("row not timed in the INT8 vs FP32 measurement: measurement %v, p50 %v", s.Measurement, s.P50Ms)
	}
	if q := stageNamed(rep, "INT8 static"); q == nil || q.Status != report.StatusSuperseded {
		t.Errorf("INT8 static row %+v: want superseded", q)
	}
	if !slices.ContainsFunc(rep.Decisions, func(d string) bool { return strings.HasPrefix(d, name+": optimize_for_inference is on") }) {
		t.Errorf("no decision line for %s: %q", name, rep.Decisions)
	}
	if v := rep.Validation; v == nil || v.Checked != "INT8 static" || !slices.ContainsFunc(v.Notes, func(n string) bool {
		return strings.Contains(n, "plus optimize_for_inference, a pass re-applied at load")
	}) {
		t.Errorf("validation %+v: want INT8 static's figures and a note on the load-time pass", v)
	}
	man, err := torchspeed.ParseManifest(mustExtra(t, *rep.Artifact))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(man.LoadPasses, []string{torchspeed.PassOptimizeForInference}) || man.Precision != "int8-static" || !slices.Contains(man.FP32Layers, "conv1") {
		t.Fatalf("manifest: load passes %q, precision %q, FP32 layers %q: want [optimize_for_inference], int8-static, conv1", man.LoadPasses, man.Precision, man.FP32Layers)
	}

	// The INT8 module as saved, run through the pass here, against torchspeed.Load.
	x := tensors(t, f.InputArrays(t))
	raw, err := torch.LoadWithEngine(*rep.Artifact, man.QEngine)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.Eval(); err != nil {
		t.Fatal(err)
	}
	opt, err := raw.OptimizeForInference()
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Close()
	m, err := torchspeed.Load(*rep.Artifact, torchspeed.LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	nodes, _ := m.Module().NodeCounts()
	rawNodes, _ := raw.NodeCounts()
	if nodes["aten::to_mkldnn"] == 0 || total(quant.FP32LayerOps(nodes)) >= total(quant.FP32LayerOps(rawNodes)) {
		t.Errorf("the loaded graph's FP32 layers were not turned to oneDNN: %v (as saved: %v)", nodes, rawNodes)
	}
	run := func(name string, call func() ([]torch.Output, error)) []float64 {
		outs, err := call()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer torch.CloseOutputs(outs)
		v, err := outs[0].Tensor.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return toF64(v)
	}
	loaded := run("torchspeed.Load", func() ([]torch.Output, error) { return m.Predict(x...) })
	passed := run("INT8 module + pass", func() ([]torch.Output, error) { return opt.Forward(x...) })
	plain := run("INT8 module", func() ([]torch.Output, error) { return raw.Forward(x...) })
	if d, _, err := validate.CompareOutputs([][]float64{passed}, [][]float64{loaded}); err != nil || d > 1e-5 {
		t.Errorf("torchspeed.Load vs the INT8 module + optimize_for_inference: max abs diff %.3g (%v)", d, err)
	}
	if d, cos, err := validate.CompareOutputs([][]float64{plain}, [][]float64{loaded}); err != nil || cos < cfg.Optimize.MinCosine {
		t.Errorf("torchspeed.Load vs the INT8 module without the pass: cosine %.6f, max abs %.3g (%v)", cos, d, err)
	}
}

// Not faster by optimize.min_speedup (set out of reach here), the candidate is a rejected row
// with the reason, and the artifact is the plain INT8 model with no load-time pass.
func TestINT8OFIRejected(t *testing.T) {
	if mkldnnBroken != "" {
		t.Skip("optimize_for_inference needs oneDNN: " + mkldnnBroken)
	}
	f := fixtures.Load(t).Get(t, "resnet18")
	cfg := int8Config(t, f, t.TempDir())
	cfg.Quantize.Skip = []string{"conv1"}
	cfg.Quantize.Fallback, cfg.Validation.MinTop1Agreement, cfg.Validation.MinCosine = false, 0, 0.9
	cfg.Calibration.Limit, cfg.Optimize.ChannelsLast, cfg.Optimize.MinSpeedup = 4, config.Off, 1000
	cfg.Optimize.FastQDQ, cfg.Optimize.FuseConvAdd = config.Off, config.Off
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	const name = "INT8 static + optimize_for_inference"
	s := stageNamed(rep, name)
	if s == nil || s.Status != report.StatusRejected || !strings.HasPrefix(s.Reason, "not faster than INT8 static by 99900%") {
		t.Fatalf("row %+v: want rejected, not faster than INT8 static by the min_speedup", s)
	}
	if q := stageNamed(rep, "INT8 static"); q == nil || q.Status != report.StatusKept {
		t.Errorf("INT8 static row %+v: want kept (forced)", q)
	}
	man, err := torchspeed.ParseManifest(mustExtra(t, *rep.Artifact))
	if err != nil {
		t.Fatal(err)
	}
	if len(man.LoadPasses) != 0 || man.Precision != "int8-static" {
		t.Errorf("manifest: load passes %q, precision %q: want none, int8-static", man.LoadPasses, man.Precision)
	}
}

// A model with no FP32 convolution or linear layer left after quantization gets no
// INT8 + optimize_for_inference candidate.
func TestINT8OFINotBuiltWithoutFP32Layers(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	cfg := int8Config(t, f, t.TempDir())
	cfg.Quantize.Fallback = false
	cfg.Optimize.OptimizeForInference, cfg.Optimize.FastQDQ, cfg.Optimize.FuseConvAdd = config.On, config.Off, config.Off
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	q := stageNamed(rep, "INT8 static")
	if q == nil || q.Status != report.StatusKept || len(rep.Quantize.FP32Layers) != 0 {
		t.Fatalf("INT8 static row %+v, FP32 layers %q: want kept with every layer INT8", q, rep.Quantize.FP32Layers)
	}
	for _, s := range rep.Stages {
		if strings.HasPrefix(s.Name, "INT8") && strings.Contains(s.Name, "optimize_for_inference") {
			t.Errorf("row %q (%s: %s) built for an INT8 model with no FP32 layer", s.Name, s.Status, s.Reason)
		}
	}
}
