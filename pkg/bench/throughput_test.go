package bench

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadTarget sleeps like an inference and records the OS thread of every
// call, to check that a stream stays on its locked thread.
type threadTarget struct {
	name string
	d    time.Duration
	mu   *sync.Mutex
	tids map[int]bool
	// active counts the calls in flight across streams; maxActive is the most seen at once.
	active, maxActive *int
}

func (t *threadTarget) Name() string { return t.name }
func (t *threadTarget) Run() error {
	t.mu.Lock()
	t.tids[unix.Gettid()] = true
	if t.active != nil {
		*t.active++
		*t.maxActive = max(*t.maxActive, *t.active)
	}
	t.mu.Unlock()
	time.Sleep(t.d)
	if t.active != nil {
		t.mu.Lock()
		*t.active--
		t.mu.Unlock()
	}
	return nil
}

func TestThroughputStreams(t *testing.T) {
	var mu sync.Mutex
	perStream := make([]map[int]bool, 3)
	factoryTids := make([]int, 3)
	var active, maxActive int
	factory := func(s int) (Target, error) {
		factoryTids[s] = unix.Gettid()
		perStream[s] = map[int]bool{}
		return &threadTarget{name: "sleep", d: 2 * time.Millisecond, mu: &mu, tids: perStream[s], active: &active, maxActive: &maxActive}, nil
	}
	r, err := Throughput("sleep", factory, ThroughputOptions{Options: Options{Runs: 50, Warmup: 2}, Streams: 3, Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	if r.Streams != 3 || len(r.PerStream) != 3 || r.Inferences != 150 || r.Latency.N != 150 {
		t.Fatalf("streams=%d per-stream=%d inferences=%d", r.Streams, len(r.PerStream), r.Inferences)
	}
	for s, tids := range perStream {
		if len(tids) != 1 || !tids[factoryTids[s]] {
			t.Errorf("stream %d ran on threads %v, factory on %d: want one locked thread", s, tids, factoryTids[s])
		}
		if r.PerStream[s].Runs != 50 || r.PerStream[s].Stats.P50 < 2*time.Millisecond {
			t.Errorf("stream %d: %d runs, p50 %v", s, r.PerStream[s].Runs, r.PerStream[s].Stats.P50)
		}
	}
	// The streams run side by side (not one after another), whatever the machine's load;
	// the rate is what was counted over the time measured, and items/s counts the batch.
	if maxActive < 2 {
		t.Errorf("at most %d call(s) in flight at once: the 3 streams did not overlap", maxActive)
	}
	if want := float64(r.Inferences) / r.Elapsed.Seconds(); math.Abs(r.PerSecond-want) > 1e-6*want {
		t.Errorf("PerSecond = %v, want Inferences/Elapsed = %v", r.PerSecond, want)
	}
	if r.ItemsPerSecond != 4*r.PerSecond {
		t.Errorf("ItemsPerSecond = %v, want 4 x %v", r.ItemsPerSecond, r.PerSecond)
	}
}

func TestThroughputDuration(t *testing.T) {
	factory := func(s int) (Target, error) { return sleepTarget{"s", time.Millisecond}, nil }
	r, err := Throughput("s", factory, ThroughputOptions{Options: Options{Duration: 100 * time.Millisecond}, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.Elapsed < 100*time.Millisecond || r.Elapsed > 400*time.Millisecond {
		t.Errorf("Elapsed = %v for a 100ms run", r.Elapsed)
	}
	if r.Batch != 1 || r.PerSecond <= 0 {
		t.Errorf("batch %d, %v/s", r.Batch, r.PerSecond)
	}
}

func TestThroughputErrors(t *testing.T) {
	ok := func(s int) (Target, error) { return sleepTarget{"s", time.Microsecond}, nil }
	failSecond := func(s int) (Target, error) {
		if s == 1 {
			return &failTarget{name: "m.pt", failAt: 1}, nil
		}
		return sleepTarget{"m.pt", time.Microsecond}, nil
	}
	for _, c := range []struct {
		name    string
		factory Factory
		o       ThroughputOptions
		want    string
	}{
		{"nil factory", nil, ThroughputOptions{Options: Options{Runs: 1}, Streams: 1}, "nil target factory"},
		{"zero streams", ok, ThroughputOptions{Options: Options{Runs: 1}}, "streams = 0"},
		{"negative batch", ok, ThroughputOptions{Options: Options{Runs: 1}, Streams: 1, Batch: -1}, "batch = -1"},
		{"zero duration", ok, ThroughputOptions{Streams: 1}, "nothing to measure"},
		{"sim clock", ok, ThroughputOptions{Options: Options{Runs: 1, Clock: &SimClock{}}, Streams: 1}, "wall clock"},
		{"factory fails", func(s int) (Target, error) { return nil, errors.New("load: no such file") }, ThroughputOptions{Options: Options{Runs: 1}, Streams: 2}, "make target: load: no such file"},
		{"nil target", func(s int) (Target, error) { return nil, nil }, ThroughputOptions{Options: Options{Runs: 1}, Streams: 1}, "nil target"},
		{"first inference fails", failSecond, ThroughputOptions{Options: Options{Runs: 3}, Streams: 2}, `stream 1: first inference of "m.pt" failed`},
		{"timed run fails", func(s int) (Target, error) { return &failTarget{name: "m.pt", failAt: 3}, nil }, ThroughputOptions{Options: Options{Runs: 3}, Streams: 1}, `timed run 2 of "m.pt"`},
	} {
		_, err := Throughput("m", c.factory, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// fakeRun returns a RunFunc with latency and throughput as simple functions
// of the point, so the sweep's table, front and picks can be checked exactly.
func fakeRun(calls *[]Point) RunFunc {
	return func(p Point) (*ThroughputResult, error) {
		*calls = append(*calls, p)
		// Latency grows with batch (sub-linearly: batching pays) and
		// streams, shrinks with threads.
		lat := time.Duration(float64(time.Millisecond) * (0.5 + 0.5*float64(p.Batch)) * (0.5 + 0.5*float64(p.Streams)) / float64(p.Threads))
		perSec := float64(p.Streams) / lat.Seconds()
		samples := []time.Duration{lat, lat, lat, lat, lat, lat}
		s, err := Summarize(samples)
		if err != nil {
			return nil, err
		}
		return &ThroughputResult{Name: p.String(), Streams: p.Streams, Batch: p.Batch, Latency: s,
			PerSecond: perSec, ItemsPerSecond: perSec * float64(p.Batch), Elapsed: time.Second,
			PerStream: []StreamResult{{Stream: 0, Runs: 6, Stats: s}}}, nil
	}
}

func TestSweep(t *testing.T) {
	var calls []Point
	cfg := SweepConfig{Batches: []int{1, 4}, Threads: []int{1, 2}, Streams: []int{1, 2}, AvailableCPUs: 4}
	res, err := Sweep(cfg, fakeRun(&calls))
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 8 || len(res.Rows) != 8 {
		t.Fatalf("%d points run, %d rows; want 8", len(calls), len(res.Rows))
	}
	if calls[0] != (Point{1, 1, 1}) || calls[7] != (Point{4, 2, 2}) {
		t.Errorf("order %v", calls)
	}
	// Check the front against its definition by brute force.
	for i, a := range res.Rows {
		dominated := false
		for j, b := range res.Rows {
			if i != j && b.Result.Latency.P50 <= a.Result.Latency.P50 && b.Result.ItemsPerSecond >= a.Result.ItemsPerSecond &&
				(b.Result.Latency.P50 < a.Result.Latency.P50 || b.Result.ItemsPerSecond > a.Result.ItemsPerSecond) {
				dominated = true
			}
		}
		if a.Pareto == dominated {
			t.Errorf("%s: pareto=%v but dominated=%v", a.Point, a.Pareto, dominated)
		}
	}
	rec := res.Recommendation
	// Lowest latency: batch 1, 2 threads, 1 stream (0.5 ms).
	if rec.BestLatency == nil || *rec.BestLatency != (Point{1, 2, 1}) {
		t.Errorf("BestLatency = %v", rec.BestLatency)
	}
	// Most items/s: batch 4, 2 threads, 2 streams: 1.875 ms, 4267 items/s.
	if rec.BestThroughput == nil || *rec.BestThroughput != (Point{4, 2, 2}) {
		t.Errorf("BestThroughput = %v", rec.BestThroughput)
	}

	// A p99 budget of 1 ms rules out the batch-4 points.
	cfg.P99Budget = time.Millisecond
	calls = nil
	res, err = Sweep(cfg, fakeRun(&calls))
	if err != nil {
		t.Fatal(err)
	}
	// Within 1 ms: batch 1, 2 threads, 2 streams (0.75 ms, 2667 items/s).
	if bt := res.Recommendation.BestThroughput; bt == nil || *bt != (Point{1, 2, 2}) {
		t.Errorf("with a 1ms budget BestThroughput = %v, want batch=1/threads=2/streams=2", bt)
	}
	for _, row := range res.Rows {
		if row.Point == *res.Recommendation.BestThroughput && row.Result.Latency.P99 > cfg.P99Budget {
			t.Errorf("recommended %s has p99 %v over the budget", row.Point, row.Result.Latency.P99)
		}
	}
	cfg.P99Budget = time.Nanosecond
	res, err = Sweep(cfg, fakeRun(&calls))
	if err != nil {
		t.Fatal(err)
	}
	if res.Recommendation.BestThroughput != nil || !strings.Contains(strings.Join(res.Recommendation.Why, "\n"), "no point keeps p99") {
		t.Errorf("an impossible budget should recommend nothing for throughput: %+v", res.Recommendation)
	}
}

func TestSweepBadInput(t *testing.T) {
	var calls []Point
	for _, c := range []struct {
		name string
		cfg  SweepConfig
		want string
	}{
		{"too many cores", SweepConfig{Batches: []int{1}, Threads: []int{1, 2}, Streams: []int{1, 2}, AvailableCPUs: 2},
			"more CPUs than the 2 available: threads=2 x streams=2"},
		{"empty list", SweepConfig{Batches: nil, Threads: []int{1}, Streams: []int{1}, AvailableCPUs: 2}, "sweep batch: empty list"},
		{"zero value", SweepConfig{Batches: []int{0}, Threads: []int{1}, Streams: []int{1}, AvailableCPUs: 2}, "value 0"},
		{"repeat", SweepConfig{Batches: []int{1}, Threads: []int{1, 1}, Streams: []int{1}, AvailableCPUs: 2}, "repeats"},
		{"no cpus", SweepConfig{Batches: []int{1}, Threads: []int{1}, Streams: []int{1}}, "available CPUs = 0"},
	} {
		calls = nil
		_, err := Sweep(c.cfg, fakeRun(&calls))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
		if len(calls) != 0 {
			t.Errorf("%s: %d points ran before the error; the check must come first", c.name, len(calls))
		}
	}
	failing := func(p Point) (*ThroughputResult, error) { return nil, fmt.Errorf("launch: numactl not found") }
	_, err := Sweep(SweepConfig{Batches: []int{2}, Threads: []int{1}, Streams: []int{1}, AvailableCPUs: 1}, failing)
	if err == nil || !strings.Contains(err.Error(), "batch=2/threads=1/streams=1: launch: numactl not found") {
		t.Errorf("failing run: err = %v", err)
	}
	if _, err := Sweep(SweepConfig{Batches: []int{1}, Threads: []int{1}, Streams: []int{1}, AvailableCPUs: 1}, nil); err == nil {
		t.Error("nil RunFunc accepted")
	}
}

func TestStreamsRunFunc(t *testing.T) {
	var mu sync.Mutex
	seen := map[Point]int{}
	factory := func(p Point, s int) (Target, error) {
		mu.Lock()
		seen[p]++
		mu.Unlock()
		return sleepTarget{"m", 500 * time.Microsecond}, nil
	}
	res, err := Sweep(SweepConfig{Batches: []int{1}, Threads: []int{1}, Streams: []int{1, 2}, AvailableCPUs: 2},
		StreamsRunFunc("m", factory, Options{Runs: 10}))
	if err != nil {
		t.Fatal(err)
	}
	if seen[Point{1, 1, 1}] != 1 || seen[Point{1, 1, 2}] != 2 {
		t.Errorf("factory calls per point: %v", seen)
	}
	if r := res.Rows[1].Result; r.Streams != 2 || r.Threads != 1 || r.Inferences != 20 {
		t.Errorf("row 2: %+v", r)
	}
}
