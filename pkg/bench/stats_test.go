package bench

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The reference values in testdata/ come from numpy and scipy
// (scripts/gen_stats_testdata.py), not from this package.

func loadCases[T any](t *testing.T, name string) []T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read reference data: %v (regenerate with /usr/bin/python3 scripts/gen_stats_testdata.py)", err)
	}
	var doc struct {
		Cases []T `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	if len(doc.Cases) == 0 {
		t.Fatalf("%s holds no cases", name)
	}
	return doc.Cases
}

func approx(got, want, relTol float64) bool {
	if got == want {
		return true
	}
	return math.Abs(got-want) <= relTol*math.Max(math.Abs(want), 1e-300)
}

func TestPercentileMatchesNumpy(t *testing.T) {
	type tc struct {
		Name   string    `json:"name"`
		Sample []float64 `json:"sample"`
		Q      []float64 `json:"q"`
		Want   []float64 `json:"want"`
		Mean   float64   `json:"mean"`
		Stddev float64   `json:"stddev"`
	}
	for _, c := range loadCases[tc](t, "percentiles.json") {
		t.Run(c.Name, func(t *testing.T) {
			s := slices.Clone(c.Sample)
			slices.Sort(s)
			for i, q := range c.Q {
				if got := Percentile(s, q); !approx(got, c.Want[i], 1e-12) {
					t.Errorf("Percentile(q=%v) = %v, numpy says %v", q, got, c.Want[i])
				}
			}
			// Summarize rounds to whole nanoseconds.
			ds := make([]time.Duration, len(c.Sample))
			for i, v := range c.Sample {
				ds[i] = time.Duration(v * 1e3) // values are small; scale to keep rounding invisible
			}
			sum, err := Summarize(ds)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := float64(sum.Mean)/1e3, c.Mean; math.Abs(got-want) > 1e-3 {
				t.Errorf("Mean = %v, numpy says %v", got, want)
			}
			if got, want := float64(sum.Stddev)/1e3, c.Stddev; math.Abs(got-want) > 1e-3 {
				t.Errorf("Stddev = %v, numpy says %v", got, want)
			}
			idx := slices.Index(c.Q, 0.5)
			if got, want := float64(sum.P50)/1e3, c.Want[idx]; math.Abs(got-want) > 1e-3 {
				t.Errorf("P50 = %v, numpy says %v", got, want)
			}
		})
	}
}

func TestPercentileEdges(t *testing.T) {
	if v := Percentile(nil, 0.5); !math.IsNaN(v) {
		t.Errorf("Percentile(empty) = %v, want NaN", v)
	}
	if v := Percentile([]float64{1, 2}, math.NaN()); !math.IsNaN(v) {
		t.Errorf("Percentile(q=NaN) = %v, want NaN", v)
	}
	if v := Percentile([]float64{1, 2}, -1); v != 1 {
		t.Errorf("Percentile(q<0) = %v, want the minimum", v)
	}
	if v := Percentile([]float64{1, 2}, 2); v != 2 {
		t.Errorf("Percentile(q>1) = %v, want the maximum", v)
	}
}

func TestMedianCIMatchesScipyBinomial(t *testing.T) {
	type tc struct {
		N          int       `json:"n"`
		Confidence float64   `json:"confidence"`
		LoOrder    int       `json:"lo_order"`
		HiOrder    int       `json:"hi_order"`
		Coverage   float64   `json:"coverage"`
		Sample     []float64 `json:"sample"`
		Lo         float64   `json:"lo"`
		Hi         float64   `json:"hi"`
	}
	for _, c := range loadCases[tc](t, "median_ci.json") {
		sample := c.Sample
		if sample == nil {
			sample = make([]float64, c.N)
			for i := range sample {
				sample[i] = float64(i)
			}
		}
		s := slices.Clone(sample)
		slices.Sort(s)
		ci := MedianCI(s, c.Confidence)
		if c.LoOrder == 0 {
			if ci.OK {
				t.Errorf("n=%d: got interval [%d, %d], scipy finds none at %v", c.N, ci.LoOrder, ci.HiOrder, c.Confidence)
			}
			continue
		}
		if !ci.OK || ci.LoOrder != c.LoOrder || ci.HiOrder != c.HiOrder {
			t.Errorf("n=%d: orders [%d, %d] (ok=%v), scipy says [%d, %d]", c.N, ci.LoOrder, ci.HiOrder, ci.OK, c.LoOrder, c.HiOrder)
			continue
		}
		if !approx(ci.Coverage, c.Coverage, 1e-9) {
			t.Errorf("n=%d: coverage %v, scipy says %v", c.N, ci.Coverage, c.Coverage)
		}
		if c.Sample != nil && (ci.Lo != c.Lo || ci.Hi != c.Hi) {
			t.Errorf("n=%d: interval [%v, %v], want [%v, %v]", c.N, ci.Lo, ci.Hi, c.Lo, c.Hi)
		}
	}
}

func TestMinRunsForCI(t *testing.T) {
	// benchstat: "need >= 6 samples for confidence interval at level 0.95".
	if got := MinRunsForCI(0.95); got != 6 {
		t.Errorf("MinRunsForCI(0.95) = %d, want 6", got)
	}
	if got := MinRunsForUTest(0.05); got != 4 {
		t.Errorf("MinRunsForUTest(0.05) = %d, want 4", got)
	}
}

// TestMedianCICoverage checks the interval's promise directly: over many
// samples from a known distribution, it holds the true median at least 95%
// of the time (and not absurdly more, which would mean it is too wide).
func TestMedianCICoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{6, 10, 25, 100} {
		hits, trials := 0, 4000
		for i := 0; i < trials; i++ {
			xs := make([]float64, n)
			for j := range xs {
				xs[j] = rng.ExpFloat64() // true median ln 2
			}
			slices.Sort(xs)
			ci := MedianCI(xs, 0.95)
			if ci.Lo <= math.Ln2 && math.Ln2 <= ci.Hi {
				hits++
			}
		}
		rate := float64(hits) / float64(trials)
		_, cov := medianCIOrder(n, 0.95)
		if math.Abs(rate-cov) > 0.015 {
			t.Errorf("n=%d: interval held the median in %.3f of trials, its exact coverage is %.3f", n, rate, cov)
		}
	}
}

func TestUTestMatchesScipy(t *testing.T) {
	type tc struct {
		Name   string    `json:"name"`
		X      []float64 `json:"x"`
		Y      []float64 `json:"y"`
		U1     float64   `json:"u1"`
		P      float64   `json:"p"`
		Method string    `json:"method"`
	}
	for _, c := range loadCases[tc](t, "utest.json") {
		t.Run(c.Name, func(t *testing.T) {
			x0, y0 := slices.Clone(c.X), slices.Clone(c.Y)
			r, err := MannWhitneyU(c.X, c.Y)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(x0, c.X) || !slices.Equal(y0, c.Y) {
				t.Error("MannWhitneyU modified its input")
			}
			if r.U1 != c.U1 {
				t.Errorf("U1 = %v, scipy says %v", r.U1, c.U1)
			}
			if !approx(r.P, c.P, 1e-9) {
				t.Errorf("p = %.15g, scipy says %.15g", r.P, c.P)
			}
			if r.Method != c.Method {
				t.Errorf("method = %s, scipy's auto picks %s", r.Method, c.Method)
			}
			// The test is symmetric: swapping the samples keeps p.
			r2, err := MannWhitneyU(c.Y, c.X)
			if err != nil {
				t.Fatal(err)
			}
			if !approx(r2.P, r.P, 1e-12) || r2.U1 != float64(len(c.X)*len(c.Y))-r.U1 {
				t.Errorf("swapped: p=%v U1=%v, want p=%v U1=%v", r2.P, r2.U1, r.P, float64(len(c.X)*len(c.Y))-r.U1)
			}
		})
	}
}

func TestUTestBadInput(t *testing.T) {
	for _, c := range []struct {
		name string
		x, y []float64
		want string
	}{
		{"empty x", nil, []float64{1}, "at least one value"},
		{"empty y", []float64{1}, nil, "at least one value"},
		{"nan", []float64{1, math.NaN()}, []float64{1}, "NaN"},
	} {
		if _, err := MannWhitneyU(c.x, c.y); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}

// TestUSurvivalSmall checks the exact distribution against enumeration.
func TestUSurvivalSmall(t *testing.T) {
	for m := 1; m <= 4; m++ {
		for n := 1; n <= 5; n++ {
			counts := make([]int, m*n+1)
			total := 0
			// Enumerate which of the m+n ranks belong to the first sample.
			for mask := 0; mask < 1<<(m+n); mask++ {
				if popcount(mask) != m {
					continue
				}
				u, ys := 0, 0
				for r := 0; r < m+n; r++ {
					if mask&(1<<r) != 0 {
						u += ys // this x beats every y below it
					} else {
						ys++
					}
				}
				counts[u]++
				total++
			}
			for u := 0; u <= m*n+1; u++ {
				tail := 0
				for v := u; v < len(counts); v++ {
					tail += counts[v]
				}
				want := float64(tail) / float64(total)
				if got := uSurvival(u, m, n); !approx(got, want, 1e-12) {
					t.Errorf("uSurvival(%d, %d, %d) = %v, enumeration says %v", u, m, n, got, want)
				}
			}
		}
	}
}

func popcount(x int) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

func TestSummarizeWarnings(t *testing.T) {
	mk := func(n int, f func(i int) time.Duration) []time.Duration {
		ds := make([]time.Duration, n)
		for i := range ds {
			ds[i] = f(i)
		}
		return ds
	}
	rng := rand.New(rand.NewPCG(3, 4))
	tight := func(int) time.Duration { return time.Duration(1e6 * (1 + 0.01*rng.NormFloat64())) }
	for _, c := range []struct {
		name    string
		samples []time.Duration
		want    []string // substrings expected among warnings
		none    bool
	}{
		{"too few for CI", mk(5, tight), []string{"need >= 6 runs"}, false},
		{"few for p99", mk(50, tight), []string{"only 50 runs"}, false},
		{"quiet", mk(500, tight), nil, true},
		{"noisy", mk(200, func(int) time.Duration { return time.Duration(1e6 * math.Exp(0.8*rng.NormFloat64())) }), []string{"noisy"}, false},
		{"heavy tail", mk(1000, func(i int) time.Duration {
			if i%20 == 0 {
				return 8 * time.Millisecond
			}
			return tight(i)
		}), []string{"heavy tail"}, false},
	} {
		s, err := Summarize(c.samples)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.none && len(s.Warnings) > 0 {
			t.Errorf("%s: unexpected warnings %q", c.name, s.Warnings)
		}
		for _, w := range c.want {
			found := false
			for _, got := range s.Warnings {
				found = found || strings.Contains(got, w)
			}
			if !found {
				t.Errorf("%s: warnings %q lack %q", c.name, s.Warnings, w)
			}
		}
	}
}

func TestSummarizeBadInput(t *testing.T) {
	if _, err := Summarize(nil); err == nil {
		t.Error("Summarize(nil) succeeded")
	}
	if _, err := Summarize([]time.Duration{1, -1}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("Summarize(negative) err = %v", err)
	}
}

func TestMedianQuickselect(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := 1; n < 60; n++ {
		for trial := 0; trial < 20; trial++ {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = float64(rng.IntN(10)) // many ties
			}
			s := slices.Clone(xs)
			slices.Sort(s)
			if got, want := median(xs), Percentile(s, 0.5); got != want {
				t.Fatalf("median(%v) = %v, want %v", s, got, want)
			}
		}
	}
}
