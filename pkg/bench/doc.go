// Package bench measures TorchScript inference the way a careful performance
// engineer would: load, first inference and warm-up are timed apart from the
// timed runs; every latency is kept; medians come with a distribution-free 95%
// confidence interval; side-by-side comparisons run interleaved in one process
// and are called significant only by a Mann-Whitney U test.
//
// The package is pure Go. What it times is a Target (one inference per Run);
// the time source is a Clock, so tests replace the wall clock with a seeded
// synthetic one (SimClock, SyntheticTarget) and check the statistics' error
// rates instead of hoping the machine is quiet.
//
// Statistical methods, chosen to match golang.org/x/perf's benchstat where it
// has one:
//   - Percentiles interpolate linearly between order statistics (numpy's
//     default "linear" method, R's type 7).
//   - The confidence interval of the median is the symmetric order-statistic
//     interval [x(k), x(n-k+1)] whose exact binomial coverage is the smallest
//     one at or above the requested level. It needs no assumption about the
//     distribution; with fewer than 6 runs no 95% interval exists.
//   - Two targets are compared by the two-sided Mann-Whitney U test: exact
//     null distribution when one sample has at most 8 runs and there are no
//     ties (as scipy's "auto" method), otherwise the normal approximation with
//     tie correction and continuity correction.
//   - The ratio of medians gets a percentile-bootstrap interval (each target's
//     runs resampled independently, fixed seed, 2000 resamples).
package bench
