package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Target is one thing to time: each Run is one inference. A Target is used
// from one goroutine at a time.
type Target interface {
	Name() string
	Run() error
}

// Clock is a monotonic time source. Now returns the time elapsed since an
// arbitrary origin fixed for the clock's lifetime.
type Clock interface {
	Now() time.Duration
}

// WallClock is the real monotonic clock (time.Now's monotonic reading).
var WallClock Clock = wallClock{}

var wallOrigin = time.Now()

type wallClock struct{}

func (wallClock) Now() time.Duration { return time.Since(wallOrigin) }

// SimClock is a synthetic clock that only moves when told to. A
// SyntheticTarget advances it by each simulated inference's latency, so the
// whole measurement loop (warm-up, duration limits, interleaving) runs
// unchanged but deterministically. It is safe for concurrent use.
type SimClock struct {
	mu  sync.Mutex
	now time.Duration
}

// Now returns the simulated time.
func (c *SimClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the simulated time forward by d (ignored when negative).
func (c *SimClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now += d
	c.mu.Unlock()
}

// LatencyModel describes a synthetic target's latency distribution:
// log-normal around Median with occasional additive spikes, optionally
// scaled by a machine-wide drift, which is what CPU inference latencies
// look like (a tight body, a tail from preemption and spinning pools, and
// slow phases from frequency or neighbour load).
type LatencyModel struct {
	Median time.Duration
	// Sigma is the log-normal shape: 0.05 is about 5% spread.
	Sigma float64
	// SpikeProb is the chance of a run taking Spike longer.
	SpikeProb float64
	Spike     time.Duration
	// Drift, when set, multiplies each latency by Drift(now); it models a
	// machine state shared by every target on the same clock.
	Drift func(now time.Duration) float64
	// First is the extra latency of the first inference (lazy init,
	// JIT profiling runs).
	First time.Duration
	// FailAt makes the FailAt-th Run (1-based) fail; 0 never fails.
	FailAt int
}

// SyntheticTarget is a Target whose Run advances a SimClock by a latency
// drawn from a LatencyModel with a seeded generator.
type SyntheticTarget struct {
	name  string
	clock *SimClock
	model LatencyModel
	rng   *rand.Rand
	calls int
}

// NewSyntheticTarget returns a synthetic target drawing from model with the
// given seed.
func NewSyntheticTarget(name string, clock *SimClock, model LatencyModel, seed uint64) *SyntheticTarget {
	return &SyntheticTarget{
		name:  name,
		clock: clock,
		model: model,
		rng:   rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
	}
}

// Name returns the target's name.
func (t *SyntheticTarget) Name() string { return t.name }

// Run simulates one inference.
func (t *SyntheticTarget) Run() error {
	t.calls++
	if t.model.FailAt > 0 && t.calls == t.model.FailAt {
		return fmt.Errorf("synthetic failure at run %d", t.calls)
	}
	d := float64(t.model.Median) * math.Exp(t.model.Sigma*t.rng.NormFloat64())
	if t.model.SpikeProb > 0 && t.rng.Float64() < t.model.SpikeProb {
		d += float64(t.model.Spike)
	}
	if t.calls == 1 {
		d += float64(t.model.First)
	}
	if t.model.Drift != nil {
		d *= t.model.Drift(t.clock.Now())
	}
	t.clock.Advance(time.Duration(d))
	return nil
}
