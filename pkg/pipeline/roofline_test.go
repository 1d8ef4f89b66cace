package pipeline

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// The report holds the final model's roofline: FLOPs counted on the FP32 original, held against
// the FP32 peak, or the INT8 one when the artifact is INT8.
func TestReportRoofline(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "digits")
	for _, mode := range []string{"none", "static"} {
		t.Run(mode, func(t *testing.T) {
			out := t.TempDir()
			cfg := testConfig(t, f, out)
			cfg.Quantize.Mode = mode
			cfg.Quantize.Force = true
			if mode != "none" {
				cfg.Calibration.Kind, cfg.Calibration.Path = "npy", f.Path(f.Calib.Inputs[0].File)
			}
			rep, err := Run(context.Background(), cfg, testOptions())
			if err != nil {
				t.Fatal(err)
			}
			rf := rep.Roofline
			if rf == nil {
				t.Fatalf("no roofline; warnings %q", rep.Warnings)
			}
			// conv 1->16 and 16->32 (3x3 on 8x8), fc 512->64->10: 2 x 337,536 multiply-adds.
			if rf.FLOPs != 675072 || rf.Peak <= 0 || rf.Fraction <= 0 || len(rf.CPUs) != rep.Bench.Threads {
				t.Errorf("roofline %+v: want 675072 FLOP, a measured peak on %d CPU(s), a positive fraction", rf, rep.Bench.Threads)
			}
			// Force keeps the INT8 model whether or not it is faster.
			if want := map[string]string{"none": "fp32", "static": "int8"}[mode]; rf.Precision != want {
				t.Errorf("precision %q, want %q", rf.Precision, want)
			}
			md, err := os.ReadFile(filepath.Join(out, "report.md"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(md), "## Roofline") || !strings.Contains(string(md), "aten::_convolution") {
				t.Errorf("report.md has no roofline section:\n%s", md)
			}
			var tbl bytes.Buffer
			if err := rep.WriteTable(&tbl); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(tbl.String(), "roofline: 675 kFLOP") && !strings.Contains(tbl.String(), "roofline: 675 kOP") {
				t.Errorf("table has no roofline line:\n%s", tbl.String())
			}
			t.Logf("%s: %s", mode, rf.Summary())
		})
	}
}
