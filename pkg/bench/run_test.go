package bench

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

var quietModel = LatencyModel{Median: 2 * time.Millisecond, Sigma: 0.03, First: 50 * time.Millisecond}

func TestRunPhases(t *testing.T) {
	clk := &SimClock{}
	tg := NewSyntheticTarget("resnet18", clk, quietModel, 1)
	res, err := Run(tg, Options{Runs: 200, Warmup: 10, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != "resnet18" {
		t.Errorf("Name = %q", res.Name)
	}
	if res.First < 50*time.Millisecond {
		t.Errorf("First = %v, want the 50ms first-run cost included", res.First)
	}
	if res.WarmupRuns != 10 || res.WarmupTime <= 0 {
		t.Errorf("warm-up = %d runs in %v, want 10 runs", res.WarmupRuns, res.WarmupTime)
	}
	if len(res.Samples) != 200 || res.Stats.N != 200 {
		t.Fatalf("samples = %d (N=%d), want 200", len(res.Samples), res.Stats.N)
	}
	if tg.calls != 1+10+200 {
		t.Errorf("target ran %d times, want 211", tg.calls)
	}
	if d := math.Abs(float64(res.Stats.P50)/float64(quietModel.Median) - 1); d > 0.02 {
		t.Errorf("P50 = %v, want about %v", res.Stats.P50, quietModel.Median)
	}
	s := res.Stats
	if !(s.Min <= s.P50 && s.P50 <= s.P90 && s.P90 <= s.P95 && s.P95 <= s.P99 && s.P99 <= s.P999 && s.P999 <= s.Max) {
		t.Errorf("percentiles out of order: %+v", s)
	}
	if !s.MedianCIOK || s.MedianLo > s.P50 || s.MedianHi < s.P50 {
		t.Errorf("median interval [%v, %v] does not hold the median %v", s.MedianLo, s.MedianHi, s.P50)
	}
	if math.Abs(s.Throughput-1e9/float64(s.Mean)) > 1e-6*s.Throughput {
		t.Errorf("Throughput = %v, want 1/mean", s.Throughput)
	}
	var sum time.Duration
	for _, d := range res.Samples {
		sum += d
	}
	if res.Elapsed != sum {
		t.Errorf("Elapsed = %v, want the sum of samples %v on a simulated clock", res.Elapsed, sum)
	}
}

func TestRunDurations(t *testing.T) {
	clk := &SimClock{}
	tg := NewSyntheticTarget("m", clk, quietModel, 2)
	res, err := Run(tg, Options{Duration: time.Second, WarmupDuration: 100 * time.Millisecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	// 1 s of 2 ms runs.
	if n := len(res.Samples); n < 480 || n > 520 {
		t.Errorf("%d timed runs in 1s of ~2ms runs, want about 500", n)
	}
	if res.Elapsed < time.Second || res.Elapsed > time.Second+10*time.Millisecond {
		t.Errorf("Elapsed = %v, want just over 1s", res.Elapsed)
	}
	if res.WarmupTime < 100*time.Millisecond || res.WarmupRuns < 40 || res.WarmupRuns > 60 {
		t.Errorf("warm-up %d runs in %v, want about 50 runs in 100ms", res.WarmupRuns, res.WarmupTime)
	}
	// A duration shorter than one run still measures one.
	res, err = Run(NewSyntheticTarget("m", clk, quietModel, 3), Options{Duration: time.Nanosecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Samples) != 1 {
		t.Errorf("%d runs for a 1ns duration, want 1", len(res.Samples))
	}
	if !strings.Contains(strings.Join(res.Stats.Warnings, "\n"), "need >= 6 runs") {
		t.Errorf("a 1-run measurement should warn; warnings %q", res.Stats.Warnings)
	}
	// MaxRuns caps a duration-limited run.
	res, err = Run(NewSyntheticTarget("m", clk, quietModel, 4), Options{Duration: time.Hour, MaxRuns: 37, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Samples) != 37 {
		t.Errorf("MaxRuns=37 gave %d runs", len(res.Samples))
	}
}

func TestRunWallClock(t *testing.T) {
	res, err := Run(sleepTarget{"sleep", time.Millisecond}, Options{Runs: 20, Warmup: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.Min < time.Millisecond {
		t.Errorf("min %v is below the 1ms sleep: the wall clock is not measuring", res.Stats.Min)
	}
}

type sleepTarget struct {
	name string
	d    time.Duration
}

func (s sleepTarget) Name() string { return s.name }
func (s sleepTarget) Run() error   { time.Sleep(s.d); return nil }

func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		want string // "" means valid
	}{
		{"runs", Options{Runs: 10}, ""},
		{"duration", Options{Duration: time.Second, Warmup: 3}, ""},
		{"warmup duration", Options{Runs: 1, WarmupDuration: time.Second}, ""},
		{"nothing", Options{}, "nothing to measure"},
		{"zero duration", Options{Duration: 0}, "duration = 0"},
		{"negative runs", Options{Runs: -5}, "runs = -5"},
		{"negative duration", Options{Duration: -time.Second}, "duration = -1s"},
		{"both", Options{Runs: 5, Duration: time.Second}, "not both"},
		{"negative warmup", Options{Runs: 5, Warmup: -1}, "warmup = -1"},
		{"negative warmup duration", Options{Runs: 5, WarmupDuration: -1}, "warmup duration"},
		{"both warmups", Options{Runs: 5, Warmup: 2, WarmupDuration: time.Second}, "not both"},
		{"negative max runs", Options{Duration: time.Second, MaxRuns: -1}, "max runs"},
	} {
		err := c.o.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

type failTarget struct {
	name   string
	failAt int
	calls  int
}

func (f *failTarget) Name() string { return f.name }
func (f *failTarget) Run() error {
	f.calls++
	if f.calls == f.failAt {
		return errors.New("forward: expected 4-dimensional input, got 3")
	}
	return nil
}

func TestRunFailures(t *testing.T) {
	for _, c := range []struct {
		name   string
		failAt int
		o      Options
		want   []string
	}{
		{"first", 1, Options{Runs: 5, Warmup: 2}, []string{`first inference of "bad.pt" failed`, "expected 4-dimensional input"}},
		{"warmup", 3, Options{Runs: 5, Warmup: 2}, []string{`warm-up run 2 of "bad.pt"`, "expected 4-dimensional"}},
		{"timed", 5, Options{Runs: 5, Warmup: 2}, []string{`timed run 2 of "bad.pt"`, "expected 4-dimensional"}},
		{"invalid options", 0, Options{}, []string{`"bad.pt"`, "nothing to measure"}},
	} {
		_, err := Run(&failTarget{name: "bad.pt", failAt: c.failAt}, c.o)
		if err == nil {
			t.Errorf("%s: Run succeeded", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.name, err, w)
			}
		}
	}
	if _, err := Run(nil, Options{Runs: 1}); err == nil {
		t.Error("Run(nil) succeeded")
	}
}

// forcedGCs is how many collections runtime.GC has run in this process.
func forcedGCs() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumForcedGC
}

// Run collects garbage once, before the warm-up, and not at all with SkipGC: the
// inferences right after a collection are slow, and a caller timing a warm target again
// and again (the serve loop) would have them in every round.
func TestRunCollectsGarbageBeforeWarmup(t *testing.T) {
	clk := &SimClock{}
	tg := &gcWatch{SyntheticTarget: NewSyntheticTarget("m", clk, quietModel, 1)}
	gcs := forcedGCs()
	if _, err := Run(tg, Options{Runs: 5, Warmup: 3, Clock: clk}); err != nil {
		t.Fatal(err)
	}
	if len(tg.seen) != 9 || tg.seen[0] != gcs || tg.seen[1] != gcs+1 || forcedGCs() != gcs+1 {
		t.Errorf("collections seen by each run %v (from %d), %d in all; want 1 between the first run and the warm-up, no other",
			tg.seen, gcs, forcedGCs()-gcs)
	}
	gcs = forcedGCs()
	if _, err := Run(tg, Options{Runs: 5, Clock: clk, SkipGC: true}); err != nil {
		t.Fatal(err)
	}
	if n := forcedGCs() - gcs; n != 0 {
		t.Errorf("SkipGC: %d collections, want 0", n)
	}
}

// gcWatch records the count of collections at each run.
type gcWatch struct {
	*SyntheticTarget
	seen []uint32
}

func (g *gcWatch) Run() error {
	g.seen = append(g.seen, forcedGCs())
	return g.SyntheticTarget.Run()
}
