package pipeline

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// With optimize.fuse_conv_add on, resnet18's static INT8 model gets an "INT8 static + fast_qdq
// + fuse_conv_add" row: validated against FP32, timed in the INT8 measurement and kept. The
// artifact on disk is the INT8 model with ATen's ops and both load passes; torchspeed.Load
// fuses its 8 conv + add_relu pairs and answers like the saved module up to one rounding.
func TestINT8FuseConvAdd(t *testing.T) {
	if why := torch.ConvAddUnavailable(); why != "" {
		t.Skip(why)
	}
	if !torch.FastQDQApplies() {
		t.Skip("libtorch has FBGEMM: no fast_qdq variant to build on")
	}
	f := fixtures.Load(t).Get(t, "resnet18")
	cfg := int8Config(t, f, t.TempDir())
	// A quicker run: no fallback (thresholds loosened to pass without it), 4 calibration
	// samples, no channels-last or optimize_for_inference candidates.
	cfg.Quantize.Fallback, cfg.Validation.MinTop1Agreement, cfg.Validation.MinCosine = false, 0, 0.9
	cfg.Calibration.Limit, cfg.Optimize.ChannelsLast, cfg.Optimize.OptimizeForInference = 4, config.Off, config.Off
	cfg.Optimize.FastQDQ, cfg.Optimize.FuseConvAdd = config.On, config.On
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	const name = "INT8 static + fast_qdq + fuse_conv_add"
	s := stageNamed(rep, name)
	if s == nil {
		t.Fatalf("no %q row: stages %+v", name, rep.Stages)
	}
	t.Logf("%s: %s, %s", name, s.Status, s.Reason)
	if s.Status != report.StatusKept || !strings.Contains(s.Reason, "8 conv + add pair(s) fused; against FP32") {
		t.Errorf("row %s, %q: want kept (fuse_conv_add is on) with its validation", s.Status, s.Reason)
	}
	if s.Measurement == nil || *s.Measurement != "INT8 vs FP32" || s.P50Ms == nil {
		t.Errorf("row not timed in the INT8 vs FP32 measurement: measurement %v, p50 %v", s.Measurement, s.P50Ms)
	}
	for _, other := range []string{"INT8 static", "INT8 static + fast_qdq"} {
		if q := stageNamed(rep, other); q == nil || q.Status != report.StatusSuperseded {
			t.Errorf("%s row %+v: want superseded", other, q)
		}
	}
	man, err := torchspeed.ParseManifest(mustExtra(t, *rep.Artifact))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(man.LoadPasses, []string{torchspeed.PassFastQDQ, torchspeed.PassFuseConvAdd}) {
		t.Fatalf("manifest: load passes %q: want [fast_qdq fuse_conv_add]", man.LoadPasses)
	}
	raw, m := loadBoth(t, *rep.Artifact, man.QEngine)
	rawNodes, _ := raw.NodeCounts()
	nodes, _ := m.Module().NodeCounts()
	if rawNodes["quantized::add_relu"] != 8 || rawNodes["torchspeed::conv2d_add"] != 0 || nodes["torchspeed::conv2d_add"] != 8 ||
		nodes["quantized::add_relu"]+nodes["torchspeed::add_relu"] != 0 {
		t.Errorf("node counts: on disk %v, loaded %v: want ATen's 8 add_relu on disk, 8 torchspeed::conv2d_add loaded", rawNodes, nodes)
	}
	w, g := firstOutputs(t, f, raw, m)
	var ab, aa, bb float64
	for i := range w {
		ab += float64(w[i]) * float64(g[i])
		aa += float64(w[i]) * float64(w[i])
		bb += float64(g[i]) * float64(g[i])
	}
	if cos := ab / math.Sqrt(aa*bb); cos < 0.999 || validate.Argmax(w) != validate.Argmax(g) {
		t.Errorf("loaded vs saved: cosine %.6f, top-1 %d vs %d", cos, validate.Argmax(g), validate.Argmax(w))
	}
}

// pickFuse on given p50s: auto keeps the fused variant only when it is faster, true keeps it
// anyway; a kept variant supersedes the fast_qdq candidate it was built on.
func TestPickFuse(t *testing.T) {
	for _, c := range []struct {
		toggle   config.Toggle
		fuse     time.Duration
		want     state
		inReason string
	}{
		{config.Auto, 3 * time.Millisecond, stKept, "1.33x faster than INT8 static + fast_qdq"},
		{config.Auto, 4 * time.Millisecond, stRejected, "not faster than INT8 static + fast_qdq"},
		{config.Auto, 5 * time.Millisecond, stRejected, "not faster than INT8 static + fast_qdq"},
		{config.On, 5 * time.Millisecond, stKept, "optimize.fuse_conv_add is on"},
	} {
		cfg := config.Default()
		cfg.Optimize.FuseConvAdd = c.toggle
		fast := &candidate{name: "INT8 static + fast_qdq", kind: kindINT8Fast, status: stCandidate}
		fuse := &candidate{name: fast.name + " + fuse_conv_add", kind: kindINT8Fuse, status: stCandidate, base: fast, reason: "8 conv + add pair(s) fused"}
		r := &run{cfg: &cfg, rep: &report.Report{}, cands: []*candidate{fast, fuse}}
		m := &measurement{cmp: &bench.Comparison{Results: []*bench.Result{
			{Name: fast.name, Stats: bench.Summary{P50: 4 * time.Millisecond}}, {Name: fuse.name, Stats: bench.Summary{P50: c.fuse}}}}}
		got := r.pickFuse(m, fast, fuse)
		if c.want == stKept {
			if got != fuse || fuse.status != stCandidate || !strings.Contains(fuse.reason, c.inReason) || fast.status != stSuperseded {
				t.Errorf("%s, p50 %v vs 4ms: picked %s; fused %s %q, base %s: want the fused one with %q, its base superseded", c.toggle, c.fuse, got.name, fuse.status, fuse.reason, fast.status, c.inReason)
			}
		} else if got != fast || fuse.status != stRejected || !strings.Contains(fuse.reason, c.inReason) || fast.status != stCandidate {
			t.Errorf("%s, p50 %v vs 4ms: picked %s; fused %s %q, base %s: want rejected with %q", c.toggle, c.fuse, got.name, fuse.status, fuse.reason, fast.status, c.inReason)
		}
	}
}
