package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// The quick search (the default) screens the runtime settings in one process each, measures in
// full only the contenders, and accounts for every candidate: measured in full, screened out
// with its screening figures, or not measured with the reason and how to ask for it. The
// report says where optimize's time went.
func TestRuntimeQuickSearch(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	out := t.TempDir()
	cfg := testConfig(t, f, out)
	cfg.Runtime.Threads, cfg.Runtime.Measure = 2, config.On
	opts := testOptions()
	opts.Serve = []string{torchspeedBinary(t), "bench", "--serve"}
	probe, err := cpu.Detect(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Machine = probe
	machine := (&run{opts: opts}).machine()
	rep, err := Run(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	rt := rep.Runtime
	if rep.Search != config.SearchQuick || rt == nil || !rt.Measured || rt.Screen == nil || rt.Screen.Rounds != screenRounds {
		t.Fatalf("search %q, runtime %+v, warnings %v", rep.Search, rt, rep.Warnings)
	}
	seen := map[string]int{}
	kept := ""
	for _, c := range rt.Candidates {
		seen[c.Name]++
		if c.Kept {
			kept = c.Name
		}
		switch {
		case c.Name == controlName:
		case c.Processes == 1 && c.Name != runenv.DefaultCandidate:
			if c.Kept || !strings.Contains(c.Why, "screening round") || !strings.Contains(c.Why, "--search full") || slices.Contains(rt.Screen.Contenders, c.Name) {
				t.Errorf("screened-out row %+v (contenders %v)", c, rt.Screen.Contenders)
			}
		case c.Processes == 1:
			if rt.Processes != 1 || !c.Kept {
				t.Errorf("defaults row from the screening round %+v in %+v", c, rt)
			}
		default:
			if c.Processes < runtimeProcesses || (c.Name != runenv.DefaultCandidate && !slices.Contains(rt.Screen.Contenders, c.Name)) {
				t.Errorf("row measured in full %+v, contenders %v", c, rt.Screen.Contenders)
			}
		}
	}
	if kept == "" || kept != rt.Chosen {
		t.Errorf("kept %q, chosen %q", kept, rt.Chosen)
	}
	for _, c := range rt.NotMeasured {
		seen[c.Name]++
		if !strings.HasPrefix(c.Why, "not measured") || !strings.Contains(c.Why, "--search full") {
			t.Errorf("not measured %+v: want the reason and how to ask for it", c)
		}
	}
	for _, c := range runenv.Candidates(runenv.Settings{Threads: 2, OpenMP: "gnu"}, machine, nil) {
		if seen[c.Name] != 1 {
			t.Errorf("candidate %s appears %d times in the report (rows %+v, not measured %+v)", c.Name, seen[c.Name], rt.Candidates, rt.NotMeasured)
		}
	}
	if len(rep.StepTimes) != 9 {
		t.Errorf("step times %+v: want the 9 steps", rep.StepTimes)
	}
	sum := 0.0
	for _, s := range rep.StepTimes {
		if s.WallMs < 0 || s.Name == "" {
			t.Errorf("step %+v", s)
		}
		sum += s.WallMs
	}
	if sum > rep.WallMs {
		t.Errorf("steps sum to %.1f ms, more than the run's %.1f ms", sum, rep.WallMs)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Quick search: first every setting", "## Where optimize's time went", "| runtime settings |"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q", s)
		}
	}
}

// Which candidates the quick search leaves out: allocators where the model allocates little,
// huge pages where it is small; never the defaults or the wait policies.
func TestScreenOut(t *testing.T) {
	cands := []runenv.Candidate{
		{Name: "default", Allocator: "default"}, {Name: "passive", WaitPolicy: "PASSIVE"},
		{Name: "tcmalloc", Allocator: "tcmalloc", AllocatorPath: "/x/libtcmalloc.so"}, {Name: "thp", Allocator: "default", HugePages: true},
		{Name: "jemalloc-thp", Allocator: "jemalloc", AllocatorPath: "/x/libjemalloc.so", HugePages: true},
	}
	names := func(cs []runenv.Candidate) string {
		var n []string
		for _, c := range cs {
			n = append(n, c.Name)
		}
		return strings.Join(n, ",")
	}
	for _, c := range []struct {
		rate  float64
		bytes int64
		keep  string
	}{
		{5, 1 << 20, "default,passive"},
		{500, 1 << 20, "default,passive,tcmalloc"},
		{5, 30 << 20, "default,passive,thp,jemalloc-thp"},
		{0, 30 << 20, "default,passive,tcmalloc,thp,jemalloc-thp"}, // rate unknown: screened
	} {
		keep, out := screenOut(cands, c.rate, c.bytes, "gnu")
		if names(keep) != c.keep || len(keep)+len(out) != len(cands) {
			t.Errorf("rate %.0f, %d bytes: kept %s, want %s", c.rate, c.bytes, names(keep), c.keep)
		}
		for _, o := range out {
			if !strings.Contains(o.Why, "not measured (quick search)") || o.Env == nil {
				t.Errorf("left out %+v", o)
			}
		}
	}
	if n := tensorOps(map[string]int{"aten::conv2d": 3, "aten::relu_": 3, "aten::view": 1, "prim::Constant": 9, "quantized::linear": 2, "aten::add": 1}); n != 6 {
		t.Errorf("tensorOps = %d, want 6", n)
	}
}

// Under a budget an in-process measurement's rounds become a maximum and its time a share of
// what is left; without one, nothing changes.
func TestBudgetCapsMeasurements(t *testing.T) {
	r := &run{cfg: &config.Config{Bench: config.Bench{Runs: 10, Warmup: 1}}}
	o := bench.CompareOptions{Options: bench.Options{Runs: 30, Warmup: 3}}
	if got := r.capped(o, 0.5); got.Runs != 30 || got.Duration != 0 {
		t.Errorf("no budget: %+v", got)
	}
	r.deadline = time.Now().Add(time.Minute)
	got := r.capped(o, 0.5)
	if got.Runs != 0 || got.MaxRuns != 30 || got.Duration <= 0 || got.Duration > 30*time.Second {
		t.Errorf("budget of a minute, half of it: %+v", got)
	}
	if !r.fits(10*time.Second) || r.fits(2*time.Minute) {
		t.Errorf("fits: 10 s %v, 2 min %v, with a minute left", r.fits(10*time.Second), r.fits(2*time.Minute))
	}
}

// A run with a budget records it, leaves out (and says so) what no longer fits, and warns when
// the steps that are not cut took it over the budget.
func TestBudgetRun(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	cfg := testConfig(t, f, t.TempDir())
	cfg.Runtime.Threads, cfg.Runtime.Measure = 2, config.On
	cfg.Optimize.Search, cfg.Optimize.Budget = config.SearchFull, 10*time.Second
	opts := testOptions()
	opts.Serve = []string{torchspeedBinary(t), "bench", "--serve"}
	rep, err := Run(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rep.BudgetMs == nil || *rep.BudgetMs != 10000 || rep.Search != config.SearchFull || rep.Runtime == nil {
		t.Fatalf("budget %v, search %q, runtime %+v", rep.BudgetMs, rep.Search, rep.Runtime)
	}
	for _, c := range rep.Runtime.NotMeasured {
		if !strings.HasPrefix(c.Why, "not measured") {
			t.Errorf("not measured %+v", c)
		}
	}
	over := slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "over optimize.budget 10s") })
	if over != (rep.WallMs > 10000) {
		t.Errorf("wall %.0f ms against a 10 s budget, warned %v: %q", rep.WallMs, over, rep.Warnings)
	}
}
