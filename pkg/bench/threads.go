package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ThreadChoice is the outcome of ChooseThreads.
type ThreadChoice struct {
	Threads int             `json:"threads"`
	Stats   map[int]Summary `json:"stats"`
	// Why lists each count's p50 and p95, for reports.
	Why string `json:"why"`
}

// ChooseThreads measures run at each thread count and returns the one with the lowest median.
// Thread counts are switched in blocks (set, one unmeasured run to settle the OpenMP pool,
// then block timed runs), the blocks interleaved over rounds so that machine noise hits every
// count alike. Measured here: a small transformer is faster on 1 thread than on 2 with passive
// waiting, resnet18 the other way round; no fixed rule gets both right.
func ChooseThreads(counts []int, set func(n int) error, run func() error, rounds, block int, c Clock) (ThreadChoice, error) {
	if len(counts) == 0 {
		return ThreadChoice{}, errors.New("choose threads: no thread counts to try")
	}
	if rounds < 1 || block < 1 {
		return ThreadChoice{}, fmt.Errorf("choose threads: rounds (%d) and block (%d) must be >= 1", rounds, block)
	}
	if c == nil {
		c = WallClock
	}
	samples := map[int][]time.Duration{}
	for r := 0; r < rounds; r++ {
		for _, n := range counts {
			if err := set(n); err != nil {
				return ThreadChoice{}, err
			}
			if err := run(); err != nil {
				return ThreadChoice{}, err
			}
			for k := 0; k < block; k++ {
				t0 := c.Now()
				if err := run(); err != nil {
					return ThreadChoice{}, err
				}
				samples[n] = append(samples[n], c.Now()-t0)
			}
		}
	}
	ch := ThreadChoice{Stats: map[int]Summary{}}
	var parts []string
	for _, n := range counts {
		s, err := Summarize(samples[n])
		if err != nil {
			return ThreadChoice{}, err
		}
		ch.Stats[n] = s
		parts = append(parts, fmt.Sprintf("%d: p50 %s p95 %s", n, FormatDuration(s.P50), FormatDuration(s.P95)))
		if ch.Threads == 0 || s.P50 < ch.Stats[ch.Threads].P50 {
			ch.Threads = n
		}
	}
	ch.Why = strings.Join(parts, "; ")
	return ch, set(ch.Threads)
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
