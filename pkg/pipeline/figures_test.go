package pipeline

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
)

// A load change in the middle of a run (the original slowed down by 3 ms per inference in the
// final benchmark only, as a busy neighbour would) is re-measured, then warned about in the
// report and the log; and every stage row's speedup is the ratio of the p50s it prints, in
// report.json and in report.md, with the thread count and precision on every row.
func TestBaselineShiftWarnsAndRowsAgree(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	out := t.TempDir()
	cfg := testConfig(t, f, out)
	cfg.Bench.StageRuns = 6
	cfg.Optimize.Search = config.SearchFull // the quick search warns without measuring again
	var log strings.Builder
	opts := testOptions()
	opts.Log = &log
	slowed := map[string]int{}
	opts.slow = func(meas, target string) time.Duration {
		if strings.HasPrefix(meas, "final") && target == "original" {
			slowed[meas]++
			return 3 * time.Millisecond
		}
		return 0
	}
	rep, err := Run(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(slowed) != 2 {
		t.Errorf("slowed measurements %v: want the final one and its re-measurement", slowed)
	}
	warned := false
	for _, w := range rep.Warnings {
		warned = warned || strings.Contains(w, "load changed") && strings.Contains(w, "the original's p50 moved")
	}
	if !warned {
		t.Errorf("no baseline-shift warning: %q", rep.Warnings)
	}
	if !strings.Contains(log.String(), "WARNING: the machine's load changed") || !strings.Contains(log.String(), "re-measuring the final benchmark") {
		t.Errorf("log does not say it re-measured and warn:\n%s", log.String())
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "load changed") {
		t.Errorf("report.md does not warn:\n%s", md)
	}
	checkRowsAgree(t, rep, string(md))
	// The final benchmark's speedup is its own p50s' ratio, and its verdict agrees with its
	// interval.
	b := rep.Bench
	if math.Abs(b.Speedup-b.OriginalP50/b.OptimizedP50) > 1e-9 {
		t.Errorf("final speedup %v, p50s %v / %v", b.Speedup, b.OriginalP50, b.OptimizedP50)
	}
	if v, sig := report.Verdict(report.RoundedSpeedup(b.OriginalP50, b.OptimizedP50), b.SpeedupLo, b.SpeedupHi, b.UTestP); v != b.Verdict || sig != b.Significant {
		t.Errorf("verdict %q (%v), want %q (%v)", b.Verdict, b.Significant, v, sig)
	}
}

// checkRowsAgree: every timed row prints threads and precision, and its speedup equals the
// ratio of the two p50s it prints (within the rounding of the printed figures).
func checkRowsAgree(t *testing.T, rep *report.Report, md string) {
	t.Helper()
	timed := 0
	for _, s := range rep.Stages {
		if s.Precision == "" {
			t.Errorf("row %s has no precision", s.Name)
		}
		if s.P50Ms == nil {
			continue
		}
		timed++
		if s.Threads == nil || *s.Threads < 1 || s.BaselineP50Ms == nil || s.Speedup == nil || s.Measurement == nil {
			t.Errorf("row %s: threads %v, baseline %v, speedup %v, measurement %v", s.Name, s.Threads, s.BaselineP50Ms, s.Speedup, s.Measurement)
			continue
		}
		if got, want := *s.Speedup, *s.BaselineP50Ms / *s.P50Ms; math.Abs(got-want) > 1e-9*want {
			t.Errorf("row %s: speedup %v, p50s give %v", s.Name, got, want)
		}
	}
	if timed < 2 {
		t.Fatalf("only %d timed rows", timed)
	}
	// The Markdown table: | stage | status | precision | threads | p50 | p95 | original p50 | speedup [CI] | ...
	rows := 0
	for _, line := range strings.Split(md, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 10 || strings.TrimSpace(cells[1]) == "stage" || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		p50, err1 := strconv.ParseFloat(strings.TrimSpace(cells[5]), 64)
		base, err2 := strconv.ParseFloat(strings.TrimSpace(cells[7]), 64)
		sp, err3 := strconv.ParseFloat(strings.TrimSuffix(strings.Fields(cells[8])[0], "x"), 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue // an untimed row ("-")
		}
		rows++
		if threads := strings.TrimSpace(cells[4]); threads == "-" || strings.TrimSpace(cells[3]) == "" {
			t.Errorf("markdown row %q lacks threads or precision", line)
		}
		if math.Abs(sp-base/p50) > 0.006 {
			t.Errorf("markdown row %q: speedup %.2f, printed p50s give %.4f", line, sp, base/p50)
		}
	}
	if rows != timed {
		t.Errorf("markdown has %d timed rows, the report %d:\n%s", rows, timed, md)
	}
}

// Every measurement reports its rounds through Options.Progress, ending at its total.
func TestMeasurementProgress(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	cfg := testConfig(t, f, t.TempDir())
	cfg.Quantize.Mode = "none"
	last := map[string][2]int{}
	opts := testOptions()
	opts.Progress = func(stage string, done, total int) { last[stage] = [2]int{done, total} }
	if _, err := Run(context.Background(), cfg, opts); err != nil {
		t.Fatal(err)
	}
	for _, stage := range []string{"measuring: stages", "measuring: final"} {
		if got := last[stage]; got[1] == 0 || got[0] != got[1] {
			t.Errorf("%s: last progress %d of %d (all: %v)", stage, got[0], got[1], last)
		}
	}
}
