package bench

import (
	"math"
	"math/rand/v2"
	"testing"
)

// lognormalRounds draws rounds of lognormal latencies with median m and shape sigma: their true
// p95/p50 is exp(1.645 sigma).
func lognormalRounds(r *rand.Rand, rounds, n int, m, sigma float64) [][]float64 {
	out := make([][]float64, rounds)
	for i := range out {
		for range n {
			out[i] = append(out[i], m*math.Exp(sigma*r.NormFloat64()))
		}
	}
	return out
}

func TestP95OverP50MatchesNumpy(t *testing.T) {
	// numpy.percentile([1..20], [50, 95]) = 10.5, 19.05.
	xs := make([]float64, 20)
	for i := range xs {
		xs[len(xs)-1-i] = float64(i + 1)
	}
	if got, want := P95OverP50(xs), 19.05/10.5; math.Abs(got-want) > 1e-12 {
		t.Errorf("P95OverP50 = %v, want %v", got, want)
	}
	if !math.IsNaN(P95OverP50(nil)) || !math.IsNaN(P95OverP50([]float64{0, 0, 1})) {
		t.Error("empty sample or zero median: want NaN")
	}
}

// TestTailRatioRoundsCICoverage: over many independent runs, the interval holds the true
// p95/p50 about as often as it says (whole-round bootstraps with 12 rounds run a little narrow).
func TestTailRatioRoundsCICoverage(t *testing.T) {
	const trials, sigma = 120, 0.2
	truth := math.Exp(1.6448536269514722 * sigma)
	r := rand.New(rand.NewPCG(3, 4))
	hit := 0
	for i := range trials {
		rounds := lognormalRounds(r, 12, 40, 1e6, sigma)
		v, lo, hi, err := TailRatioRoundsCI(rounds, Confidence, 300, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		if !(lo <= v && v <= hi) {
			t.Fatalf("trial %d: estimate %v outside its interval [%v, %v]", i, v, lo, hi)
		}
		if lo <= truth && truth <= hi {
			hit++
		}
	}
	if cov := float64(hit) / trials; cov < 0.8 {
		t.Errorf("coverage %.2f of the true p95/p50 %.3f: want about 0.95 (at least 0.8)", cov, truth)
	}
}

// TestTailRatioDiffCI: a heavier tail on one side shows as a difference whose interval excludes
// 0; the same distribution on both sides gives an interval around 0. Rounds are paired: a slow
// round that slows both sides does not widen the difference.
func TestTailRatioDiffCI(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	light := lognormalRounds(r, 12, 60, 1e6, 0.05)
	heavy := lognormalRounds(r, 12, 60, 1e6, 0.3)
	d, lo, hi, err := TailRatioDiffCI(heavy, light, Confidence, 500, 1)
	if err != nil {
		t.Fatal(err)
	}
	if lo <= 0 || !(lo <= d && d <= hi) {
		t.Errorf("heavy - light = %v [%v, %v]: want an interval above 0 around the difference", d, lo, hi)
	}
	same := lognormalRounds(r, 12, 60, 1e6, 0.05)
	if _, lo, hi, err := TailRatioDiffCI(same, light, Confidence, 500, 1); err != nil || lo > 0 || hi < 0 {
		t.Errorf("same distributions: [%v, %v], %v: want an interval around 0", lo, hi, err)
	}
	if _, _, _, err := TailRatioDiffCI(light[:3], light[:3], Confidence, 100, 1); err == nil {
		t.Error("3 rounds: want an error (too few to resample)")
	}
	if _, _, _, err := TailRatioDiffCI(light, light[:5], Confidence, 100, 1); err == nil {
		t.Error("unpaired rounds: want an error")
	}
	if _, _, _, err := TailRatioRoundsCI(light, 1.5, 100, 1); err == nil {
		t.Error("confidence 1.5: want an error")
	}
}
