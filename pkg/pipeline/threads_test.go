package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/config"
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
//
// The quick search leaves FP32's own count unmeasured where INT8 is kept and no decision reads
// it (forced, or faster than any count could make FP32), and says so.
func TestThreadsChosenOnShippedModel(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	t.Cleanup(func() { _ = torch.SetNumThreads(1) })
	for _, tc := range []struct {
		force  bool
		search string
	}{{true, config.SearchFull}, {false, config.SearchFull}, {true, config.SearchQuick}, {false, config.SearchQuick}} {
		force := tc.force
		t.Run(fmt.Sprintf("force=%v/%s", force, tc.search), func(t *testing.T) {
			cfg := int8Config(t, f, t.TempDir())
			cfg.Quantize.Force = force
			cfg.Optimize.Search = tc.search
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
			kept := rep.Quantize != nil && rep.Quantize.Kept
			deferred := slices.ContainsFunc(rep.Decisions, func(d string) bool { return strings.HasPrefix(d, "threads for FP32: ") })
			unread := tc.search == config.SearchQuick && kept && (force || deferred)
			if (fp32N < 1 && !unread) || int8N < 1 {
				t.Fatalf("no thread choice for FP32 (%d) or INT8 (%d); decisions:\n%s\nlog:\n%s", fp32N, int8N, strings.Join(rep.Decisions, "\n"), log.String())
			}
			if deferred && (fp32N >= 1 || !kept) {
				t.Fatalf("FP32's count said unmeasured, yet chosen (%d) or INT8 not kept (%v); decisions:\n%s", fp32N, kept, strings.Join(rep.Decisions, "\n"))
			}
			int8Meas := measurementNamed(rep, "INT8 vs FP32")
			if int8Meas == nil || int8Meas.Threads != int8N {
				t.Fatalf("INT8 vs FP32 measurement %+v, want it at INT8's %d thread(s)", int8Meas, int8N)
			}
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

// With threads left to measurement, the quick search times the FP32 stages at the fewest
// thread count it tries and sets the count back afterwards; the full search times them at the
// count set. Either way the thread choice, INT8 and the final benchmark run at the counts
// they chose (TestThreadsChosenOnShippedModel), not at the stages' count.
func TestQuickStagesAtFewestThreads(t *testing.T) {
	if torch.AvailableCPUs() < 2 {
		t.Skip("needs 2 CPUs for a second thread count")
	}
	f := fixtures.Load(t).Get(t, "digits")
	t.Cleanup(func() { _ = torch.SetNumThreads(1) })
	for _, search := range []string{config.SearchQuick, config.SearchFull} {
		t.Run(search, func(t *testing.T) {
			if err := torch.SetNumThreads(2); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, f, t.TempDir())
			cfg.Quantize.Mode = "none"
			cfg.Optimize.Search = search
			opts := testOptions()
			opts.AutoThreads = []int{1, 2}
			rep, err := Run(context.Background(), cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int{config.SearchQuick: 1, config.SearchFull: 2}[search]
			stages := measurementNamed(rep, "stages")
			if stages == nil || stages.Threads != want {
				t.Fatalf("stages measured %+v, want at %d thread(s)", stages, want)
			}
			chosen := decidedThreads(rep, "threads: ")
			if chosen < 1 || rep.Bench == nil || rep.Bench.Threads != chosen {
				t.Fatalf("final benchmark at %+v, want the chosen %d thread(s); decisions:\n%s", rep.Bench, chosen, strings.Join(rep.Decisions, "\n"))
			}
		})
	}
}

// measurementNamed returns the report's measurement called name, or nil.
func measurementNamed(rep *report.Report, name string) *report.Measurement {
	for i := range rep.Measurements {
		if rep.Measurements[i].Name == name {
			return &rep.Measurements[i]
		}
	}
	return nil
}
