package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// WindowRate is the items per second that streams started together completed while all of
// them ran: streams[s] holds stream s's consecutive call latencies (ns). The window ends when
// the first stream finishes its calls, since after that the others run on a less loaded
// machine and would credit the configuration with a speed it does not have at full load. Each
// stream counts the calls it completed within the window, plus the fraction of the one in
// flight at its end. Time between calls that the streams did not time is not in the window.
func WindowRate(streams [][]float64) (rate, windowNs float64, err error) {
	if len(streams) == 0 {
		return 0, 0, errors.New("window rate: no streams")
	}
	windowNs = math.Inf(1)
	for s, lat := range streams {
		if len(lat) == 0 {
			return 0, 0, fmt.Errorf("window rate: stream %d has no calls; every stream must time at least one", s+1)
		}
		var total float64
		for _, v := range lat {
			if !(v > 0) || math.IsInf(v, 0) {
				return 0, 0, fmt.Errorf("window rate: stream %d: latency %v; latencies are positive", s+1, v)
			}
			total += v
		}
		windowNs = min(windowNs, total)
	}
	var items float64
	for _, lat := range streams {
		var t float64
		for _, v := range lat {
			if t+v > windowNs {
				items += (windowNs - t) / v
				break
			}
			t += v
			items++
		}
	}
	return items / (windowNs / 1e9), windowNs, nil
}

// PairedRatioOfMediansCI is median(other)/median(base) of per-round figures (items per
// second, one per round) with a percentile bootstrap interval that resamples round indices in
// pairs: round i of other ran in the same stretch of the machine as round i of base. Rounds
// where either side is NaN are left out; fewer than MinTailRounds is an error.
func PairedRatioOfMediansCI(base, other []float64, confidence float64, resamples int, seed uint64) (ratio, lo, hi float64, err error) {
	if len(base) != len(other) {
		return 0, 0, 0, fmt.Errorf("paired ratio: %d rounds against %d; pair the rounds both sides ran in", len(base), len(other))
	}
	if resamples < 1 {
		return 0, 0, 0, fmt.Errorf("paired ratio: resamples = %d: must be positive", resamples)
	}
	if confidence <= 0 || confidence >= 1 {
		return 0, 0, 0, fmt.Errorf("paired ratio: confidence = %v: must be in (0, 1)", confidence)
	}
	var a, b []float64
	for i := range base {
		if math.IsNaN(base[i]) || math.IsNaN(other[i]) {
			continue
		}
		a, b = append(a, base[i]), append(b, other[i])
	}
	if len(a) < MinTailRounds {
		return 0, 0, 0, fmt.Errorf("paired ratio: %d paired rounds; want at least %d", len(a), MinTailRounds)
	}
	ma := median(slices.Clone(a))
	if !(ma > 0) {
		return 0, 0, 0, fmt.Errorf("paired ratio: baseline median is %v; want a positive figure", ma)
	}
	ratio = median(slices.Clone(b)) / ma
	rng := rand.New(rand.NewPCG(seed, 0x853c49e6748fea9b))
	ra, rb := make([]float64, len(a)), make([]float64, len(b))
	ratios := make([]float64, 0, resamples)
	for range resamples {
		for j := range ra {
			k := rng.IntN(len(a))
			ra[j], rb[j] = a[k], b[k]
		}
		if m := median(ra); m > 0 {
			ratios = append(ratios, median(rb)/m)
		}
	}
	if len(ratios) == 0 {
		return ratio, 0, 0, errors.New("paired ratio: every resampled baseline median was 0")
	}
	slices.Sort(ratios)
	tail := (1 - confidence) / 2
	return ratio, Percentile(ratios, tail), Percentile(ratios, 1-tail), nil
}
