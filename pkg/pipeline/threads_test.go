package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/report"
)

// decidedThreads reads the count a "<prefix> N (" decision names; -1 when there is none.
func decidedThreads(rep *report.Report, prefix string) int {
	for _, d := range rep.Decisions {
		if rest, ok := strings.CutPrefix(d, prefix); ok {
			var n int
			if _, err := fmt.Sscanf(rest, "%d (", &n); err == nil {
				return n
			}
		}
	}
	return -1
}

// With threads left to measurement, the INT8 model gets a thread choice of its own, is
// compared with FP32 at that count, and the final benchmark runs the shipped model at the count
// chosen for it (FP32's again when INT8 is not kept). Forcing INT8 pins which model ships;
// which counts win is the machine's business and is not asserted.
func TestThreadsChosenOnShippedModel(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	t.Cleanup(func() { _ = torch.SetNumThreads(1) })
	for _, force := range []bool{true, false} {
		t.Run(fmt.Sprintf("force=%v", force), func(t *testing.T) {
			cfg := int8Config(t, f, t.TempDir())
			cfg.Quantize.Force = force
			opts := testOptions()
			opts.AutoThreads = []int{1, 2}
			var log strings.Builder
			opts.Log = &log
			rep, err := Run(context.Background(), cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			fp32N := decidedThreads(rep, "threads: ")
			int8N := decidedThreads(rep, "threads for INT8 static: ")
			if fp32N < 1 || int8N < 1 {
				t.Fatalf("no thread choice for FP32 (%d) or INT8 (%d); decisions:\n%s\nlog:\n%s", fp32N, int8N, strings.Join(rep.Decisions, "\n"), log.String())
			}
			var int8Meas *report.Measurement
			for i := range rep.Measurements {
				if rep.Measurements[i].Name == "INT8 vs FP32" {
					int8Meas = &rep.Measurements[i]
				}
			}
			if int8Meas == nil || int8Meas.Threads != int8N {
				t.Fatalf("INT8 vs FP32 measurement %+v, want it at INT8's %d thread(s)", int8Meas, int8N)
			}
			kept := rep.Quantize != nil && rep.Quantize.Kept
			if force && !kept {
				t.Fatalf("INT8 forced but not kept; decisions:\n%s", strings.Join(rep.Decisions, "\n"))
			}
			want := fp32N
			if kept {
				want = int8N
			}
			if rep.Bench == nil || rep.Bench.Threads != want {
				t.Fatalf("final benchmark at %+v thread(s), want %d (INT8 kept %v, FP32 chose %d, INT8 %d)\n%s",
					rep.Bench, want, kept, fp32N, int8N, log.String())
			}
			if rep.Settings.Threads != want {
				t.Errorf("report settings say %d thread(s), want %d", rep.Settings.Threads, want)
			}
		})
	}
}
