package bench

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Factory makes the Target for one stream. It is called on the stream's own
// locked OS thread, so per-thread runtime settings made inside it (libtorch's
// intra-op thread count belongs to the calling thread's OpenMP pool) apply to
// that stream's inferences. Each stream may own its own model instance or
// share one whose Run is safe from many goroutines.
type Factory func(stream int) (Target, error)

// ThroughputOptions configures a throughput run. Options applies to each
// stream: Runs is per stream; Duration bounds the whole timed phase.
type ThroughputOptions struct {
	Options
	Streams int
	// Batch is items per inference, for items/s (0 means 1).
	Batch int
}

// StreamResult is one stream's share of a throughput run.
type StreamResult struct {
	Stream int           `json:"stream"`
	Runs   int           `json:"runs"`
	First  time.Duration `json:"first_ns"`
	Stats  Summary       `json:"stats"`
	// Samples holds the stream's timed latencies in order.
	Samples []time.Duration `json:"samples_ns"`
}

// ThroughputResult is the outcome of Throughput.
type ThroughputResult struct {
	Name    string `json:"name"`
	Streams int    `json:"streams"`
	Batch   int    `json:"batch"`
	// Threads is informational (the caller's per-stream thread count).
	Threads int `json:"threads,omitempty"`
	// Elapsed runs from releasing all streams together to the last one
	// finishing.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Inferences is the total count of timed inferences over all streams.
	Inferences int `json:"inferences"`
	// PerSecond is Inferences / Elapsed; ItemsPerSecond multiplies it by
	// Batch.
	PerSecond      float64 `json:"inferences_per_s"`
	ItemsPerSecond float64 `json:"items_per_s"`
	// Latency pools every stream's latencies.
	Latency   Summary        `json:"latency"`
	PerStream []StreamResult `json:"per_stream"`
}

// Throughput runs opts.Streams concurrent streams, each a goroutine locked
// to its own OS thread with its own Target from factory. All streams finish
// their first inference and warm-up, then start the timed phase together.
// The wall clock is used: a simulated clock cannot model concurrency.
func Throughput(name string, factory Factory, o ThroughputOptions) (*ThroughputResult, error) {
	if factory == nil {
		return nil, errors.New("throughput: nil target factory")
	}
	if o.Streams < 1 {
		return nil, fmt.Errorf("throughput %q: streams = %d: must be 1 or more", name, o.Streams)
	}
	if o.Batch < 0 {
		return nil, fmt.Errorf("throughput %q: batch = %d: must be 1 or more", name, o.Batch)
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("throughput %q: %w", name, err)
	}
	if o.Clock != nil && o.Clock != WallClock {
		return nil, fmt.Errorf("throughput %q: only the wall clock can time concurrent streams", name)
	}
	c := WallClock
	batch := max(o.Batch, 1)
	n := o.Streams

	var (
		ready   sync.WaitGroup // every stream warmed up (or failed)
		done    sync.WaitGroup
		start   = make(chan struct{})
		abort   = make(chan struct{})
		errs    = make([]error, n)
		results = make([]StreamResult, n)
		startAt time.Duration
	)
	ready.Add(n)
	done.Add(n)
	for s := 0; s < n; s++ {
		go func(s int) {
			defer done.Done()
			// The OpenMP pool belongs to the OS thread: keep this
			// stream's inferences on one thread for its whole life,
			// and let the thread die with the goroutine (no unlock) so
			// its pool settings cannot leak to other goroutines.
			runtime.LockOSThread()
			warmed := false
			defer func() {
				if !warmed {
					ready.Done()
				}
			}()
			t, err := factory(s)
			if err != nil {
				errs[s] = fmt.Errorf("stream %d: make target: %w", s, err)
				return
			}
			if t == nil {
				errs[s] = fmt.Errorf("stream %d: factory returned a nil target", s)
				return
			}
			r := StreamResult{Stream: s}
			if r.First, err = firstRun(t, c); err != nil {
				errs[s] = fmt.Errorf("stream %d: %w", s, err)
				return
			}
			if _, _, err = warmup(t, o.Options, c); err != nil {
				errs[s] = fmt.Errorf("stream %d: %w", s, err)
				return
			}
			warmed = true
			ready.Done()
			select {
			case <-start:
			case <-abort:
				return
			}
			capacity := o.Runs
			if capacity == 0 {
				capacity = 1024
			}
			r.Samples = make([]time.Duration, 0, capacity)
			limit := o.maxRuns()
			for i := 0; ; i++ {
				if o.Runs > 0 {
					if i >= o.Runs {
						break
					}
				} else if i > 0 && (c.Now()-startAt >= o.Duration || i >= limit) {
					break
				}
				t0 := c.Now()
				if err := t.Run(); err != nil {
					errs[s] = fmt.Errorf("stream %d: timed run %d of %q failed: %w", s, i+1, t.Name(), err)
					return
				}
				r.Samples = append(r.Samples, c.Now()-t0)
			}
			r.Runs = len(r.Samples)
			results[s] = r
		}(s)
	}
	ready.Wait()
	if err := errors.Join(errs...); err != nil {
		close(abort)
		done.Wait()
		return nil, fmt.Errorf("throughput %q: %w", name, err)
	}
	runtime.GC()
	startAt = c.Now() // written before close(start): streams read it after
	close(start)
	done.Wait()
	elapsed := c.Now() - startAt
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("throughput %q: %w", name, err)
	}

	tr := &ThroughputResult{Name: name, Streams: n, Batch: batch, Elapsed: elapsed}
	var all []time.Duration
	for i := range results {
		s, err := Summarize(results[i].Samples)
		if err != nil {
			return nil, fmt.Errorf("throughput %q: stream %d: %w", name, i, err)
		}
		results[i].Stats = s
		all = append(all, results[i].Samples...)
		tr.Inferences += results[i].Runs
	}
	tr.PerStream = results
	var err error
	if tr.Latency, err = Summarize(all); err != nil {
		return nil, fmt.Errorf("throughput %q: %w", name, err)
	}
	if elapsed > 0 {
		tr.PerSecond = float64(tr.Inferences) / elapsed.Seconds()
		tr.ItemsPerSecond = tr.PerSecond * float64(batch)
	}
	return tr, nil
}
