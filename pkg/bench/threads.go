package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// ThreadChoice is the outcome of ChooseThreads.
type ThreadChoice struct {
	Threads int             `json:"threads"`
	Stats   map[int]Summary `json:"stats"`
	// Rounds is how many interleaved rounds were measured.
	Rounds int `json:"rounds"`
	// RunnerUp is the next fastest count (0 with a single count); Ratio is its p50 over the
	// chosen count's, as the median of per-round ratios, with a 95% interval over rounds
	// (RatioLo, RatioHi).
	RunnerUp int     `json:"runner_up,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	RatioLo  float64 `json:"ratio_ci_lo,omitempty"`
	RatioHi  float64 `json:"ratio_ci_hi,omitempty"`
	// Decided is false when the machine was too noisy to separate the counts within the round
	// limit: the interval of the ratio still straddles 1 and is wider than the tie band. The
	// count faster in the median round is kept all the same; Why says so.
	Decided bool `json:"decided"`
	// Why lists each count's p50 and p95 and how the choice was made, for reports.
	Why string `json:"why"`
}

// ThreadOptions bound ChooseThreadsWith's measurement.
type ThreadOptions struct {
	// MinRounds are always measured (at least minRatioRounds, for an interval that means
	// something); MaxRounds bound the extra rounds taken while the counts cannot be told apart
	// (0: 4 x MinRounds).
	MinRounds, MaxRounds int
	// Block is the number of timed runs per count per round.
	Block int
	// MaxTime stops adding rounds after this much measuring (0: no limit).
	MaxTime time.Duration
	// Tie is the relative difference under which two counts whose interval reaches 1 are
	// treated as equal, and the fewer threads kept (0: 2%).
	Tie float64
	// SeparatedRounds, when 2 or more, ends the measurement before MinRounds, from that many
	// rounds on, once every timed run at one count was faster than every timed run at each
	// other count: with equal speeds, two counts' runs over 2 rounds of blocks of 5 fall
	// apart that way with probability 2/C(20,10), about 1 in 92,000.
	SeparatedRounds int
}

// minRatioRounds is the fewest rounds for which the order-statistic interval of a median
// (the smallest and largest of 6 ratios) covers it with >= 95% probability.
const minRatioRounds = 6

// ChooseThreads measures run at each thread count and returns the fastest at p50, with
// at least rounds interleaved rounds of block runs per count, and up to four times as many
// while the counts cannot be told apart (see ChooseThreadsWith).
func ChooseThreads(counts []int, set func(n int) error, run func() error, rounds, block int, c Clock) (ThreadChoice, error) {
	if rounds < 1 || block < 1 {
		return ThreadChoice{}, fmt.Errorf("choose threads: rounds (%d) and block (%d) must be >= 1", rounds, block)
	}
	return ChooseThreadsWith(counts, set, run, ThreadOptions{MinRounds: rounds, Block: block, MaxTime: 30 * time.Second}, c)
}

// ChooseThreadsWith measures run at each thread count and returns the fastest at p50, paired
// by rounds. Thread counts are switched in blocks (set, one unmeasured run to settle the OpenMP
// pool, then Block timed runs), the blocks interleaved over rounds so that machine noise hits
// every count alike. After MinRounds it compares the fastest count with the runner-up by the
// per-round ratio of block medians: it stops when the ratio's 95% interval excludes 1 (one is
// faster, and is kept however small the difference) or reaches 1 within the tie band (equal:
// the fewer threads are kept, they leave a core free), and otherwise adds rounds up to
// MaxRounds or MaxTime, then reports that the machine was too noisy to decide and keeps the
// count that was faster in the median round (see decide). Measured here: a small transformer
// is faster on 1 thread than on 2, resnet18 the other way round, and one short round on a
// shared machine picked 1 thread for mobilenet_v2 where 2 were faster.
func ChooseThreadsWith(counts []int, set func(n int) error, run func() error, o ThreadOptions, c Clock) (ThreadChoice, error) {
	if len(counts) == 0 {
		return ThreadChoice{}, errors.New("choose threads: no thread counts to try")
	}
	if o.MinRounds < 1 || o.Block < 1 {
		return ThreadChoice{}, fmt.Errorf("choose threads: rounds (%d) and block (%d) must be >= 1", o.MinRounds, o.Block)
	}
	if c == nil {
		c = WallClock
	}
	tie := o.Tie
	if tie <= 0 {
		tie = 0.02
	}
	minRounds := o.MinRounds
	if len(counts) > 1 {
		minRounds = max(minRounds, minRatioRounds)
	}
	maxRounds := o.MaxRounds
	if maxRounds < minRounds {
		maxRounds = 4 * minRounds
	}
	samples := map[int][]time.Duration{}
	blockMed := map[int][]float64{}
	start := c.Now()
	ch := ThreadChoice{Stats: map[int]Summary{}}
	for r := 0; r < maxRounds; r++ {
		for _, n := range counts {
			if err := set(n); err != nil {
				return ThreadChoice{}, err
			}
			if err := run(); err != nil {
				return ThreadChoice{}, err
			}
			blk := make([]float64, 0, o.Block)
			for k := 0; k < o.Block; k++ {
				t0 := c.Now()
				if err := run(); err != nil {
					return ThreadChoice{}, err
				}
				d := c.Now() - t0
				samples[n] = append(samples[n], d)
				blk = append(blk, float64(d))
			}
			slices.Sort(blk)
			blockMed[n] = append(blockMed[n], Percentile(blk, 0.5))
		}
		ch.Rounds = r + 1
		if ch.Rounds < minRounds {
			if o.SeparatedRounds >= 2 && ch.Rounds >= o.SeparatedRounds && separated(counts, samples) >= 0 && decide(&ch, counts, samples, blockMed, tie) {
				break
			}
			continue
		}
		if len(counts) == 1 || decide(&ch, counts, samples, blockMed, tie) {
			break
		}
		if o.MaxTime > 0 && c.Now()-start >= o.MaxTime {
			break
		}
	}
	var parts []string
	for _, n := range counts {
		s, err := Summarize(samples[n])
		if err != nil {
			return ThreadChoice{}, err
		}
		ch.Stats[n] = s
		parts = append(parts, fmt.Sprintf("%d: p50 %s p95 %s", n, FormatDuration(s.P50), FormatDuration(s.P95)))
	}
	if len(counts) == 1 {
		ch.Threads, ch.Decided = counts[0], true
	} else if !decide(&ch, counts, samples, blockMed, tie) {
		parts = append(parts, fmt.Sprintf("too noisy to decide after %d rounds: %d/%d threads p50 ratio %.3f (95%% CI %.3f-%.3f); kept %d, faster in the median round",
			ch.Rounds, ch.RunnerUp, ch.Threads, ch.Ratio, ch.RatioLo, ch.RatioHi, ch.Threads))
	} else if ch.Rounds < minRounds {
		parts = append(parts, fmt.Sprintf("%d/%d threads p50 ratio %.3f (%d rounds: every run at %d faster than every run at the other counts)",
			ch.RunnerUp, ch.Threads, ch.Ratio, ch.Rounds, ch.Threads))
	} else {
		parts = append(parts, fmt.Sprintf("%d/%d threads p50 ratio %.3f (95%% CI %.3f-%.3f, %d rounds)",
			ch.RunnerUp, ch.Threads, ch.Ratio, ch.RatioLo, ch.RatioHi, ch.Rounds))
	}
	ch.Why = strings.Join(parts, "; ")
	return ch, set(ch.Threads)
}

// decide fills ch with the fastest count, the runner-up and their per-round ratio, and says
// whether the difference is settled: the interval excludes 1 (the faster count wins, however
// small the difference: more threads measured faster are never given up for fewer), or it
// reaches 1 but lies within the tie band (equal: the fewer threads win).
//
// The counts are ranked by the same paired figure the interval is built on: each count's
// block median over the first count's in the same round, the median over rounds. Medians of
// all samples pooled could rank them the other way when the load moved between rounds: an
// optimize run beside another benchmark kept 1 thread for an INT8 resnet18 on a pooled p50 of
// 5.68 against 5.73 ms while 2 threads were faster in the median round (ratio 0.918), and 2
// threads were 1.6x faster on the quiet machine.
func decide(ch *ThreadChoice, counts []int, samples map[int][]time.Duration, blockMed map[int][]float64, tie float64) bool {
	score := pairedScores(counts, samples, blockMed)
	order := slices.Clone(counts)
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case score[a] < score[b]:
			return -1
		case score[a] > score[b]:
			return 1
		}
		return a - b
	})
	best, next := order[0], order[1]
	ratios := make([]float64, 0, len(blockMed[best]))
	for i, b := range blockMed[best] {
		if b > 0 {
			ratios = append(ratios, blockMed[next][i]/b)
		}
	}
	if len(ratios) == 0 {
		// A clock too coarse to see the runs: nothing to separate the counts by.
		ch.Threads, ch.RunnerUp, ch.Ratio, ch.RatioLo, ch.RatioHi, ch.Decided = best, next, 1, 1, 1, false
		return false
	}
	ch.Threads, ch.RunnerUp = best, next
	ch.Ratio, ch.RatioLo, ch.RatioHi = medianInterval(ratios)
	switch {
	case ch.RatioLo > 1:
		// Faster beyond doubt, however little: never fewer threads when more were measured
		// faster.
		ch.Decided = true
	case ch.RatioLo >= 1-tie && ch.RatioHi <= 1+tie:
		ch.Decided = true
		if next < best {
			// Equal within the band: fewer threads leave a core to the rest of the machine.
			ch.Threads, ch.RunnerUp = next, best
			ch.Ratio, ch.RatioLo, ch.RatioHi = 1/ch.Ratio, 1/ch.RatioHi, 1/ch.RatioLo
		}
	default:
		ch.Decided = false
	}
	return ch.Decided
}

// pairedScores ranks counts by the median over rounds of each count's block median divided by
// the first count's in the same round. Without any round to pair (a clock too coarse to see the
// runs) it falls back on each count's median over all samples.
func pairedScores(counts []int, samples map[int][]time.Duration, blockMed map[int][]float64) map[int]float64 {
	score := map[int]float64{}
	ref := blockMed[counts[0]]
	for _, n := range counts {
		var rs []float64
		for i, b := range ref {
			if b > 0 && i < len(blockMed[n]) {
				rs = append(rs, blockMed[n][i]/b)
			}
		}
		if len(rs) == 0 {
			score = map[int]float64{}
			break
		}
		slices.Sort(rs)
		score[n] = Percentile(rs, 0.5)
	}
	if len(score) == len(counts) {
		return score
	}
	for _, n := range counts {
		xs := Floats(samples[n])
		slices.Sort(xs)
		score[n] = Percentile(xs, 0.5)
	}
	return score
}

// separated is the count whose every run was faster than every run at each other count (-1:
// none).
func separated(counts []int, samples map[int][]time.Duration) int {
	if len(counts) < 2 {
		return -1
	}
	for _, a := range counts {
		if len(samples[a]) == 0 {
			return -1
		}
		slowest := slices.Max(samples[a])
		apart := true
		for _, b := range counts {
			if b != a && (len(samples[b]) == 0 || slices.Min(samples[b]) <= slowest) {
				apart = false
				break
			}
		}
		if apart {
			return a
		}
	}
	return -1
}

// medianInterval returns the median of xs and a distribution-free 95% interval for it from
// order statistics (normal approximation to the binomial); with fewer than minRatioRounds
// values the interval is the whole range.
func medianInterval(xs []float64) (m, lo, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	k := 0
	if n >= minRatioRounds {
		k = max(0, int(math.Floor(float64(n)/2-0.98*math.Sqrt(float64(n)))))
	}
	return Percentile(s, 0.5), s[k], s[n-1-k]
}

// ThreadCandidates are the counts worth trying on a machine with cores usable cores: 1, half
// and all.
func ThreadCandidates(cores int) []int {
	switch {
	case cores <= 1:
		return []int{1}
	case cores <= 3:
		return []int{1, cores}
	}
	return []int{1, cores / 2, cores}
}
