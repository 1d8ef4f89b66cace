package pipeline

import (
	"context"
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

// The INT8-or-FP32 decision is taken again where the artifact runs: with runtime settings
// measured, the runtime step measures them on the model of the other precision too, and the
// two serve, each with its own setting, beside a control. Whichever way it goes, the artifact,
// its manifest, the stage table, the validation and the runtime table must all describe the
// same model; the forced switch checks that a switch rewrites every one of them.
func TestPrecisionWhereItRuns(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	for _, force := range []bool{false, true} {
		name := "measured"
		if force {
			name = "switched"
		}
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			cfg := int8Config(t, f, out)
			cfg.Quantize.Fallback, cfg.Quantize.Force = false, false
			cfg.Runtime.Threads, cfg.Runtime.Measure = 1, config.On
			opts := testOptions()
			opts.Serve = []string{torchspeedBinary(t), "bench", "--serve"}
			opts.switchPrecision = force
			opts.servePrecision = true
			rep, err := Run(context.Background(), cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			rt := rep.Runtime
			if rt == nil || !rt.Measured || rt.Precision == nil {
				t.Fatalf("runtime %+v: want measured, with a precision check", rt)
			}
			pc := rt.Precision
			t.Logf("first %s (%s, %s), other %s (%s, %s): ratio %.3f [%.3f, %.3f], control %.3f; switched %v: %s",
				pc.First, pc.FirstPrecision, pc.FirstRuntime, pc.Other, pc.OtherPrecision, pc.OtherRuntime, pc.Ratio, pc.RatioLo, pc.RatioHi, pc.ControlRatio, pc.Switched, pc.Why)
			if !pc.Measured || pc.FirstPrecision == pc.OtherPrecision || !(pc.FirstPrecision == "fp32" || pc.OtherPrecision == "fp32") {
				t.Fatalf("precision check %+v: want one FP32 and one INT8 model measured", pc)
			}
			if pc.RatioLo > pc.Ratio || pc.Ratio > pc.RatioHi || pc.FirstP50Ms <= 0 || pc.OtherP50Ms <= 0 || pc.Rounds < minRuntimeRounds || pc.Why == "" {
				t.Errorf("precision figures %+v", pc)
			}
			if pc.Switched != force && force {
				t.Errorf("switched %v with the hook set", pc.Switched)
			}
			// The model not in the artifact has no control group of its own; on a switch the
			// two tables swap, so the first model's, with its control, is the other table.
			first, other := rt.Candidates, pc.OtherCandidates
			if pc.Switched {
				first, other = other, first
			}
			// The quick search lists the settings it screened out among the first model's rows;
			// only the contenders it measured in full ran on both models.
			if rt.Screen != nil {
				first = slices.DeleteFunc(slices.Clone(first), func(c report.RuntimeCandidate) bool {
					return c.Name != "default" && c.Name != controlName && !slices.Contains(rt.Screen.Contenders, c.Name)
				})
			}
			if len(other) != len(first)-1 || other[0].Name != "default" || first[len(first)-1].Name != controlName {
				t.Errorf("settings measured on the first model %+v and on the other %+v: want the same candidates, the first's with a control", first, other)
			}
			kept := 0
			for _, c := range pc.OtherCandidates {
				if c.Kept {
					kept++
				}
			}
			if kept != 1 {
				t.Errorf("the other model's settings keep %d, want 1: %+v", kept, pc.OtherCandidates)
			}
			// What the artifact is.
			artifact, setting := pc.First, pc.FirstRuntime
			precision, threads := pc.FirstPrecision, pc.FirstThreads
			if pc.Switched {
				artifact, setting, precision, threads = pc.Other, pc.OtherRuntime, pc.OtherPrecision, pc.OtherThreads
			}
			man, err := torchspeed.VerifyArchive(*rep.Artifact)
			if err != nil {
				t.Fatal(err)
			}
			if man.Precision != precision || man.Runtime.Candidate != setting || man.Runtime.Threads != threads || rt.Chosen != setting {
				t.Errorf("manifest precision %s, runtime %+v; report's runtime %s: want %s, %s, %d thread(s)", man.Precision, man.Runtime, rt.Chosen, precision, setting, threads)
			}
			if rep.Bench == nil || rep.Bench.Precision != precision || rep.Bench.Threads != threads {
				t.Errorf("final benchmark %+v: want %s at %d thread(s)", rep.Bench, precision, threads)
			}
			if v := rep.Validation; v == nil || !v.Passed || v.CheckedPrecision != precision {
				t.Errorf("validation %+v: want a pass of the %s model", v, precision)
			}
			if rep.Quantize == nil || rep.Quantize.Kept != (precision != "fp32") {
				t.Errorf("quantize %+v, artifact %s", rep.Quantize, precision)
			}
			var keptRows []string
			for _, s := range rep.Stages {
				if s.Status == report.StatusKept {
					keptRows = append(keptRows, s.Name)
				}
			}
			if len(keptRows) != 1 || keptRows[0] != artifact {
				t.Errorf("kept stage rows %q: want only %q", keptRows, artifact)
			}
			stale := slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "INT8 is not worth it") })
			if stale && precision != "fp32" {
				t.Errorf("the artifact is INT8, but a warning says it was not worth it: %q", rep.Warnings)
			}
			if rt.Candidates[0].Name != "default" || !slices.ContainsFunc(rt.Candidates, func(c report.RuntimeCandidate) bool { return c.Kept && c.Name == setting }) {
				t.Errorf("runtime rows %+v: want the defaults first and %s kept", rt.Candidates, setting)
			}
			md, err := os.ReadFile(filepath.Join(out, "report.md"))
			if err != nil {
				t.Fatal(err)
			}
			verdict := "**kept**: "
			if pc.Switched {
				verdict = "**switched**: "
			}
			for _, s := range []string{"### INT8 or FP32, where the artifact runs", verdict, "Kept: **" + setting + "**", "Runtime settings measured on "} {
				if !strings.Contains(string(md), s) {
					t.Errorf("report.md lacks %q", s)
				}
			}
		})
	}
}
