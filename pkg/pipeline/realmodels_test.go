package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/tserr"
)

// hasLine reports whether one of lines holds every one of subs.
func hasLine(lines []string, subs ...string) bool {
	for _, l := range lines {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			return true
		}
	}
	return false
}

func stageOf(rep *report.Report, name string) *report.Stage {
	for i := range rep.Stages {
		if rep.Stages[i].Name == name {
			return &rep.Stages[i]
		}
	}
	return nil
}

// A model PyTorch quantized already (eager static quantization; quantize_dynamic) is reported,
// saved and described as INT8 of that kind with its engine, never as FP32, and is offered the
// INT8 passes, measured like the others.
func TestAlreadyINT8Input(t *testing.T) {
	man := fixtures.Load(t)
	for _, tc := range []struct {
		fixture, precision, op string
	}{
		{"int8_cnn", "int8-static", "quantized::conv2d"},
		{"int8_dynamic", "int8-dynamic", "quantized::linear_dynamic"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			f := man.Get(t, tc.fixture)
			cfg := testConfig(t, f, t.TempDir())
			rep, err := Run(context.Background(), cfg, testOptions())
			if err != nil {
				t.Fatal(err)
			}
			if rep.Model.Precision != tc.precision || rep.Model.QuantizedOps[tc.op] == 0 {
				t.Errorf("model precision %q, quantized ops %v; want %s with %s", rep.Model.Precision, rep.Model.QuantizedOps, tc.precision, tc.op)
			}
			if !hasLine(rep.Decisions, "already INT8", tc.precision, "quantized engine") {
				t.Errorf("no decision says the input is INT8 already: %q", rep.Decisions)
			}
			if rep.Bench == nil || rep.Bench.Precision != tc.precision {
				t.Fatalf("bench %+v: want precision %s", rep.Bench, tc.precision)
			}
			if !hasLine(rep.Summary, "Deploy", "INT8", "as the input model was quantized") || hasLine(rep.Summary, "Deploy", "FP32") {
				t.Errorf("summary does not deploy INT8 as given:\n%s", strings.Join(rep.Summary, "\n"))
			}
			man, err := torchspeed.ParseManifest(mustExtra(t, *rep.Artifact))
			if err != nil {
				t.Fatal(err)
			}
			if man.Precision != tc.precision || man.QEngine == "" || len(man.QuantizedOps) == 0 {
				t.Errorf("manifest precision %q, engine %q, ops %v", man.Precision, man.QEngine, man.QuantizedOps)
			}
			if rep.Validation == nil || rep.Validation.CheckedPrecision != tc.precision {
				t.Errorf("validation %+v", rep.Validation)
			}
			if tc.fixture == "int8_cnn" {
				// Its quantize_per_tensor/dequantize and quantized add are fast_qdq's to swap:
				// the candidate is built and measured, kept or not on its timing.
				var fast *report.Stage
				for i := range rep.Stages {
					if strings.HasSuffix(rep.Stages[i].Name, "+ fast_qdq") {
						fast = &rep.Stages[i]
					}
				}
				if fast == nil {
					t.Fatalf("no fast_qdq stage: %+v", rep.Stages)
				}
				if fast.Precision != tc.precision || (fast.Status != report.StatusKept && fast.Status != report.StatusRejected && fast.Status != report.StatusSuperseded) {
					t.Errorf("fast_qdq stage %+v: want it measured (kept, superseded or rejected) at %s", fast, tc.precision)
				}
				t.Logf("fast_qdq: %s: %s", fast.Status, fast.Reason)
			}
		})
	}
}

// `quantize.mode static` on a model that is INT8 already adds nothing: the run says so in
// plain words, does not claim "INT8 (static, calibrated)", and keeps the input's INT8.
func TestStaticOnINT8InputAddsNothing(t *testing.T) {
	f := fixtures.Load(t).Get(t, "int8_cnn")
	cfg := testConfig(t, f, t.TempDir())
	cfg.Quantize.Mode, cfg.Calibration.Kind = "static", "random"
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !hasLine(rep.Warnings, "quantized no layer", "holds already", "drop quantize.mode") {
		t.Errorf("no warning that static quantization added nothing: %q", rep.Warnings)
	}
	if s := stageOf(rep, "INT8 static"); s != nil && s.Status == report.StatusKept {
		t.Errorf("INT8 static kept: %+v", s)
	}
	if hasLine(rep.Summary, "calibrated") || !hasLine(rep.Summary, "Deploy", "INT8") {
		t.Errorf("summary:\n%s", strings.Join(rep.Summary, "\n"))
	}
	if rep.Bench.Precision != "int8-static" {
		t.Errorf("precision %q, want the input's int8-static", rep.Bench.Precision)
	}
}

// A model whose convolutions are XNNPACK prepacked ops (optimize_for_mobile): static INT8
// quantizes nothing and the warning names the cause and the fix, not the calibration data;
// the roofline counts the prepacked convolutions' and linear's FLOPs.
func TestMobileOptimizedInput(t *testing.T) {
	f := fixtures.Load(t).Get(t, "mobile_cnn")
	cfg := testConfig(t, f, t.TempDir())
	cfg.Quantize.Mode, cfg.Calibration.Kind = "static", "random"
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !hasLine(rep.Warnings, "quantized no layer", "XNNPACK", "prepacked::conv2d_clamp_run", "re-export the model without optimize_for_mobile") || !hasLine(rep.Warnings, "XNNPACK prepacked", "20-40x slower") {
		t.Errorf("no warning naming XNNPACK's prepacked ops: %q", rep.Warnings)
	}
	if hasLine(rep.Warnings, "check the calibration data") || hasLine(rep.Warnings, "Check the calibration data") {
		t.Errorf("a warning blames the calibration data: %q", rep.Warnings)
	}
	rf := rep.Roofline
	if rf == nil {
		t.Fatalf("no roofline; warnings %q", rep.Warnings)
	}
	// conv 3->16 3x3 on 32x32 (pad 1), conv 16->32 3x3 stride 2 to 16x16, linear 32->10:
	// 442,368 + 1,179,648 + 320 multiply-adds.
	if rf.FLOPs != 2*(442368+1179648+320) {
		t.Errorf("roofline counted %g FLOP (by op %v), want %d", rf.FLOPs, rf.ByOp, 2*(442368+1179648+320))
	}
}

// The fallback lists only layers whose exclusion changed the quantized graph (the head's
// linears of lstm_inlined are called through their weights: keeping mlp.0 FP32 changes
// nothing), and an INT8 model that fails validation even so leaves the FP32 result (exit 0,
// with a warning) unless quantize.force requires INT8 (exit 3).
func TestFallbackListsOnlyLayersItChanged(t *testing.T) {
	f := fixtures.Load(t).Get(t, "lstm_inlined")
	for _, force := range []bool{false, true} {
		t.Run(map[bool]string{false: "unforced", true: "forced"}[force], func(t *testing.T) {
			cfg := testConfig(t, f, t.TempDir())
			cfg.Quantize.Mode, cfg.Quantize.Fallback, cfg.Quantize.MaxFallbackLayers, cfg.Quantize.Force = "dynamic", true, 3, force
			cfg.Validation.MinCosine = 0.9999999
			rep, err := Run(context.Background(), cfg, testOptions())
			if rep == nil {
				t.Fatalf("no report: %v", err)
			}
			if rep.Quantize == nil {
				t.Fatalf("no quantize section; warnings %q", rep.Warnings)
			}
			for _, a := range rep.Quantize.Attempts {
				for _, l := range a.FP32Layers {
					if strings.HasPrefix(l, "mlp.") {
						t.Errorf("attempt lists %s as FP32, but keeping it FP32 changes nothing: %+v", l, a)
					}
				}
			}
			if !hasLine(rep.Warnings, "mlp.0", "left the quantized graph unchanged") {
				t.Errorf("no warning that mlp.0 changed nothing: %q", rep.Warnings)
			}
			if force {
				wantClass(t, err, tserr.ErrAccuracy, "validation")
				if rep.Artifact != nil {
					t.Errorf("artifact %s written though forced INT8 failed", *rep.Artifact)
				}
				return
			}
			if err != nil {
				t.Fatalf("exit %v: want 0 with the FP32 result", err)
			}
			if rep.Artifact == nil || rep.Bench == nil || rep.Bench.Precision != "fp32" {
				t.Fatalf("artifact %v, bench %+v: want the FP32 result", rep.Artifact, rep.Bench)
			}
			if !hasLine(rep.Warnings, "failed validation", "stays floating point", "quantize.force") {
				t.Errorf("no warning that INT8 failed and FP32 stands: %q", rep.Warnings)
			}
			if rep.Validation == nil || !rep.Validation.Passed || rep.Validation.CheckedPrecision != "fp32" {
				t.Errorf("validation %+v: want the FP32 result's, passed", rep.Validation)
			}
		})
	}
}

// A kept freeze that measured slower than the original says why in Decisions, with the thread
// count of its figures; channels-last on a model without 4-D float weights is a skip with the
// reason, not a failure.
func TestStageDecisionsSayWhy(t *testing.T) {
	f := fixtures.Load(t).Get(t, "int8_cnn")
	cfg := testConfig(t, f, t.TempDir())
	cfg.Quantize.Mode = "none"
	opts := testOptions()
	opts.slow = func(meas, target string) time.Duration {
		if meas == "stages" && target == "freeze" {
			return 2 * time.Millisecond
		}
		return 0
	}
	rep, err := Run(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !hasLine(rep.Decisions, "freeze:", "kept though", "the original here", "optimize.freeze", "thread") {
		t.Errorf("no decision says why a slower freeze is kept: %q", rep.Decisions)
	}
	var cl *report.Stage
	for i := range rep.Stages {
		if strings.HasPrefix(rep.Stages[i].Name, "channels-last") {
			cl = &rep.Stages[i]
		}
	}
	if cl == nil || cl.Status != report.StatusSkipped || !strings.Contains(cl.Reason, "no 4-D float weights") || cl.Precision != "int8-static" {
		t.Errorf("channels-last stage %+v: want skipped, with the reason", cl)
	}
}
