package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/tserr"
)

// writeNPY writes a float32 array (a modified copy of a fixture's data) into dir.
func writeNPY(t *testing.T, dir, name string, shape []int64, data []float32) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := npy.WriteFile(p, npy.FromFloat32(shape, data)); err != nil {
		t.Fatal(err)
	}
	return p
}

func calibArray(t *testing.T, f fixtures.Fixture) ([]int64, []float32) {
	t.Helper()
	a, err := npy.ReadFile(f.Path(f.Calib.Inputs[0].File))
	if err != nil {
		t.Fatal(err)
	}
	d, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return a.Shape, d
}

// Results that are wrong must not be reported as right: INT8 that quantized nothing, labels
// outside the classes, NaN outputs, thresholds random data cannot check.
func TestNoWrongResultReportedRight(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	shape, data := calibArray(t, f)

	t.Run("all-zero calibration data", func(t *testing.T) {
		out := t.TempDir()
		cfg := testConfig(t, f, out)
		cfg.Quantize.Mode = "static"
		cfg.Calibration.Path = writeNPY(t, t.TempDir(), "zeros.npy", shape, make([]float32, len(data)))
		_, err := Run(context.Background(), cfg, testOptions())
		wantClass(t, err, tserr.ErrBadInput, "zeros.npy", "zero range", "input x")
		assertEmpty(t, out)
	})

	t.Run("one 1e30 outlier", func(t *testing.T) {
		out := t.TempDir()
		d := append([]float32{}, data...)
		d[7] = 1e30
		cfg := testConfig(t, f, out)
		cfg.Quantize.Mode, cfg.Quantize.Observer, cfg.Quantize.Force = "static", "minmax", true
		cfg.Calibration.Path = writeNPY(t, t.TempDir(), "outlier.npy", shape, d)
		rep, err := Run(context.Background(), cfg, testOptions())
		if err != nil && !errors.Is(err, tserr.ErrAccuracy) {
			if ve := (*ValidationError)(nil); !strings.Contains(err.Error(), "validation") {
				t.Fatalf("error %v (%T)", err, ve)
			}
		}
		if rep == nil {
			t.Fatalf("no report: %v", err)
		}
		warned := false
		for _, w := range rep.Warnings {
			warned = warned || strings.Contains(w, "extreme outliers")
		}
		if !warned {
			t.Errorf("no outlier warning: %q", rep.Warnings)
		}
		assertHonestPrecision(t, rep)
	})

	t.Run("labels outside the classes", func(t *testing.T) {
		out := t.TempDir()
		labels, err := npy.ReadFile(f.Path("digits_eval_labels.npy"))
		if err != nil {
			t.Fatal(err)
		}
		l, _ := labels.Int64s()
		bad := append([]int64{}, l...)
		bad[3] += 1000
		lp := filepath.Join(t.TempDir(), "labels.npy")
		if err := npy.WriteFile(lp, npy.FromInt64([]int64{int64(len(bad))}, bad)); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t, f, out)
		cfg.Validation.Data.Path, cfg.Validation.Data.Labels = f.Path("digits_eval.npy"), lp
		_, err = Run(context.Background(), cfg, testOptions())
		wantClass(t, err, tserr.ErrBadInput, "label 100", "outside the model's 10 classes")
		assertEmpty(t, out)
	})

	t.Run("NaN and infinite outputs keep the report", func(t *testing.T) {
		out := t.TempDir()
		d := append([]float32{}, data...)
		for i := range d {
			d[i] *= 3e38 // conv sums overflow to +-Inf, and Inf - Inf gives NaN
		}
		cfg := testConfig(t, f, out)
		cfg.Validation.Data.Path = writeNPY(t, t.TempDir(), "huge.npy", shape, d)
		cfg.Output.Overwrite = true
		rep, err := Run(context.Background(), cfg, testOptions())
		if rep == nil {
			t.Fatalf("run lost: %v", err)
		}
		name := "report.json"
		if err != nil {
			wantClass(t, err, tserr.ErrAccuracy)
			name = "report.failed.json"
		}
		b, rerr := os.ReadFile(filepath.Join(out, name))
		if rerr != nil {
			t.Fatal(rerr)
		}
		var back map[string]any
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		warned := false
		for _, w := range rep.Warnings {
			warned = warned || strings.Contains(w, "NaN or infinite")
		}
		if !warned {
			t.Errorf("no warning about non-finite outputs: %q", rep.Warnings)
		}
		t.Logf("outcome %v, non_finite %v", back["outcome"], back["non_finite"])
	})

	t.Run("random data cannot pass a threshold it cannot check", func(t *testing.T) {
		out := t.TempDir()
		cfg := testConfig(t, f, out)
		cfg.Quantize.Mode, cfg.Quantize.Force = "static", true
		cfg.Calibration.Kind = "random"
		rep, err := Run(context.Background(), cfg, testOptions())
		wantClass(t, err, tserr.ErrAccuracy, "random data cannot check it")
		if rep == nil || rep.Validation == nil || !rep.Validation.Synthetic || rep.Validation.Passed {
			t.Fatalf("validation %+v", rep.Validation)
		}
		var tbl strings.Builder
		rep.WriteTable(&tbl)
		if !strings.Contains(tbl.String(), "random data: unverified") || strings.Contains(tbl.String(), "PASS") {
			t.Errorf("table:\n%s", tbl.String())
		}
	})

	t.Run("nothing kept: no cosine 0 presented as a pass", func(t *testing.T) {
		out := t.TempDir()
		cfg := testConfig(t, f, out)
		cfg.Optimize.FoldBN, cfg.Optimize.Freeze = false, false
		rep, err := Run(context.Background(), cfg, testOptions())
		if err != nil {
			t.Fatal(err)
		}
		v := rep.Validation
		if v == nil || v.Metrics.Cosine != nil || v.Metrics.MaxAbsError != nil || len(v.Notes) == 0 {
			t.Fatalf("validation of the unchanged original: %+v", v)
		}
	})
}

// assertHonestPrecision: a report, and the artifact's manifest, call the result INT8 only
// when its graph holds quantized ops.
func assertHonestPrecision(t *testing.T, rep *report.Report) {
	t.Helper()
	for _, s := range rep.Stages {
		if strings.HasPrefix(s.Precision, "int8") && (s.QuantizedOps == nil || *s.QuantizedOps == 0) {
			t.Errorf("stage %s says %s with %v quantized ops", s.Name, s.Precision, s.QuantizedOps)
		}
	}
	if rep.Bench != nil && strings.HasPrefix(rep.Bench.Precision, "int8") && (rep.Quantize == nil || rep.Quantize.QuantizedOpCount == 0) {
		t.Errorf("final precision %s with no quantized op", rep.Bench.Precision)
	}
	if rep.Artifact == nil {
		return
	}
	var m torchspeed.Manifest
	if err := json.Unmarshal(rep.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(m.Precision, "int8") && len(m.QuantizedOps) == 0 {
		t.Errorf("manifest precision %s with no quantized op", m.Precision)
	}
	t.Logf("manifest precision %s, quantized ops %v", m.Precision, m.QuantizedOps)
}
