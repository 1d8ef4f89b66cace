package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/tserr"
)

// TestReportExplainsItself generates reports on real fixtures and checks that they do not
// contradict themselves: one speedup figure, the same in the summary and the final table;
// every row's status follows from its figures or carries its reason; a forced INT8 that FP32
// beat is said in the summary; counts read "1 sample", not "1 samples".
func TestReportExplainsItself(t *testing.T) {
	fx := fixtures.Load(t)
	digits := fx.Get(t, "digits")
	cases := []struct {
		name string
		f    fixtures.Fixture
		set  func(c *config.Config)
	}{
		{"digits fp32", digits, func(c *config.Config) { c.Quantize.Mode = "none" }},
		{"digits int8 static", digits, func(c *config.Config) {
			c.Quantize.Mode, c.Calibration.Path = "static", digits.Path(digits.Calib.Inputs[0].File)
		}},
		// min_speedup far out of reach: only force keeps INT8, and the summary must say so.
		{"digits int8 forced", digits, func(c *config.Config) {
			c.Quantize.Mode, c.Quantize.Force, c.Optimize.MinSpeedup = "static", true, 100
			c.Calibration.Path = digits.Path(digits.Calib.Inputs[0].File)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, tc.f, t.TempDir())
			tc.set(cfg)
			rep, err := Run(context.Background(), cfg, testOptions())
			if rep == nil || (err != nil && !errors.Is(err, tserr.ErrAccuracy)) {
				t.Fatalf("optimize: %v", err)
			}
			var md bytes.Buffer
			if err := rep.WriteMarkdown(&md); err != nil {
				t.Fatal(err)
			}
			checkExplained(t, rep, md.String(), cfg)
			if t.Failed() {
				t.Logf("report:\n%s", md.String())
			}
		})
	}
}

func checkExplained(t *testing.T, rep *report.Report, md string, cfg *config.Config) {
	t.Helper()
	summary := strings.Join(rep.Summary, "\n")
	if b := rep.Bench; b != nil {
		sp := fmt.Sprintf("%.2fx", report.RoundedSpeedup(b.OriginalP50, b.OptimizedP50))
		if !strings.Contains(summary, sp) {
			t.Errorf("the summary does not give the final table's speedup %s:\n%s", sp, summary)
		}
		line := regexp.MustCompile(`(?m)^Speedup: .*$`).FindString(md)
		if figures := regexp.MustCompile(`\d+\.\d\dx`).FindAllString(line, -1); len(figures) != 1 || figures[0] != sp {
			t.Errorf("the final table's speedup line gives %v, want just %s: %q", figures, sp, line)
		}
		orig := regexp.MustCompile(`(?m)^\| original(?: \|[^|\n]*){4} \|$`).FindString(md)
		if strings.Contains(orig, "|  |") || strings.Contains(orig, "| |") {
			t.Errorf("the final table's original row has blank percentiles: %q", orig)
		}
	}
	if m := regexp.MustCompile(`(^|[^0-9.])1 (samples|threads|intra-op threads|runs|check input sets|linear layers|convolutions)\b|\(s\)|(\d+) samples: (\d+) samples`).FindString(md); m != "" {
		t.Errorf("report reads %q", m)
	}
	var kept *report.Stage
	for i, s := range rep.Stages {
		if s.Status == report.StatusKept {
			kept = &rep.Stages[i]
		}
		if s.Status != report.StatusBaseline && s.Reason == "" {
			t.Errorf("row %s (%s) gives no reason", s.Name, s.Status)
		}
		if s.Reason != "" && !strings.Contains(md, "- **"+s.Name+"**: "+s.Reason) {
			t.Errorf("row %s's reason is not printed beside the table", s.Name)
		}
		if s.Status == report.StatusSuperseded && !regexp.MustCompile(`superseded by|builds on|kept as`).MatchString(s.Reason) {
			t.Errorf("superseded row %s does not say what superseded it: %q", s.Name, s.Reason)
		}
	}
	if kept == nil || kept.P50Ms == nil {
		return
	}
	for _, s := range rep.Stages {
		if s.Status == report.StatusKept || s.P50Ms == nil || s.Measurement == nil || kept.Measurement == nil || *s.Measurement != *kept.Measurement {
			continue
		}
		if *s.P50Ms >= *kept.P50Ms {
			continue
		}
		// A row faster than the kept one, in the same measurement: the kept row's reason or
		// the summary must say why it still wins.
		why := regexp.MustCompile(`forced|valid|cosine|accuracy|builds on|built on|kept as|min_speedup|not faster|stands for`)
		if !why.MatchString(kept.Reason) && !why.MatchString(s.Reason) && !strings.Contains(summary, "quantize.force") {
			t.Errorf("kept row %s (p50 %.3f ms) is slower than %s %s (p50 %.3f ms) in measurement %s, and neither row nor the summary says why",
				kept.Name, *kept.P50Ms, s.Status, s.Name, *s.P50Ms, *s.Measurement)
		}
	}
	if cfg.Quantize.Force && strings.HasPrefix(kept.Precision, "int8") && cfg.Optimize.MinSpeedup > 10 && !strings.Contains(summary, "quantize.force is true") {
		t.Errorf("force kept INT8 below optimize.min_speedup, and the summary does not say so:\n%s", summary)
	}
}
