package bench

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A realistic inference latency: 5% log-normal spread and a 2% chance of a
// 4 ms spike (the tail two-thread runs show on these machines).
var noisyModel = LatencyModel{Median: 10 * time.Millisecond, Sigma: 0.05, SpikeProb: 0.02, Spike: 4 * time.Millisecond}

func shifted(m LatencyModel, factor float64) LatencyModel {
	m.Median = time.Duration(float64(m.Median) * factor)
	return m
}

func compareSeed(t *testing.T, a, b LatencyModel, seed uint64, order Order, runs int) *Comparison {
	t.Helper()
	clk := &SimClock{}
	ta := NewSyntheticTarget("A", clk, a, 2*seed)
	tb := NewSyntheticTarget("B", clk, b, 2*seed+1)
	c, err := Compare([]Target{ta, tb}, CompareOptions{
		Options:   Options{Runs: runs, Warmup: 5, Clock: clk},
		Order:     order,
		Seed:      seed,
		Resamples: 200,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCompareSelfFalsePositiveRate is the issue's "bench --vs of a model
// against itself reports no significant difference in most runs", with the
// synthetic timing source over 200 seeds: the U test must call a difference
// about alpha (5%) of the time, and certainly under 10%.
func TestCompareSelfFalsePositiveRate(t *testing.T) {
	const seeds = 200
	// One order suffices here: without drift the order does not change
	// what a synthetic target draws (TestInterleavingCancelsDrift covers
	// both orders).
	for _, order := range []Order{Interleaved} {
		fp, ratioMiss := 0, 0
		for s := uint64(1); s <= seeds; s++ {
			c := compareSeed(t, noisyModel, noisyModel, s, order, 100)
			p := c.Pairs[0]
			if p.Significant {
				fp++
			} else if !strings.HasPrefix(p.Verdict, "no significant difference") {
				t.Fatalf("verdict %q for a non-significant pair", p.Verdict)
			}
			if p.RatioLo > 1 || p.RatioHi < 1 {
				ratioMiss++
			}
		}
		rate := float64(fp) / seeds
		t.Logf("%s: A vs A significant in %d/%d seeds (%.1f%%); ratio interval missed 1 in %d", order, fp, seeds, rate*100, ratioMiss)
		if rate >= 0.10 {
			t.Errorf("%s: false-positive rate %.1f%%, want near alpha=5%% and < 10%%", order, rate*100)
		}
		if float64(ratioMiss)/seeds >= 0.10 {
			t.Errorf("%s: the 95%% ratio interval excluded 1 in %d/%d self-comparisons", order, ratioMiss, seeds)
		}
	}
}

// TestCompareDetectsTenPercent: a real 10% slowdown must be detected in more
// than 90% of seeds, attributed to the right model, with a ratio interval
// around 1.10.
func TestCompareDetectsTenPercent(t *testing.T) {
	const seeds = 200
	hit, covered := 0, 0
	for s := uint64(1); s <= seeds; s++ {
		c := compareSeed(t, noisyModel, shifted(noisyModel, 1.10), s, Interleaved, 100)
		p := c.Pairs[0]
		if p.Significant && strings.HasPrefix(p.Verdict, "A is ") {
			hit++
		}
		if p.RatioLo <= 1.10 && 1.10 <= p.RatioHi {
			covered++
		}
	}
	t.Logf("10%% shift detected in %d/%d seeds; ratio interval held 1.10 in %d", hit, seeds, covered)
	if float64(hit)/seeds <= 0.90 {
		t.Errorf("10%% shift detected in %d/%d seeds, want > 90%%", hit, seeds)
	}
	if float64(covered)/seeds < 0.85 {
		t.Errorf("ratio interval held the true 1.10 in only %d/%d seeds", covered, seeds)
	}
}

// TestInterleavingCancelsDrift shows why comparisons interleave: when the
// machine slows down by 30% half-way (a neighbour starts, the CPU clocks
// down), measuring A then B calls the same model different, while
// interleaved rounds still see no difference.
func TestInterleavingCancelsDrift(t *testing.T) {
	drift := noisyModel
	drift.Drift = func(now time.Duration) float64 {
		if now > 1500*time.Millisecond { // about half of 2 x 150 runs of 10 ms
			return 1.3
		}
		return 1
	}
	const seeds = 50
	interleavedFP, shuffledFP, sequentialFP := 0, 0, 0
	for s := uint64(1); s <= seeds; s++ {
		if compareSeed(t, drift, drift, s, Interleaved, 150).Pairs[0].Significant {
			interleavedFP++
		}
		if compareSeed(t, drift, drift, s, Shuffled, 150).Pairs[0].Significant {
			shuffledFP++
		}
		clk := &SimClock{}
		ra, err := Run(NewSyntheticTarget("A", clk, drift, 2*s), Options{Runs: 150, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		rb, err := Run(NewSyntheticTarget("B", clk, drift, 2*s+1), Options{Runs: 150, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		p, err := ComparePair(ra, rb, 200, s)
		if err != nil {
			t.Fatal(err)
		}
		if p.Significant {
			sequentialFP++
		}
	}
	t.Logf("with drift: false positives interleaved %d/%d, shuffled %d/%d, sequential %d/%d",
		interleavedFP, seeds, shuffledFP, seeds, sequentialFP, seeds)
	if interleavedFP > seeds/10 || shuffledFP > seeds/10 {
		t.Errorf("rounds called A vs A different under drift: interleaved %d/%d, shuffled %d/%d seeds",
			interleavedFP, seeds, shuffledFP, seeds)
	}
	if sequentialFP < seeds*9/10 {
		t.Errorf("sequential runs should be fooled by the drift; were in only %d/%d seeds", sequentialFP, seeds)
	}
}

func TestCompareDeterministic(t *testing.T) {
	a := compareSeed(t, noisyModel, shifted(noisyModel, 0.95), 7, Shuffled, 50)
	b := compareSeed(t, noisyModel, shifted(noisyModel, 0.95), 7, Shuffled, 50)
	if !reflect.DeepEqual(a, b) {
		t.Error("the same seed gave different comparisons")
	}
	if a.Rounds != 50 || len(a.Results) != 2 || len(a.Results[0].Samples) != 50 || len(a.Results[1].Samples) != 50 {
		t.Errorf("rounds=%d results=%d", a.Rounds, len(a.Results))
	}
	if a.Order != "shuffled" || a.Results[0].WarmupRuns != 5 || a.Results[0].First <= 0 {
		t.Errorf("order %q warm-up %d first %v", a.Order, a.Results[0].WarmupRuns, a.Results[0].First)
	}
}

func TestCompareThreeTargetsDuration(t *testing.T) {
	clk := &SimClock{}
	targets := []Target{
		NewSyntheticTarget("base", clk, noisyModel, 1),
		NewSyntheticTarget("fast", clk, shifted(noisyModel, 0.5), 2),
		NewSyntheticTarget("same", clk, noisyModel, 3),
	}
	c, err := Compare(targets, CompareOptions{Options: Options{Duration: 5 * time.Second, WarmupDuration: 100 * time.Millisecond, Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pairs) != 2 || c.Pairs[0].Other != "fast" || c.Pairs[1].Other != "same" {
		t.Fatalf("pairs %+v", c.Pairs)
	}
	// 5 s of rounds costing ~25 ms each.
	if c.Rounds < 180 || c.Rounds > 220 {
		t.Errorf("%d rounds in 5s, want about 200", c.Rounds)
	}
	fast := c.Pairs[0]
	if !fast.Significant || !strings.HasPrefix(fast.Verdict, "fast is ") || math.Abs(fast.Ratio-0.5) > 0.03 {
		t.Errorf("fast: ratio %v verdict %q", fast.Ratio, fast.Verdict)
	}
	// "X% faster" is the slower median over the faster one, minus one.
	if !strings.Contains(fast.Verdict, "% faster than base") {
		t.Errorf("verdict %q", fast.Verdict)
	}
}

func TestCompareBadInput(t *testing.T) {
	clk := &SimClock{}
	a := NewSyntheticTarget("a", clk, noisyModel, 1)
	a2 := NewSyntheticTarget("a", clk, noisyModel, 2)
	bad := &failTarget{name: "broken.pt", failAt: 1}
	for _, c := range []struct {
		name    string
		targets []Target
		o       CompareOptions
		want    string
	}{
		{"one target", []Target{a}, CompareOptions{Options: Options{Runs: 5}}, "at least 2"},
		{"duplicate names", []Target{a, a2}, CompareOptions{Options: Options{Runs: 5}}, `named "a"`},
		{"nil target", []Target{a, nil}, CompareOptions{Options: Options{Runs: 5}}, "nil"},
		{"zero duration", []Target{a, bad}, CompareOptions{Options: Options{Duration: 0}}, "nothing to measure"},
		{"first inference fails", []Target{a, bad}, CompareOptions{Options: Options{Runs: 5, Clock: clk}}, `first inference of "broken.pt" failed: forward: expected`},
		{"bad order", []Target{a, bad}, CompareOptions{Options: Options{Runs: 5}, Order: Order(9)}, "unknown order"},
		{"bad resamples", []Target{a, bad}, CompareOptions{Options: Options{Runs: 5}, Resamples: -1}, "resamples"},
	} {
		_, err := Compare(c.targets, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestCompareFewRunsWarns(t *testing.T) {
	c := compareSeed(t, noisyModel, noisyModel, 1, Interleaved, 3)
	w := strings.Join(c.Pairs[0].Warnings, "\n")
	if !strings.Contains(w, "need >= 4 runs each") || !strings.Contains(w, "bootstrap") {
		t.Errorf("3 runs each should warn about the U test and the bootstrap; got %q", w)
	}
}

func TestParseOrder(t *testing.T) {
	for s, want := range map[string]Order{"interleaved": Interleaved, "shuffled": Shuffled, "": Interleaved} {
		if got, err := ParseOrder(s); err != nil || got != want {
			t.Errorf("ParseOrder(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseOrder("random"); err == nil {
		t.Error(`ParseOrder("random") succeeded`)
	}
}

func TestRatioOfMediansCIBadInput(t *testing.T) {
	for _, c := range []struct {
		name       string
		a, b       []float64
		conf       float64
		resamples  int
		wantSubstr string
	}{
		{"empty", nil, []float64{1}, 0.95, 10, "empty"},
		{"resamples", []float64{1}, []float64{1}, 0.95, 0, "resamples"},
		{"confidence", []float64{1}, []float64{1}, 1, 10, "confidence"},
		{"zero median", []float64{0, 0, 0}, []float64{1}, 0.95, 10, "baseline median"},
	} {
		if _, _, _, err := RatioOfMediansCI(c.a, c.b, c.conf, c.resamples, 1); err == nil || !strings.Contains(err.Error(), c.wantSubstr) {
			t.Errorf("%s: err = %v", c.name, err)
		}
	}
}

func TestResamplesFor(t *testing.T) {
	for _, c := range []struct{ req, n, want int }{
		{2000, 400, 2000},
		{2000, 20_000, 2000},
		{2000, 400_000, 200},
		{2000, 100_000, 400},
		{2000, 100_000_000, 200},
		{100, 100_000_000, 100},
	} {
		if got := resamplesFor(c.req, c.n); got != c.want {
			t.Errorf("resamplesFor(%d, %d) = %d, want %d", c.req, c.n, got, c.want)
		}
	}
}

// TestCompareLargeSamples keeps a long duration-mode comparison of a fast
// model affordable: 100k runs each must not take the full 2000 resamples.
func TestCompareLargeSamples(t *testing.T) {
	if testing.Short() {
		t.Skip("large sample")
	}
	clk := &SimClock{}
	m := LatencyModel{Median: 50 * time.Microsecond, Sigma: 0.05}
	c, err := Compare([]Target{NewSyntheticTarget("a", clk, m, 1), NewSyntheticTarget("b", clk, shifted(m, 1.02), 2)},
		CompareOptions{Options: Options{Runs: 100_000, Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Pairs[0]
	if p.Resamples != 200 || !p.Significant || p.RatioLo > 1.02 || p.RatioHi < 1.02 {
		t.Errorf("resamples %d, ratio %.4f [%.4f, %.4f], verdict %q", p.Resamples, p.Ratio, p.RatioLo, p.RatioHi, p.Verdict)
	}
}

// Three processes per side whose medians differ by 10% from one another, the other side 4.5%
// slower throughout: pooled as independent samples the shift looks certain; with the
// processes as clusters it is within what three processes can tell apart. A shift that every
// process shows stays certain either way.
func TestRatioOfMediansClusterCI(t *testing.T) {
	cluster := func(center float64, n int, seed uint64) []float64 {
		r := rand.New(rand.NewPCG(seed, 1))
		out := make([]float64, n)
		for i := range out {
			out[i] = center * (1 + 0.01*r.NormFloat64())
		}
		return out
	}
	spread := func(scale float64, seed uint64) [][]float64 {
		return [][]float64{cluster(90*scale, 240, seed), cluster(100*scale, 240, seed+1), cluster(110*scale, 240, seed+2)}
	}
	base, other := spread(1, 10), spread(1.045, 20)
	flat := func(cs [][]float64) (out []float64) {
		for _, c := range cs {
			out = append(out, c...)
		}
		return out
	}
	_, lo, _, err := RatioOfMediansCI(flat(base), flat(other), 0.95, 1000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if lo <= 1 {
		t.Fatalf("pooled interval's low end %.3f: the test data should look certain to the independent bootstrap", lo)
	}
	r, clo, chi, err := RatioOfMediansClusterCI(base, other, 0.95, 1000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r < 1.03 || r > 1.06 {
		t.Errorf("ratio %.3f, want about 1.045", r)
	}
	if clo > 1 || chi < 1.045 {
		t.Errorf("cluster interval [%.3f, %.3f]: want it to reach 1 and the observed shift", clo, chi)
	}
	// Every process 4.5% slower, with no spread between processes: certain either way.
	same := [][]float64{cluster(100, 240, 30), cluster(100, 240, 31), cluster(100, 240, 32)}
	slower := [][]float64{cluster(104.5, 240, 40), cluster(104.5, 240, 41), cluster(104.5, 240, 42)}
	if _, lo, hi, err := RatioOfMediansClusterCI(same, slower, 0.95, 1000, 1); err != nil || lo <= 1.03 || hi >= 1.06 {
		t.Errorf("uniform shift: interval [%.3f, %.3f], err %v: want it tight around 1.045", lo, hi, err)
	}
	// Empty clusters are ignored; all-empty sides are an error.
	if _, _, _, err := RatioOfMediansClusterCI([][]float64{{}, {}}, slower, 0.95, 100, 1); err == nil {
		t.Error("all-empty base: want an error")
	}
	if _, _, _, err := RatioOfMediansClusterCI(append(same, nil), slower, 0.95, 100, 1); err != nil {
		t.Errorf("an empty cluster beside full ones: %v", err)
	}
}

// TestCompareDecidedEndsEarly: Decided is first asked after MinDecideRounds timed rounds, with
// every target's samples so far, and true ends the timed phase at that round; nil times every
// round.
func TestCompareDecidedEndsEarly(t *testing.T) {
	run := func(decided func([][]time.Duration) bool) *Comparison {
		clk := &SimClock{}
		c, err := Compare([]Target{NewSyntheticTarget("A", clk, noisyModel, 1), NewSyntheticTarget("B", clk, noisyModel, 2)},
			CompareOptions{Options: Options{Runs: 40, Warmup: 2, Clock: clk}, Order: Shuffled, Seed: 3, Resamples: 200, Decided: decided})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := 0
	c := run(func(s [][]time.Duration) bool {
		if len(s) != 2 || len(s[0]) != len(s[1]) {
			t.Fatalf("Decided got %d targets' samples (%d and %d), want 2 of equal length", len(s), len(s[0]), len(s[1]))
		}
		if first == 0 {
			first = len(s[0])
		}
		return len(s[0]) >= 13
	})
	if first != MinDecideRounds {
		t.Errorf("Decided first asked after %d rounds, want %d", first, MinDecideRounds)
	}
	if c.Rounds != 13 || len(c.Results[1].Samples) != 13 {
		t.Errorf("ended after %d rounds (%d samples), want 13", c.Rounds, len(c.Results[1].Samples))
	}
	if c := run(func([][]time.Duration) bool { return false }); c.Rounds != 40 {
		t.Errorf("never decided: %d rounds, want all 40", c.Rounds)
	}
	if c := run(nil); c.Rounds != 40 {
		t.Errorf("no Decided: %d rounds, want all 40", c.Rounds)
	}
}
