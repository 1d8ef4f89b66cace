package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Confidence is the level of every interval this package reports.
const Confidence = 0.95

// Alpha is the significance level of the U test behind a verdict.
const Alpha = 0.05

// Noise thresholds behind the warnings in Summary.Warnings. They are
// deliberately loose: a warning should mean "do not trust this figure", not
// "the machine is not perfectly quiet".
const (
	// NoisyCIFraction: a median whose CI half-width exceeds this fraction
	// of the median is too uncertain to compare against a few-percent change.
	NoisyCIFraction = 0.05
	// TailRatio: p99 above this multiple of the median means a heavy tail
	// (lock contention, spinning OpenMP pools, frequency changes).
	TailRatio = 2.0
)

// Percentile returns the p-th quantile (0 <= p <= 1) of sorted, interpolating
// linearly between the two nearest order statistics (numpy's "linear"
// method). It returns NaN for an empty sample.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 || math.IsNaN(p) {
		return math.NaN()
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 1 {
		return sorted[n-1]
	}
	h := float64(n-1) * p
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	frac := h - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// MedianInterval is a distribution-free confidence interval of a median.
type MedianInterval struct {
	// OK is false when the sample is too small for any interval at the
	// requested level; Lo and Hi are then meaningless (zero).
	OK bool
	// LoOrder and HiOrder are the 1-based order statistics bounding the
	// interval: Lo = sorted[LoOrder-1], Hi = sorted[HiOrder-1].
	LoOrder, HiOrder int
	Lo, Hi           float64
	// Coverage is the exact binomial coverage of [LoOrder, HiOrder], at
	// or above the requested level.
	Coverage float64
}

// MedianCI returns the symmetric order-statistic confidence interval of the
// median of sorted: the narrowest [x(k), x(n-k+1)] whose coverage
// 1 - 2*P(B <= k-1), B ~ Binomial(n, 1/2), is at least confidence.
func MedianCI(sorted []float64, confidence float64) MedianInterval {
	n := len(sorted)
	k, cov := medianCIOrder(n, confidence)
	if k == 0 {
		return MedianInterval{}
	}
	return MedianInterval{
		OK:       true,
		LoOrder:  k,
		HiOrder:  n - k + 1,
		Lo:       sorted[k-1],
		Hi:       sorted[n-k],
		Coverage: cov,
	}
}

// medianCIOrder returns the largest k >= 1 with coverage >= confidence and
// that coverage, or (0, 0) when even k = 1 (the whole range) falls short.
func medianCIOrder(n int, confidence float64) (int, float64) {
	if n < 1 {
		return 0, 0
	}
	// Walk the lower tail of Binomial(n, 1/2) in log space so that large
	// n (a 10 s run of a 50 us model is 200k samples) neither overflows
	// nor underflows.
	lgN1, _ := math.Lgamma(float64(n + 1))
	logHalfN := float64(n) * math.Log(0.5)
	pmf := func(i int) float64 {
		a, _ := math.Lgamma(float64(i + 1))
		b, _ := math.Lgamma(float64(n - i + 1))
		return math.Exp(lgN1 - a - b + logHalfN)
	}
	// cdf = P(B <= k-1); interval [x(k), x(n-k+1)] covers 1 - 2*cdf.
	k, cdf := 0, 0.0
	for {
		next := cdf + pmf(k) // P(B <= k), the tail if we moved to k+1
		cov := 1 - 2*next
		if k+1 > (n+1)/2 || cov < confidence {
			break
		}
		k++
		cdf = next
	}
	if k == 0 {
		return 0, 0
	}
	return k, 1 - 2*cdf
}

// MinRunsForCI returns the fewest runs that give a median interval at the
// given confidence (6 at 95%).
func MinRunsForCI(confidence float64) int {
	for n := 1; n < 1000; n++ {
		if k, _ := medianCIOrder(n, confidence); k > 0 {
			return n
		}
	}
	return 1000
}

// Summary describes one latency distribution. Durations are per inference
// (per batch when the input is batched).
type Summary struct {
	N      int           `json:"n"`
	Min    time.Duration `json:"min_ns"`
	P50    time.Duration `json:"p50_ns"`
	P90    time.Duration `json:"p90_ns"`
	P95    time.Duration `json:"p95_ns"`
	P99    time.Duration `json:"p99_ns"`
	P999   time.Duration `json:"p999_ns"`
	Max    time.Duration `json:"max_ns"`
	Mean   time.Duration `json:"mean_ns"`
	Stddev time.Duration `json:"stddev_ns"`
	// MedianLo and MedianHi bound the 95% confidence interval of P50;
	// both are zero when MedianCIOK is false (too few runs).
	MedianLo       time.Duration `json:"median_ci_lo_ns"`
	MedianHi       time.Duration `json:"median_ci_hi_ns"`
	MedianCIOK     bool          `json:"median_ci_ok"`
	MedianCoverage float64       `json:"median_ci_coverage"`
	// Throughput is inferences per second of one caller running back to
	// back: 1 / mean latency.
	Throughput float64 `json:"throughput_per_s"`
	// Warnings say which figures not to trust and why.
	Warnings []string `json:"warnings,omitempty"`
}

// CIHalfWidthFraction returns half the width of the median interval as a
// fraction of the median, or +Inf when there is no interval.
func (s Summary) CIHalfWidthFraction() float64 {
	if !s.MedianCIOK || s.P50 <= 0 {
		return math.Inf(1)
	}
	return float64(s.MedianHi-s.MedianLo) / 2 / float64(s.P50)
}

// Summarize computes a Summary of samples (not modified). It returns an
// error for an empty sample or a negative latency, which only a broken clock
// produces.
func Summarize(samples []time.Duration) (Summary, error) {
	if len(samples) == 0 {
		return Summary{}, fmt.Errorf("summarize: no samples; run at least one timed inference")
	}
	xs := make([]float64, len(samples))
	for i, d := range samples {
		if d < 0 {
			return Summary{}, fmt.Errorf("summarize: sample %d is negative (%v): the clock went backwards", i, d)
		}
		xs[i] = float64(d)
	}
	slices.Sort(xs)
	return summarizeSorted(xs), nil
}

func summarizeSorted(xs []float64) Summary {
	n := len(xs)
	dur := func(v float64) time.Duration { return time.Duration(math.Round(v)) }
	var sum float64
	for _, v := range xs {
		sum += v
	}
	mean := sum / float64(n)
	var ss float64
	for _, v := range xs {
		ss += (v - mean) * (v - mean)
	}
	sd := 0.0
	if n > 1 {
		sd = math.Sqrt(ss / float64(n-1))
	}
	s := Summary{
		N:      n,
		Min:    dur(xs[0]),
		P50:    dur(Percentile(xs, 0.50)),
		P90:    dur(Percentile(xs, 0.90)),
		P95:    dur(Percentile(xs, 0.95)),
		P99:    dur(Percentile(xs, 0.99)),
		P999:   dur(Percentile(xs, 0.999)),
		Max:    dur(xs[n-1]),
		Mean:   dur(mean),
		Stddev: dur(sd),
	}
	if mean > 0 {
		s.Throughput = 1e9 / mean
	}
	ci := MedianCI(xs, Confidence)
	if ci.OK {
		s.MedianCIOK = true
		s.MedianLo, s.MedianHi = dur(ci.Lo), dur(ci.Hi)
		s.MedianCoverage = ci.Coverage
	}
	s.Warnings = summaryWarnings(s)
	return s
}

// summaryWarnings follows benchstat: say when the sample cannot support the
// figures printed next to it, rather than silently printing them.
func summaryWarnings(s Summary) []string {
	var w []string
	if !s.MedianCIOK {
		w = append(w, fmt.Sprintf("need >= %d runs for a %.0f%% confidence interval of the median (have %d)",
			MinRunsForCI(Confidence), Confidence*100, s.N))
	} else if f := s.CIHalfWidthFraction(); f > NoisyCIFraction {
		w = append(w, fmt.Sprintf("noisy: the median's %.0f%% interval is ±%.1f%% (> %.0f%%); run longer or quiet the machine",
			Confidence*100, f*100, NoisyCIFraction*100))
	}
	if s.N < 100 {
		w = append(w, fmt.Sprintf("only %d runs: p99 and p99.9 are close to the maximum; use >= 100 runs for p99, >= 1000 for p99.9", s.N))
	} else if s.P50 > 0 && float64(s.P99) > TailRatio*float64(s.P50) {
		w = append(w, fmt.Sprintf("heavy tail: p99 is %.1fx the median (> %.0fx); check thread oversubscription and OMP_WAIT_POLICY",
			float64(s.P99)/float64(s.P50), TailRatio))
	}
	return w
}
