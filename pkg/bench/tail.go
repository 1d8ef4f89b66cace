package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// MinTailRounds is the fewest rounds a tail interval resamples: with fewer, whole-round
// resamples repeat the same few blocks and the interval means little.
const MinTailRounds = 4

// P95OverP50 is p95/p50 of xs (numpy's linear percentiles; xs is reordered): how far a call's
// tail reaches beyond its median. NaN for an empty sample or a median that is not positive.
func P95OverP50(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	p50 := Percentile(xs, 0.5)
	if p50 <= 0 {
		return math.NaN()
	}
	return Percentile(xs, 0.95) / p50
}

// TailRatioRoundsCI is p95/p50 of the latencies of all rounds, with a percentile bootstrap
// interval that resamples whole rounds (a slow stretch of the machine lands on whole blocks,
// so latencies within a round are not independent draws). Empty rounds are left out; fewer
// than MinTailRounds is an error.
func TailRatioRoundsCI(rounds [][]float64, confidence float64, resamples int, seed uint64) (ratio, lo, hi float64, err error) {
	return TailRatioDiffCI(rounds, nil, confidence, resamples, seed)
}

// TailRatioDiffCI is a's p95/p50 minus b's, with a percentile bootstrap interval over rounds
// resampled in pairs (round i of a ran beside round i of b, so both sides draw the same round
// indices). Pairs where either side is empty are left out. A nil b gives a's p95/p50 and its
// interval alone.
func TailRatioDiffCI(a, b [][]float64, confidence float64, resamples int, seed uint64) (diff, lo, hi float64, err error) {
	if b != nil && len(a) != len(b) {
		return 0, 0, 0, fmt.Errorf("p95/p50 difference: %d rounds against %d; pair the rounds both sides ran in", len(a), len(b))
	}
	if resamples < 1 {
		return 0, 0, 0, fmt.Errorf("p95/p50 interval: resamples = %d: must be positive", resamples)
	}
	if confidence <= 0 || confidence >= 1 {
		return 0, 0, 0, fmt.Errorf("p95/p50 interval: confidence = %v: must be in (0, 1)", confidence)
	}
	var ka, kb [][]float64
	for i := range a {
		if len(a[i]) == 0 || (b != nil && len(b[i]) == 0) {
			continue
		}
		ka = append(ka, a[i])
		if b != nil {
			kb = append(kb, b[i])
		}
	}
	if len(ka) < MinTailRounds {
		return 0, 0, 0, fmt.Errorf("p95/p50 interval: %d rounds with latencies; need at least %d", len(ka), MinTailRounds)
	}
	idx := make([]int, len(ka))
	for i := range idx {
		idx[i] = i
	}
	var buf []float64
	stat := func(idx []int) float64 {
		buf = pooled(buf, ka, idx)
		v := P95OverP50(buf)
		if b != nil {
			buf = pooled(buf, kb, idx)
			v -= P95OverP50(buf)
		}
		return v
	}
	diff = stat(idx)
	if math.IsNaN(diff) {
		return 0, 0, 0, errors.New("p95/p50 interval: a median is not positive; latencies must be positive")
	}
	rng := rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d))
	vals := make([]float64, 0, resamples)
	for range resamples {
		for i := range idx {
			idx[i] = rng.IntN(len(ka))
		}
		if v := stat(idx); !math.IsNaN(v) {
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return diff, 0, 0, errors.New("p95/p50 interval: every resample had a median that is not positive")
	}
	slices.Sort(vals)
	tail := (1 - confidence) / 2
	return diff, Percentile(vals, tail), Percentile(vals, 1-tail), nil
}

// pooled appends the rounds idx of rounds into buf[:0].
func pooled(buf []float64, rounds [][]float64, idx []int) []float64 {
	buf = buf[:0]
	for _, i := range idx {
		buf = append(buf, rounds[i]...)
	}
	return buf
}
