package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// ProcessResult is one setting's latencies measured in several processes that took turns in
// the same rounds: Blocks[p][r] are the latencies process p timed in round r. Settings read
// when a process starts (the OpenMP wait policy, the allocator) can only be compared between
// processes, and processes of the same settings differ by themselves (where their memory
// landed, which CPU their threads settled on): one process per setting makes every verdict a
// coin toss, so each setting runs in several and the interval of a ratio spans them
// (ProcessRatioCI).
type ProcessResult struct {
	Name   string
	Blocks [][][]time.Duration
}

// Processes is the number of processes.
func (r *ProcessResult) Processes() int { return len(r.Blocks) }

// Samples returns every latency of every process.
func (r *ProcessResult) Samples() []time.Duration {
	var out []time.Duration
	for _, p := range r.Blocks {
		for _, b := range p {
			out = append(out, b...)
		}
	}
	return out
}

// SplitRounds cuts one process's latencies, taken runs per round in order, into rounds.
func SplitRounds(lat []time.Duration, runs int) ([][]time.Duration, error) {
	if runs < 1 || len(lat) == 0 || len(lat)%runs != 0 {
		return nil, fmt.Errorf("split rounds: %d latencies in rounds of %d", len(lat), runs)
	}
	out := make([][]time.Duration, 0, len(lat)/runs)
	for i := 0; i < len(lat); i += runs {
		out = append(out, lat[i:i+runs])
	}
	return out, nil
}

// joinProcesses returns the processes of a and b as one setting named as a.
func joinProcesses(a, b *ProcessResult) *ProcessResult {
	return &ProcessResult{Name: a.Name, Blocks: append(slices.Clone(a.Blocks), b.Blocks...)}
}

// blockMedians returns, per process and round, the median latency of the block; it checks
// that every process has the same number of rounds, each with latencies.
func (r *ProcessResult) blockMedians() ([][]float64, error) {
	if r == nil || len(r.Blocks) == 0 {
		return nil, errors.New("no processes")
	}
	out := make([][]float64, len(r.Blocks))
	for p, rounds := range r.Blocks {
		if len(rounds) == 0 || len(rounds) != len(r.Blocks[0]) {
			return nil, fmt.Errorf("%s: process %d has %d rounds, process 0 %d", r.Name, p+1, len(rounds), len(r.Blocks[0]))
		}
		out[p] = make([]float64, len(rounds))
		for i, b := range rounds {
			if len(b) == 0 {
				return nil, fmt.Errorf("%s: process %d round %d has no latencies", r.Name, p+1, i+1)
			}
			out[p][i] = median(Floats(b))
		}
	}
	return out, nil
}

// processLevel is a setting's typical latency over the processes procs and the rounds
// rounds (indices, repeats allowed): per process the median of its rounds' block medians,
// then the median over the processes. buf holds len(rounds) values, vals len(procs).
func processLevel(bm [][]float64, procs, rounds []int, buf, vals []float64) float64 {
	for k, p := range procs {
		for j, r := range rounds {
			buf[j] = bm[p][r]
		}
		vals[k] = median(buf)
	}
	return median(vals)
}

// ProcessRatioCI returns other's level over base's (the median over processes of each
// process's median block median) and a 95% bootstrap interval that resamples both the
// rounds (the same rounds for both sides: they were measured at the same times) and each
// side's processes. The interval therefore spans the differences between processes of the
// same setting, not only the noise within one process; with two processes a side it reaches
// roughly from the slower process to the faster.
func ProcessRatioCI(base, other *ProcessResult, resamples int, seed uint64) (ratio, lo, hi float64, err error) {
	bb, err := base.blockMedians()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("ratio over processes: %w", err)
	}
	bo, err := other.blockMedians()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("ratio over processes: %w", err)
	}
	rounds := len(bb[0])
	if len(bo[0]) != rounds {
		return 0, 0, 0, fmt.Errorf("ratio over processes: %s has %d rounds, %s %d", base.Name, rounds, other.Name, len(bo[0]))
	}
	if resamples < 1 {
		return 0, 0, 0, fmt.Errorf("ratio over processes: resamples = %d: must be positive", resamples)
	}
	idx := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	buf := make([]float64, rounds)
	vb, vo := make([]float64, len(bb)), make([]float64, len(bo))
	pb, po, rr := idx(len(bb)), idx(len(bo)), idx(rounds)
	lb := processLevel(bb, pb, rr, buf, vb)
	if lb <= 0 {
		return 0, 0, 0, fmt.Errorf("ratio over processes: %s's median is %v; latencies must be positive", base.Name, lb)
	}
	ratio = processLevel(bo, po, rr, buf, vo) / lb
	rng := rand.New(rand.NewPCG(seed, 0x5851f42d4c957f2d))
	ratios := make([]float64, 0, resamples)
	for range resamples {
		for i := range rr {
			rr[i] = rng.IntN(rounds)
		}
		for i := range pb {
			pb[i] = rng.IntN(len(bb))
		}
		for i := range po {
			po[i] = rng.IntN(len(bo))
		}
		if l := processLevel(bb, pb, rr, buf, vb); l > 0 {
			ratios = append(ratios, processLevel(bo, po, rr, buf, vo)/l)
		}
	}
	if len(ratios) == 0 {
		return ratio, 0, 0, errors.New("ratio over processes: every resampled baseline was 0")
	}
	slices.Sort(ratios)
	tail := (1 - Confidence) / 2
	return ratio, Percentile(ratios, tail), Percentile(ratios, 1-tail), nil
}
