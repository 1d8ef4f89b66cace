package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// TestUntilSettledKeepsTheDecision: the quick search's early end of a measurement takes the
// decision the whole measurement takes (is B at least min_speedup faster than A at p50?), over
// many seeds of a noisy synthetic model (5% spread, 2% chance of a 4 ms spike), at ratios far
// from the line, near it and on it; it ends early where the ratio is far from the line, and the
// full search times every round.
func TestUntilSettledKeepsTheDecision(t *testing.T) {
	cfg := config.Default()
	r := &run{cfg: &cfg}
	model := bench.LatencyModel{Median: 10 * time.Millisecond, Sigma: 0.05, SpikeProb: 0.02, Spike: 4 * time.Millisecond}
	const seeds, runs = 30, 30
	measure := func(ratio float64, seed uint64, settle bool) *bench.Comparison {
		clk := &bench.SimClock{}
		b := model
		b.Median = time.Duration(float64(model.Median) * ratio)
		o := bench.CompareOptions{Options: bench.Options{Runs: runs, Warmup: 2, Clock: clk}, Order: bench.Shuffled, Seed: seed, Resamples: 200}
		if settle {
			o = r.untilSettled(o, []*candidate{{name: "A"}, {name: "B"}}, func(*candidate) bool { return true }, false)
		}
		// The original is target 0, as measure orders them; the pair decided is A and B.
		c, err := bench.Compare([]bench.Target{bench.NewSyntheticTarget("original", clk, model, 3*seed),
			bench.NewSyntheticTarget("A", clk, model, 3*seed+1), bench.NewSyntheticTarget("B", clk, b, 3*seed+2)}, o)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	kept := func(c *bench.Comparison) bool {
		return float64(c.Results[2].Stats.P50)/float64(c.Results[1].Stats.P50) <= 1/cfg.Optimize.MinSpeedup
	}
	for _, ratio := range []float64{0.6, 0.96, 1.0, 1.04, 1.3} {
		agree, early := 0, 0
		for s := uint64(1); s <= seeds; s++ {
			quick, full := measure(ratio, s, true), measure(ratio, s, false)
			if full.Rounds != runs {
				t.Fatalf("the whole measurement ran %d rounds, want %d", full.Rounds, runs)
			}
			if quick.Rounds < settleRounds {
				t.Fatalf("ratio %.2f seed %d: ended after %d rounds, fewer than %d", ratio, s, quick.Rounds, settleRounds)
			}
			if kept(quick) == kept(full) {
				agree++
			}
			if quick.Rounds < runs {
				early++
			}
		}
		t.Logf("ratio %.2f: the early end took the whole measurement's decision in %d/%d seeds, ended early in %d", ratio, agree, seeds, early)
		if agree < seeds*95/100 {
			t.Errorf("ratio %.2f: the early end took the whole measurement's decision in only %d/%d seeds", ratio, agree, seeds)
		}
		if (ratio <= 0.6 || ratio >= 1.3) && early < seeds*9/10 {
			t.Errorf("ratio %.2f, far from the line: ended early in only %d/%d seeds", ratio, early, seeds)
		}
	}
	full := config.Default()
	full.Optimize.Search = config.SearchFull
	o := (&run{cfg: &full}).untilSettled(bench.CompareOptions{Options: bench.Options{Runs: runs}}, []*candidate{{}, {}}, func(*candidate) bool { return true }, false)
	if o.Decided != nil {
		t.Error("the full search ends a measurement early")
	}
}

// TestFastShares: the quick search leaves out fast_linear on resnet18, whose one linear layer
// (the classifier) does a sliver of its work, with the share in the reason, and builds both
// variants on the transformer (linear layers only, so no fast_conv variant to build: its
// convolution share is nil); the full search and a pass on in the config build everything.
func TestFastShares(t *testing.T) {
	set := fixtures.Load(t)
	shares := func(name string, edit func(*config.Config)) map[string]string {
		f := set.Get(t, name)
		cfg := testConfig(t, f, t.TempDir())
		if edit != nil {
			edit(cfg)
		}
		m, err := torch.Load(f.ModelPath())
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		call, err := newCaller(cfg, m)
		if err != nil {
			t.Fatal(err)
		}
		defer call.close()
		r := &run{cfg: cfg, call: call, orig: &candidate{mod: m, call: call}, inputs: tensors(t, f.InputArrays(t))}
		return r.fastShares()
	}
	got := shares("resnet18", nil)
	t.Logf("resnet18: %q", got)
	why := got[torchspeed.PassFastLinear]
	if !strings.HasPrefix(why, "not built (quick search): matrix products") || !strings.Contains(why, "--search full") || got[torchspeed.PassFastConv] != "" {
		t.Errorf("resnet18: %q: want fast_linear left out with its share and --search full, fast_conv built", got)
	}
	if got := shares("resnet18", func(c *config.Config) { c.Optimize.FastLinear = config.On }); got[torchspeed.PassFastLinear] != "" {
		t.Errorf("fast_linear on, yet left out: %q", got)
	}
	if got := shares("resnet18", func(c *config.Config) { c.Optimize.Search = config.SearchFull }); len(got) != 0 {
		t.Errorf("the full search leaves out %q", got)
	}
	got = shares("transformer_traced", nil)
	t.Logf("transformer_traced: %q", got)
	if got[torchspeed.PassFastLinear] != "" || !strings.Contains(got[torchspeed.PassFastConv], "convolutions are 0.00%") {
		t.Errorf("transformer_traced: %q: want fast_linear built, fast_conv left out (no convolution)", got)
	}
}

// TestPrecisionSettled: the quick search leaves the other precision unserved only when the
// kept one won by 1.25x or more beyond doubt on a model allocating under allocRateFloor tensors
// a millisecond, and says so with the figures and how to ask for it; a narrower win, a model
// that allocates more, or the full search serve it.
func TestPrecisionSettled(t *testing.T) {
	lat := func(ms float64, n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			// 3% spread around the median, alternating, so the bootstrap has something to resample.
			out[i] = time.Duration(ms * (1 + 0.03*float64(i%5-2)/2) * float64(time.Millisecond))
		}
		return out
	}
	result := func(name string, ms float64) *bench.Result {
		s := lat(ms, 20)
		st, err := bench.Summarize(s)
		if err != nil {
			t.Fatal(err)
		}
		return &bench.Result{Name: name, Samples: s, Stats: st}
	}
	check := func(int8ms, fp32ms float64, ops int, search string) string {
		cfg := config.Default()
		cfg.Optimize.Search = search
		r := &run{cfg: &cfg}
		r.orig = &candidate{name: "original", kind: kindOriginal}
		m := &measurement{name: "INT8 vs FP32", cmp: &bench.Comparison{Results: []*bench.Result{result("original", 3*fp32ms), result("fp32", fp32ms), result("int8", int8ms)}}}
		nodes := map[string]int{"aten::conv2d": ops, "prim::Constant": 1000}
		fp32 := &candidate{name: "fp32", nodes: nodes, meas: m}
		int8 := &candidate{name: "int8", nodes: nodes, meas: m}
		return r.precisionSettled(&int8Decision{best8: int8, fp32: fp32, meas: m, usedINT8: int8ms < fp32ms})
	}
	why := check(4, 10, 50, config.SearchQuick) // 2.5x, 5 tensors a millisecond
	t.Log(why)
	if !strings.HasPrefix(why, "quick search: int8 ran 2.50x faster than fp32") || !strings.Contains(why, "--search full") {
		t.Errorf("INT8 2.5x faster on a model allocating little: %q, want the precision check left out with the figures", why)
	}
	if why := check(10, 4, 50, config.SearchQuick); !strings.HasPrefix(why, "quick search: fp32 ran 2.50x faster than int8") {
		t.Errorf("FP32 2.5x faster: %q, want the check left out", why)
	}
	for _, c := range []struct {
		int8ms, fp32ms float64
		ops            int
		search, what   string
	}{
		{9, 10, 50, config.SearchQuick, "INT8 1.11x faster"},
		{4, 10, 5000, config.SearchQuick, "500 tensors a millisecond"},
		{4, 10, 50, config.SearchFull, "the full search"},
	} {
		if why := check(c.int8ms, c.fp32ms, c.ops, c.search); why != "" {
			t.Errorf("%s: %q, want the other precision served", c.what, why)
		}
	}
}
