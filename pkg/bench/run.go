package bench

import (
	"errors"
	"fmt"
	"runtime"
	"time"
)

// Options says how long to warm up and how long to measure. Exactly one of
// Runs and Duration is set; at most one of Warmup and WarmupDuration.
type Options struct {
	// Runs is the number of timed inferences.
	Runs int
	// Duration is how long to keep running timed inferences (at least
	// one is always run).
	Duration time.Duration
	// Warmup is the number of untimed inferences after the first one.
	Warmup int
	// WarmupDuration warms up for a time instead of a count.
	WarmupDuration time.Duration
	// MaxRuns caps a duration-limited run so that a very fast target does
	// not fill memory; 0 means DefaultMaxRuns.
	MaxRuns int
	// Clock is the time source; nil means WallClock.
	Clock Clock
	// SkipGC leaves out the garbage collection before the warm-up: for a
	// caller that times an already warm target again and again (the serve
	// loop), where a collection each time would slow its first timed runs.
	SkipGC bool
}

// DefaultMaxRuns caps duration-limited runs: 10 million latencies is 80 MB.
const DefaultMaxRuns = 10_000_000

// Validate reports options that cannot describe a measurement. The errors
// name the option and say what is allowed.
func (o Options) Validate() error {
	var errs []error
	if o.Runs < 0 {
		errs = append(errs, fmt.Errorf("runs = %d: must be positive", o.Runs))
	}
	if o.Duration < 0 {
		errs = append(errs, fmt.Errorf("duration = %v: must be positive, e.g. 10s", o.Duration))
	}
	if o.Runs > 0 && o.Duration > 0 {
		errs = append(errs, fmt.Errorf("runs = %d and duration = %v: set one of them, not both", o.Runs, o.Duration))
	}
	if o.Runs == 0 && o.Duration == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("runs = 0 and duration = 0: nothing to measure; set runs > 0 or a positive duration, e.g. 10s"))
	}
	if o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warmup = %d: must be 0 or more", o.Warmup))
	}
	if o.WarmupDuration < 0 {
		errs = append(errs, fmt.Errorf("warmup duration = %v: must be 0 or more", o.WarmupDuration))
	}
	if o.Warmup > 0 && o.WarmupDuration > 0 {
		errs = append(errs, fmt.Errorf("warmup = %d and warmup duration = %v: set one of them, not both", o.Warmup, o.WarmupDuration))
	}
	if o.MaxRuns < 0 {
		errs = append(errs, fmt.Errorf("max runs = %d: must be 0 (default) or more", o.MaxRuns))
	}
	return errors.Join(errs...)
}

func (o Options) clock() Clock {
	if o.Clock == nil {
		return WallClock
	}
	return o.Clock
}

func (o Options) maxRuns() int {
	if o.MaxRuns == 0 {
		return DefaultMaxRuns
	}
	return o.MaxRuns
}

// Result is one target's measurement.
type Result struct {
	Name string `json:"name"`
	// Load is how long loading the model took; the caller that loaded it
	// fills it in (0 when unknown).
	Load time.Duration `json:"load_ns"`
	// First is the first inference, timed alone: it pays lazy
	// initialisation and TorchScript's profiling runs.
	First time.Duration `json:"first_ns"`
	// WarmupRuns untimed inferences took WarmupTime in all.
	WarmupRuns int           `json:"warmup_runs"`
	WarmupTime time.Duration `json:"warmup_ns"`
	// Samples holds every timed latency in the order measured.
	Samples []time.Duration `json:"samples_ns"`
	// Elapsed is the wall time of the timed phase.
	Elapsed time.Duration `json:"elapsed_ns"`
	Stats   Summary       `json:"stats"`
	// Batch is the number of items per inference (for items/s); 0 or 1
	// means one.
	Batch int `json:"batch,omitempty"`
}

// firstRun times t's first inference; an error names the target.
func firstRun(t Target, c Clock) (time.Duration, error) {
	start := c.Now()
	if err := t.Run(); err != nil {
		return 0, fmt.Errorf("first inference of %q failed: %w", t.Name(), err)
	}
	return c.Now() - start, nil
}

// warmup runs t untimed per the options and returns runs and time spent.
func warmup(t Target, o Options, c Clock) (int, time.Duration, error) {
	start := c.Now()
	n := 0
	for {
		if o.WarmupDuration > 0 {
			if c.Now()-start >= o.WarmupDuration {
				break
			}
		} else if n >= o.Warmup {
			break
		}
		if err := t.Run(); err != nil {
			return n, 0, fmt.Errorf("warm-up run %d of %q failed: %w", n+1, t.Name(), err)
		}
		n++
	}
	return n, c.Now() - start, nil
}

// Run measures one target: first inference, warm-up, then the timed runs,
// keeping every latency.
func Run(t Target, o Options) (*Result, error) {
	if t == nil {
		return nil, errors.New("bench: nil target")
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("bench %q: %w", t.Name(), err)
	}
	c := o.clock()
	res := &Result{Name: t.Name()}
	var err error
	if res.First, err = firstRun(t, c); err != nil {
		return nil, err
	}
	// Collect the garbage left by loading and the first inference before the
	// warm-up, not just before the timed runs: the two inferences right after
	// a collection ran 1-2.5 ms slower than the 3.7 ms median of an INT8
	// resnet18 at 2 threads (the Go runtime's work after a cycle competes with
	// the OpenMP threads); the warm-up absorbs that instead.
	if !o.SkipGC {
		runtime.GC()
	}
	if res.WarmupRuns, res.WarmupTime, err = warmup(t, o, c); err != nil {
		return nil, err
	}

	capacity := o.Runs
	if capacity == 0 {
		capacity = 1024
	}
	res.Samples = make([]time.Duration, 0, capacity)
	start := c.Now()
	limit := o.maxRuns()
	for i := 0; ; i++ {
		if o.Runs > 0 {
			if i >= o.Runs {
				break
			}
		} else if i > 0 && (c.Now()-start >= o.Duration || i >= limit) {
			break
		}
		t0 := c.Now()
		if err := t.Run(); err != nil {
			return nil, fmt.Errorf("timed run %d of %q failed: %w", i+1, t.Name(), err)
		}
		res.Samples = append(res.Samples, c.Now()-t0)
	}
	res.Elapsed = c.Now() - start
	if res.Stats, err = Summarize(res.Samples); err != nil {
		return nil, fmt.Errorf("bench %q: %w", t.Name(), err)
	}
	return res, nil
}
