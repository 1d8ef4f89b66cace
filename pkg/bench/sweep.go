package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Point is one configuration of a sweep.
type Point struct {
	Batch   int `json:"batch"`
	Threads int `json:"threads"`
	// Streams counts concurrent streams, or pinned instances when the
	// sweep's RunFunc launches processes (pkg/runenv).
	Streams int `json:"streams"`
}

// CPUs is the number of CPUs the point keeps busy.
func (p Point) CPUs() int { return p.Threads * p.Streams }

// String returns "batch=1/threads=2/streams=1".
func (p Point) String() string {
	return fmt.Sprintf("batch=%d/threads=%d/streams=%d", p.Batch, p.Threads, p.Streams)
}

// RunFunc measures one configuration. The sweep does not care how: streams
// of goroutines in this process (StreamsRunFunc) or N pinned instances
// launched by pkg/runenv both fit.
type RunFunc func(p Point) (*ThroughputResult, error)

// MaxSweepBatch bounds a swept batch size: each point allocates inputs and activations for the
// whole batch, and serving batches are far smaller.
const MaxSweepBatch = 65536

// SweepConfig lists the values to sweep; every combination is measured.
type SweepConfig struct {
	Batches []int `json:"batches"`
	Threads []int `json:"threads"`
	Streams []int `json:"streams"`
	// AvailableCPUs is how many CPUs this process may use (affinity mask
	// and cgroup quota already applied by the caller). A point needing
	// more is refused before anything runs: oversubscribed points measure
	// the scheduler, not the model.
	AvailableCPUs int `json:"available_cpus"`
	// P99Budget, when positive, is the latency budget for the
	// throughput recommendation: serving limits are set on the tail.
	P99Budget time.Duration `json:"p99_budget_ns,omitempty"`
}

// Points returns every combination in a stable order (batch, then threads,
// then streams), or an error naming values that cannot run.
func (c SweepConfig) Points() ([]Point, error) {
	var errs []error
	check := func(name string, vs []int) {
		if len(vs) == 0 {
			errs = append(errs, fmt.Errorf("sweep %s: empty list; give at least one value, e.g. 1", name))
		}
		for _, v := range vs {
			if v < 1 {
				errs = append(errs, fmt.Errorf("sweep %s: value %d: must be 1 or more", name, v))
			}
		}
		if len(vs) != len(uniq(vs)) {
			errs = append(errs, fmt.Errorf("sweep %s: %v repeats a value", name, vs))
		}
	}
	check("batch", c.Batches)
	for _, b := range c.Batches {
		if b > MaxSweepBatch {
			errs = append(errs, fmt.Errorf("sweep batch: value %d: at most %d", b, MaxSweepBatch))
		}
	}
	check("threads", c.Threads)
	check("streams", c.Streams)
	if c.AvailableCPUs < 1 {
		errs = append(errs, fmt.Errorf("sweep: available CPUs = %d: must be 1 or more", c.AvailableCPUs))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var pts []Point
	var tooBig []string
	for _, b := range c.Batches {
		for _, t := range c.Threads {
			for _, s := range c.Streams {
				p := Point{Batch: b, Threads: t, Streams: s}
				if p.CPUs() > c.AvailableCPUs {
					tooBig = append(tooBig, fmt.Sprintf("threads=%d x streams=%d", t, s))
				}
				pts = append(pts, p)
			}
		}
	}
	if len(tooBig) > 0 {
		return nil, fmt.Errorf("sweep needs more CPUs than the %d available: %s; lower --sweep-threads or --sweep-streams so that threads x streams <= %d",
			c.AvailableCPUs, strings.Join(uniqStrings(tooBig), ", "), c.AvailableCPUs)
	}
	return pts, nil
}

func uniq(vs []int) []int {
	s := slices.Clone(vs)
	slices.Sort(s)
	return slices.Compact(s)
}

func uniqStrings(vs []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range vs {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// SweepRow is one measured point.
type SweepRow struct {
	Point  Point             `json:"point"`
	Result *ThroughputResult `json:"result"`
	// Pareto marks points no other point beats on both median latency
	// and items/s.
	Pareto bool `json:"pareto"`
}

// Recommendation picks points from a sweep. A pointer is nil when no
// point qualifies.
type Recommendation struct {
	// BestLatency has the lowest median latency (ties: more items/s).
	BestLatency *Point `json:"best_latency,omitempty"`
	// BestThroughput has the most items/s with p99 within the budget
	// (any p99 when there is no budget; ties: lower median).
	BestThroughput *Point `json:"best_throughput,omitempty"`
	// Why explains each pick in a sentence.
	Why []string `json:"why"`
}

// SweepResult is the outcome of Sweep.
type SweepResult struct {
	Config         SweepConfig    `json:"config"`
	Rows           []SweepRow     `json:"rows"`
	Recommendation Recommendation `json:"recommendation"`
}

// Sweep measures every point of cfg with run, marks the Pareto front of
// median latency against items/s, and recommends points. It checks every
// point against cfg.AvailableCPUs before running any.
func Sweep(cfg SweepConfig, run RunFunc) (*SweepResult, error) {
	if run == nil {
		return nil, errors.New("sweep: nil run function")
	}
	pts, err := cfg.Points()
	if err != nil {
		return nil, err
	}
	res := &SweepResult{Config: cfg}
	for _, p := range pts {
		r, err := run(p)
		if err != nil {
			return nil, fmt.Errorf("sweep point %s: %w", p, err)
		}
		if r == nil {
			return nil, fmt.Errorf("sweep point %s: run returned no result", p)
		}
		res.Rows = append(res.Rows, SweepRow{Point: p, Result: r})
	}
	markPareto(res.Rows)
	res.Recommendation = recommend(res.Rows, cfg.P99Budget)
	return res, nil
}

// markPareto marks rows not dominated by another: lower-or-equal median
// and higher-or-equal items/s, strictly better in one.
func markPareto(rows []SweepRow) {
	for i := range rows {
		a := rows[i].Result
		dominated := false
		for j := range rows {
			if i == j {
				continue
			}
			b := rows[j].Result
			if b.Latency.P50 <= a.Latency.P50 && b.ItemsPerSecond >= a.ItemsPerSecond &&
				(b.Latency.P50 < a.Latency.P50 || b.ItemsPerSecond > a.ItemsPerSecond) {
				dominated = true
				break
			}
		}
		rows[i].Pareto = !dominated
	}
}

func recommend(rows []SweepRow, budget time.Duration) Recommendation {
	var rec Recommendation
	var lat, thr *SweepRow
	for i := range rows {
		r := &rows[i]
		if lat == nil || r.Result.Latency.P50 < lat.Result.Latency.P50 ||
			(r.Result.Latency.P50 == lat.Result.Latency.P50 && r.Result.ItemsPerSecond > lat.Result.ItemsPerSecond) {
			lat = r
		}
		if budget > 0 && r.Result.Latency.P99 > budget {
			continue
		}
		if thr == nil || r.Result.ItemsPerSecond > thr.Result.ItemsPerSecond ||
			(r.Result.ItemsPerSecond == thr.Result.ItemsPerSecond && r.Result.Latency.P50 < thr.Result.Latency.P50) {
			thr = r
		}
	}
	if lat != nil {
		p := lat.Point
		rec.BestLatency = &p
		rec.Why = append(rec.Why, fmt.Sprintf("lowest latency: %s (p50 %s, %.1f items/s)",
			p, FormatDuration(lat.Result.Latency.P50), lat.Result.ItemsPerSecond))
	}
	switch {
	case thr != nil:
		p := thr.Point
		rec.BestThroughput = &p
		cond := "no latency budget given"
		if budget > 0 {
			cond = fmt.Sprintf("p99 %s within the %s budget", FormatDuration(thr.Result.Latency.P99), FormatDuration(budget))
		}
		rec.Why = append(rec.Why, fmt.Sprintf("highest throughput: %s (%.1f items/s, p50 %s; %s)",
			p, thr.Result.ItemsPerSecond, FormatDuration(thr.Result.Latency.P50), cond))
	case budget > 0:
		rec.Why = append(rec.Why, fmt.Sprintf("no point keeps p99 within the %s budget", FormatDuration(budget)))
	}
	return rec
}

// StreamsRunFunc returns a RunFunc that measures a point with Throughput in
// this process: Streams goroutines on locked threads, each with the Target
// that factory makes for the point (factory sets the point's thread count
// and batch).
func StreamsRunFunc(name string, factory func(p Point, stream int) (Target, error), o Options) RunFunc {
	return func(p Point) (*ThroughputResult, error) {
		r, err := Throughput(fmt.Sprintf("%s/%s", name, p), func(s int) (Target, error) {
			return factory(p, s)
		}, ThroughputOptions{Options: o, Streams: p.Streams, Batch: p.Batch})
		if err != nil {
			return nil, err
		}
		r.Threads = p.Threads
		return r, nil
	}
}
