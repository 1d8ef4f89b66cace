package report

import (
	"bytes"
	"strings"
	"testing"
)

// report.md opens with the plain-language summary (before any table): what to deploy, at what
// precision and thread count, how much faster at p50 and p95 with the interval, how accuracy
// was checked (on what data, how many samples) and the warnings; the jargon the tables use is
// explained once, at the end.
func TestSummaryOpensReport(t *testing.T) {
	r := sample()
	r.Validation.Passed, r.Validation.Failures = true, nil
	r.Bench.OriginalP95, r.Bench.OptimizedP95 = 2.9, 1.8
	r.Warnings = []string{"first warning", "the machine's load changed during the run: the original's p50 moved 40%"}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	text := md.String()
	_, rest, _ := strings.Cut(text, "\n## ")
	summary, _, _ := strings.Cut(rest, "\n## ")
	if !strings.HasPrefix(summary, "Summary\n") {
		t.Fatalf("report.md does not open with the summary:\n%s", text)
	}
	for _, want := range []string{
		"Deploy `out/m.torchspeed.pt`: freeze, FP32, 2 intra-op threads.",
		"Speed: 1.54x the original at p50 (95% CI 1.50 to 1.60): 1.30 ms vs 2.00 ms; p95 1.80 ms vs 2.90 ms; 100 interleaved runs each.",
		"Accuracy: freeze checked against the original on 16 samples of calib.npy: cosine=",
		": PASS.",
		// Two warnings: the load change leads, as it makes the figures themselves doubtful.
		"Warnings (2, listed below): the machine's load changed",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
	for _, term := range []string{"**p50 / p95**", "**speedup**", "**kept / superseded**", "**ofi**", "**U test**", "**roofline**"} {
		if n := strings.Count(text, term); n != 1 {
			t.Errorf("%s is explained %d times, want once:\n%s", term, n, text)
		}
	}
	if !strings.Contains(text, "## Terms\n") {
		t.Errorf("no Terms section:\n%s", text)
	}
}

// The summary never calls a difference its interval or test does not support, never offers
// an artifact for a failed validation, and says when the data was random.
func TestSummaryHonest(t *testing.T) {
	r := sample()
	r.Bench.Significant, r.Bench.SpeedupLo, r.Bench.UTestP = false, 0.9, 0.2
	r.Validation.Synthetic = true
	lines := strings.Join(r.summaryLines(), "\n")
	if !strings.Contains(lines, "Speed: no clear difference from the original (p50 1.30 ms vs 2.00 ms, 1.54x, 95% CI 0.90 to 1.60") || strings.Contains(lines, "faster") {
		t.Errorf("non-significant speed summary:\n%s", lines)
	}
	if !strings.Contains(lines, "(random data: unverified on real inputs)") {
		t.Errorf("synthetic data not said:\n%s", lines)
	}

	r = sample()
	r.Outcome, r.Artifact = OutcomeValidationFailed, nil
	lines = strings.Join(r.summaryLines(), "\n")
	if !strings.HasPrefix(lines, "Do not deploy: the optimized model failed validation: cosine 0.97 < 0.99.") || strings.Contains(lines, "Deploy `") {
		t.Errorf("failed-validation summary:\n%s", lines)
	}
}
