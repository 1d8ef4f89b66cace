package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"
)

// Order is the order targets run in within one round of a comparison.
type Order int

const (
	// Interleaved runs the targets in the same order every round
	// (ABAB...): slow phases of the machine hit every target alike.
	Interleaved Order = iota
	// Shuffled draws a new order every round from a seeded generator, so
	// that a target never systematically follows the same neighbour
	// (whose cache footprint or thread wake-up it would inherit).
	Shuffled
)

// String returns "interleaved" or "shuffled".
func (o Order) String() string {
	switch o {
	case Interleaved:
		return "interleaved"
	case Shuffled:
		return "shuffled"
	}
	return fmt.Sprintf("Order(%d)", int(o))
}

// ParseOrder parses "interleaved" or "shuffled".
func ParseOrder(s string) (Order, error) {
	switch s {
	case "interleaved", "":
		return Interleaved, nil
	case "shuffled":
		return Shuffled, nil
	}
	return 0, fmt.Errorf("order %q: want interleaved or shuffled", s)
}

// CompareOptions configures a side-by-side run. Options.Runs is the number
// of rounds (each target runs once per round); Options.Duration bounds the
// whole timed phase; Warmup counts rounds too.
type CompareOptions struct {
	Options
	Order Order
	// Seed drives the shuffled order and the bootstrap.
	Seed uint64
	// Resamples for the ratio's bootstrap interval; 0 means
	// DefaultResamples.
	Resamples int
	// Decided, when set, is asked after every timed round from the
	// MinDecideRounds-th on, with every target's samples so far (in the
	// targets' order): true ends the timed phase there. A caller that only
	// needs a decision stops once its intervals have taken it, instead of
	// timing the remaining rounds of a settled comparison.
	Decided func(samples [][]time.Duration) bool
}

// MinDecideRounds is the fewest timed rounds before Decided is asked: the
// order-statistic interval of a median needs 6 values to cover it with 95%
// probability.
const MinDecideRounds = 6

// DefaultResamples is the bootstrap size for the ratio of medians: enough
// for stable 2.5% / 97.5% quantiles, cheap next to any real benchmark.
const DefaultResamples = 2000

// bootstrapBudget caps the values drawn by one bootstrap (resamples times
// both sample sizes): a 10 s run of a 50 us model holds 200k latencies per
// model, and 2000 resamples of those would take longer than the run. Past
// the cap the resample count drops (never below minResamples); with that
// many runs the interval is narrow and its ends need less precision.
const (
	bootstrapBudget = 40_000_000
	minResamples    = 200
)

// resamplesFor returns the resample count to use for samples of n values
// in all, given the requested count.
func resamplesFor(requested, n int) int {
	if n <= 0 || requested*n <= bootstrapBudget {
		return requested
	}
	return min(requested, max(minResamples, bootstrapBudget/n))
}

// Pair compares one target (Other) with the baseline (Base, the first target).
type Pair struct {
	Base  string `json:"base"`
	Other string `json:"other"`
	// Ratio is median(Other) / median(Base): below 1, Other is faster.
	Ratio float64 `json:"ratio"`
	// RatioLo and RatioHi bound its 95% bootstrap interval, drawn from
	// Resamples resamples.
	RatioLo   float64     `json:"ratio_ci_lo"`
	RatioHi   float64     `json:"ratio_ci_hi"`
	Resamples int         `json:"resamples"`
	UTest     UTestResult `json:"u_test"`
	// Significant is UTest.P < Alpha.
	Significant bool `json:"significant"`
	// Verdict is "no significant difference (p=0.41)" or
	// "B is 12.3% faster than A (11.0% less time, p=0.002)", where 12.3%
	// is the slower median over the faster one, minus one (the throughput
	// gain), and 11.0% is one minus the faster over the slower.
	Verdict  string   `json:"verdict"`
	Warnings []string `json:"warnings,omitempty"`
}

// Comparison is the outcome of Compare.
type Comparison struct {
	Order   string    `json:"order"`
	Seed    uint64    `json:"seed"`
	Rounds  int       `json:"rounds"`
	Results []*Result `json:"results"`
	Pairs   []Pair    `json:"pairs"`
}

// Compare runs targets side by side in one process, in rounds (see Order),
// and compares every target with the first one. Every target's first
// inference runs before any warm-up so that one failing model is reported
// before minutes are spent on the others.
func Compare(targets []Target, o CompareOptions) (*Comparison, error) {
	if len(targets) < 2 {
		return nil, fmt.Errorf("compare: need at least 2 targets, have %d", len(targets))
	}
	seen := map[string]bool{}
	for i, t := range targets {
		if t == nil {
			return nil, fmt.Errorf("compare: target %d is nil", i)
		}
		if seen[t.Name()] {
			return nil, fmt.Errorf("compare: two targets are named %q; give each a distinct name", t.Name())
		}
		seen[t.Name()] = true
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	if o.Order != Interleaved && o.Order != Shuffled {
		return nil, fmt.Errorf("compare: unknown order %v", o.Order)
	}
	if o.Resamples < 0 {
		return nil, fmt.Errorf("compare: resamples = %d: must be 0 (default) or more", o.Resamples)
	}
	c := o.clock()
	rng := rand.New(rand.NewPCG(o.Seed, 0x5851f42d4c957f2d))
	order := make([]int, len(targets))
	for i := range order {
		order[i] = i
	}
	round := func(f func(i int) error) error {
		if o.Order == Shuffled {
			rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		}
		for _, i := range order {
			if err := f(i); err != nil {
				return err
			}
		}
		return nil
	}

	results := make([]*Result, len(targets))
	for i, t := range targets {
		results[i] = &Result{Name: t.Name()}
		first, err := firstRun(t, c)
		if err != nil {
			return nil, err
		}
		results[i].First = first
	}
	// Before the warm-up rounds, which absorb the slow inferences that follow
	// a collection (see Run).
	if !o.SkipGC {
		runtime.GC()
	}

	// Warm-up rounds.
	wStart := c.Now()
	for r := 0; ; r++ {
		if o.WarmupDuration > 0 {
			if c.Now()-wStart >= o.WarmupDuration {
				break
			}
		} else if r >= o.Warmup {
			break
		}
		err := round(func(i int) error {
			t0 := c.Now()
			if err := targets[i].Run(); err != nil {
				return fmt.Errorf("warm-up run %d of %q failed: %w", r+1, targets[i].Name(), err)
			}
			results[i].WarmupRuns++
			results[i].WarmupTime += c.Now() - t0
			return nil
		})
		if err != nil {
			return nil, err
		}
	}

	start := c.Now()
	limit := o.maxRuns()
	rounds := 0
	for {
		if o.Runs > 0 {
			if rounds >= o.Runs {
				break
			}
		} else if rounds > 0 && (c.Now()-start >= o.Duration || rounds >= limit) {
			break
		}
		err := round(func(i int) error {
			t0 := c.Now()
			if err := targets[i].Run(); err != nil {
				return fmt.Errorf("timed run %d of %q failed: %w", rounds+1, targets[i].Name(), err)
			}
			d := c.Now() - t0
			results[i].Samples = append(results[i].Samples, d)
			results[i].Elapsed += d
			return nil
		})
		if err != nil {
			return nil, err
		}
		rounds++
		if o.Decided != nil && rounds >= MinDecideRounds && decided(o.Decided, results) {
			break
		}
	}

	cmp := &Comparison{Order: o.Order.String(), Seed: o.Seed, Rounds: rounds, Results: results}
	for _, r := range results {
		s, err := Summarize(r.Samples)
		if err != nil {
			return nil, fmt.Errorf("compare %q: %w", r.Name, err)
		}
		r.Stats = s
	}
	resamples := o.Resamples
	if resamples == 0 {
		resamples = DefaultResamples
	}
	for i := 1; i < len(results); i++ {
		p, err := ComparePair(results[0], results[i], resamples, o.Seed+uint64(i))
		if err != nil {
			return nil, err
		}
		cmp.Pairs = append(cmp.Pairs, p)
	}
	return cmp, nil
}

// decided asks f with the samples of results.
func decided(f func([][]time.Duration) bool, results []*Result) bool {
	samples := make([][]time.Duration, len(results))
	for i, r := range results {
		samples[i] = r.Samples
	}
	return f(samples)
}

// ComparePair compares other with base: ratio of medians with a bootstrap
// interval (resamples, fewer for very large samples), U test, verdict. It works on any two Results, measured
// interleaved or not (only interleaved ones are a fair comparison).
func ComparePair(base, other *Result, resamples int, seed uint64) (Pair, error) {
	if base == nil || other == nil {
		return Pair{}, errors.New("compare: nil result")
	}
	a, b := Floats(base.Samples), Floats(other.Samples)
	if len(a) == 0 || len(b) == 0 {
		return Pair{}, fmt.Errorf("compare %q with %q: a target has no samples", base.Name, other.Name)
	}
	p := Pair{Base: base.Name, Other: other.Name, Resamples: resamplesFor(resamples, len(a)+len(b))}
	ratio, lo, hi, err := RatioOfMediansCI(a, b, Confidence, p.Resamples, seed)
	if err != nil {
		return Pair{}, fmt.Errorf("compare %q with %q: %w", base.Name, other.Name, err)
	}
	p.Ratio, p.RatioLo, p.RatioHi = ratio, lo, hi
	u, err := MannWhitneyU(a, b)
	if err != nil {
		return Pair{}, fmt.Errorf("compare %q with %q: %w", base.Name, other.Name, err)
	}
	p.UTest = u
	p.Significant = u.P < Alpha
	if !p.Significant {
		p.Verdict = fmt.Sprintf("no significant difference (p=%s)", formatP(u.P))
		if need := MinRunsForUTest(Alpha); len(a) < need && len(b) < need {
			p.Warnings = append(p.Warnings, fmt.Sprintf("need >= %d runs each to detect a difference at alpha %v", need, Alpha))
		}
	} else {
		fast, slow := other.Name, base.Name
		if ratio > 1 {
			fast, slow = base.Name, other.Name
		}
		hi, lo := math.Max(ratio, 1/ratio), math.Min(ratio, 1/ratio)
		p.Verdict = fmt.Sprintf("%s is %.1f%% faster than %s (%.1f%% less time, p=%s)",
			fast, (hi-1)*100, slow, (1-lo)*100, formatP(u.P))
	}
	if len(a) < 20 || len(b) < 20 {
		p.Warnings = append(p.Warnings, "fewer than 20 runs: the bootstrap interval of the ratio is rough")
	}
	return p, nil
}

// MinRunsForUTest returns the fewest runs per side for which two samples
// that do not overlap at all reach significance at alpha (4 at 0.05).
func MinRunsForUTest(alpha float64) int {
	for n := 1; n <= 50; n++ {
		// Smallest possible two-sided p: 2 / C(2n, n).
		if 2/binom(2*n, n) <= alpha {
			return n
		}
	}
	return 50
}

func binom(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

func formatP(p float64) string {
	if p < 0.001 {
		return fmt.Sprintf("%.1e", p)
	}
	return fmt.Sprintf("%.3f", p)
}

// Floats converts durations to float64 nanoseconds, for the statistics that take floats.
func Floats(ds []time.Duration) []float64 {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return xs
}

// RatioOfMediansCI returns median(other)/median(base) and a percentile
// bootstrap interval at the given confidence: each sample is resampled with
// replacement independently, resamples times, with a generator seeded by
// seed, so the same data always gives the same interval.
func RatioOfMediansCI(base, other []float64, confidence float64, resamples int, seed uint64) (ratio, lo, hi float64, err error) {
	rng := rand.New(rand.NewPCG(seed, 0xda3e39cb94b95bdb))
	bufA := make([]float64, len(base))
	bufB := make([]float64, len(other))
	return bootstrapRatio(base, other, confidence, resamples, func() ([]float64, []float64) {
		for i := range bufA {
			bufA[i] = base[rng.IntN(len(base))]
		}
		for i := range bufB {
			bufB[i] = other[rng.IntN(len(other))]
		}
		return bufA, bufB
	})
}

// RatioOfMediansClusterCI is RatioOfMediansCI for samples that come in clusters, such as the
// latencies of several processes of one side: the same program and settings can run several
// percent faster or slower from one process to the next, so samples of one process are not
// independent draws. Each resample draws whole clusters with replacement, then samples within
// each drawn cluster, so the interval carries the spread between processes as well as within
// them. With few clusters it is wide: that is how little a few processes can tell. Empty
// clusters are left out.
func RatioOfMediansClusterCI(base, other [][]float64, confidence float64, resamples int, seed uint64) (ratio, lo, hi float64, err error) {
	nonEmpty := func(cs [][]float64) [][]float64 {
		return slices.DeleteFunc(slices.Clone(cs), func(c []float64) bool { return len(c) == 0 })
	}
	base, other = nonEmpty(base), nonEmpty(other)
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	draw := func(cs [][]float64, buf []float64) []float64 {
		buf = buf[:0]
		for range cs {
			c := cs[rng.IntN(len(cs))]
			for range c {
				buf = append(buf, c[rng.IntN(len(c))])
			}
		}
		return buf
	}
	var bufA, bufB []float64
	return bootstrapRatio(slices.Concat(base...), slices.Concat(other...), confidence, resamples, func() ([]float64, []float64) {
		bufA, bufB = draw(base, bufA), draw(other, bufB)
		return bufA, bufB
	})
}

// bootstrapRatio checks the arguments and returns median(other)/median(base) with the
// percentile interval of the same ratio over resamples pairs that resample draws.
func bootstrapRatio(base, other []float64, confidence float64, resamples int, resample func() (a, b []float64)) (ratio, lo, hi float64, err error) {
	if len(base) == 0 || len(other) == 0 {
		return 0, 0, 0, errors.New("ratio of medians: empty sample")
	}
	if resamples < 1 {
		return 0, 0, 0, fmt.Errorf("ratio of medians: resamples = %d: must be positive", resamples)
	}
	if confidence <= 0 || confidence >= 1 {
		return 0, 0, 0, fmt.Errorf("ratio of medians: confidence = %v: must be in (0, 1)", confidence)
	}
	mb := median(slices.Clone(base))
	if mb <= 0 {
		return 0, 0, 0, fmt.Errorf("ratio of medians: baseline median is %v; latencies must be positive", mb)
	}
	ratio = median(slices.Clone(other)) / mb
	ratios := make([]float64, 0, resamples)
	for r := 0; r < resamples; r++ {
		a, b := resample()
		ma := median(a)
		if ma <= 0 {
			continue
		}
		ratios = append(ratios, median(b)/ma)
	}
	if len(ratios) == 0 {
		return ratio, 0, 0, errors.New("ratio of medians: every resampled baseline median was 0")
	}
	slices.Sort(ratios)
	tail := (1 - confidence) / 2
	return ratio, Percentile(ratios, tail), Percentile(ratios, 1-tail), nil
}

// median returns the median of xs, reordering xs (quickselect: the
// bootstrap takes thousands of medians of large samples).
func median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return math.NaN()
	}
	hi := selectK(xs, n/2)
	if n%2 == 1 {
		return hi
	}
	// After selecting index n/2, every value below it is in xs[:n/2]; the
	// other middle value is the largest of those.
	lo := xs[0]
	for _, v := range xs[1 : n/2] {
		lo = max(lo, v)
	}
	return (lo + hi) / 2
}

// selectK partially sorts xs so that xs[k] is the k-th smallest value,
// everything before it is <= it and everything after >= it, and returns it.
func selectK(xs []float64, k int) float64 {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		// Median-of-three pivot keeps sorted input linear.
		mid := lo + (hi-lo)/2
		if xs[mid] < xs[lo] {
			xs[mid], xs[lo] = xs[lo], xs[mid]
		}
		if xs[hi] < xs[lo] {
			xs[hi], xs[lo] = xs[lo], xs[hi]
		}
		if xs[hi] < xs[mid] {
			xs[hi], xs[mid] = xs[mid], xs[hi]
		}
		pivot := xs[mid]
		i, j := lo, hi
		for i <= j {
			for xs[i] < pivot {
				i++
			}
			for xs[j] > pivot {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return xs[k]
		}
	}
	return xs[k]
}
