package pipeline

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// With optimize.fast_qdq on, static INT8 gets an "INT8 static + fast_qdq" row, timed in the
// INT8 measurement and kept; the artifact on disk is the INT8 model with ATen's ops and the
// fast_qdq load pass, and torchspeed.Load gives exactly the saved module's outputs.
func TestINT8FastQDQ(t *testing.T) {
	if !torch.FastQDQApplies() {
		t.Skip("libtorch has FBGEMM: its quantize/dequantize are not the scalar loops torchspeed's ops reproduce")
	}
	f := fixtures.Load(t).Get(t, "digits")
	cfg := int8Config(t, f, t.TempDir())
	cfg.Quantize.Fallback = false
	cfg.Optimize.FastQDQ = config.On
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	const name = "INT8 static + fast_qdq"
	s := mustStage(t, rep, name)
	if s.Status != report.StatusKept || !strings.Contains(s.Reason, "outputs exactly INT8 static's") {
		t.Errorf("row %s, %q: want kept (fast_qdq is on) with the exact comparison", s.Status, s.Reason)
	}
	if s.Measurement == nil || *s.Measurement != "INT8 vs FP32" || s.P50Ms == nil {
		t.Errorf("row not timed in the INT8 vs FP32 measurement: measurement %v, p50 %v", s.Measurement, s.P50Ms)
	}
	if q := stageNamed(rep, "INT8 static"); q == nil || q.Status != report.StatusSuperseded {
		t.Errorf("INT8 static row %+v: want superseded", q)
	}
	if !slices.ContainsFunc(rep.Decisions, func(d string) bool { return strings.HasPrefix(d, name+": optimize.fast_qdq is on") }) {
		t.Errorf("no decision line for %s: %q", name, rep.Decisions)
	}
	man, err := torchspeed.ParseManifest(mustExtra(t, *rep.Artifact))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(man.LoadPasses, []string{torchspeed.PassFastQDQ}) || man.Precision != "int8-static" {
		t.Fatalf("manifest: load passes %q, precision %q: want [fast_qdq], int8-static", man.LoadPasses, man.Precision)
	}
	raw, m := loadBoth(t, *rep.Artifact, man.QEngine)
	rawNodes, _ := raw.NodeCounts()
	nodes, _ := m.Module().NodeCounts()
	if rawNodes["torchspeed::quantize_per_tensor"] != 0 || nodes["torchspeed::quantize_per_tensor"] == 0 || nodes["aten::quantize_per_tensor"] != 0 {
		t.Errorf("quantize calls: on disk %v, loaded %v: want ATen's on disk, torchspeed's loaded", rawNodes, nodes)
	}
	w, g := firstOutputs(t, f, raw, m)
	for i := range w {
		if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
			t.Fatalf("output %d: %v loaded with fast_qdq, %v as saved", i, g[i], w[i])
		}
	}
}
