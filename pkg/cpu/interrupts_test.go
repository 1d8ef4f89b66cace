package cpu

import (
	"math"
	"strings"
	"testing"
	"time"
)

const us = time.Microsecond

// periodic is a trace with a gap of length every period, the first at offset.
func periodic(cpu int, span, period, offset, length time.Duration) GapTrace {
	t := GapTrace{CPU: cpu, Elapsed: span, Threshold: 2 * us, Reads: int64(span / 20)}
	for at := offset; at+length <= span; at += period {
		t.Gaps = append(t.Gaps, Gap{At: at, Len: length})
		t.Lost += length
		t.Longest = length
	}
	t.Count = int64(len(t.Gaps))
	return t
}

func TestFinishWalksThroughGaps(t *testing.T) {
	gaps := []Gap{{At: 100 * us, Len: 40 * us}, {At: 200 * us, Len: 10 * us}}
	for _, tc := range []struct {
		start, length, want time.Duration
	}{
		{0, 50 * us, 50 * us},                  // done before the first gap
		{0, 100 * us, 100 * us},                // ends just as the gap begins
		{0, 120 * us, 160 * us},                // runs 100, waits 40, runs 20
		{0, 161 * us, 211 * us},                // runs 100, waits 40, runs 60 up to the second gap, waits 10, runs 1
		{90 * us, 100 * us, 240 * us},          // 10, wait 40, 60, wait 10, 30
		{110 * us, 10 * us, 150 * us},          // starts inside a gap: waits for its end
		{140 * us, 60 * us, 200 * us},          // ends as the second gap begins
		{140 * us, 61 * us, 211 * us},          // one more waits the whole gap
		{209 * us, 0, 210 * us},                // inside a gap with no work: still waits for its end
		{300 * us, 25 * us, 325 * us},          // after every gap
		{0, 10 * time.Millisecond, 10050 * us}, // both gaps
	} {
		if got := finish(gaps, tc.start, tc.length); got != tc.want {
			t.Errorf("finish(start %v, length %v) = %v, want %v", tc.start, tc.length, got, tc.want)
		}
	}
	if got := resume(gaps, 120*us); got != 140*us {
		t.Errorf("resume inside a gap = %v, want its end", got)
	}
	if got := resume(gaps, 150*us); got != 150*us {
		t.Errorf("resume outside = %v, want itself", got)
	}
}

// A 40 µs gap every millisecond hits one call of 100 µs in ten: p95 is then 140 µs. On two
// CPUs whose gaps fall at different times, a two-thread call is hit twice as often, which
// still puts p95 in the slow calls; a 20 µs call is hit too seldom to move p95.
func TestFloorFromPeriodicGaps(t *testing.T) {
	span := 2 * time.Second
	in, err := SummarizeGaps([]GapTrace{
		periodic(0, span, time.Millisecond, 500*us, 40*us),
		periodic(1, span, time.Millisecond, 0, 40*us),
	})
	if err != nil {
		t.Fatal(err)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 0.01 }
	for _, tc := range []struct {
		length  time.Duration
		threads int
		want    float64
	}{
		{100 * us, 1, 1.40},
		{100 * us, 2, 1.40},
		{20 * us, 1, 1.00},
		{10 * time.Millisecond, 1, 1.00}, // every call meets 10 or 11 gaps: 10.40 or 10.44 ms
	} {
		got, ok := in.Floor(tc.length, tc.threads)
		if !ok || !near(got, tc.want) {
			t.Errorf("Floor(%v, %d threads) = %.3f, %v; want %.2f", tc.length, tc.threads, got, ok, tc.want)
		}
	}
	// 30 µs calls: one in ten of them (the 4% inside a gap included) waits for a gap on one
	// thread; on two threads one in five does, so p95 moves only there.
	if got, _ := in.Floor(30*us, 1); !near(got, 1.0) {
		t.Errorf("Floor(30µs, 1) = %.3f, want 1.00 (hit 7%% of the time, one start in 25 inside a gap)", got)
	}
	if got, _ := in.Floor(30*us, 2); got < 1.5 {
		t.Errorf("Floor(30µs, 2) = %.3f, want about 2.3 (hit 14%% of the time)", got)
	}
	if _, ok := in.Floor(100*us, 3); ok {
		t.Error("Floor on 3 threads with 2 traces answered")
	}
	if in.PerSecond < 999 || in.PerSecond > 1001 || !near(in.LostFraction, 0.04) || in.P50 != 40*us || in.P99 != 40*us {
		t.Errorf("summary: %.1f/s lost %.3f p50 %v p99 %v", in.PerSecond, in.LostFraction, in.P50, in.P99)
	}
	if len(in.Floors) != 6 { // 0.1, 1 and 10 ms on 1 and 2 threads
		t.Errorf("floors %+v", in.Floors)
	}
	// Calls must fit FloorFits times in the trace.
	if _, ok := in.Floor(40*time.Millisecond, 1); ok {
		t.Error("Floor(40ms) answered on a 2 s trace")
	}
	// A trace whose buffer overflowed cannot be replayed.
	over := periodic(0, span, time.Millisecond, 0, 40*us)
	over.Count += 5
	in2, err := SummarizeGaps([]GapTrace{over})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := in2.Floor(100*us, 1); ok || len(in2.Floors) != 0 {
		t.Errorf("overflowed trace replayed: floors %+v", in2.Floors)
	}
	if _, err := SummarizeGaps(nil); err == nil {
		t.Error("no traces: no error")
	}
	if _, err := SummarizeGaps([]GapTrace{{CPU: 3}}); err == nil || !strings.Contains(err.Error(), "CPU 3") {
		t.Errorf("empty trace: %v", err)
	}
}

// AddFloor keeps one floor per length, on at most as many threads as CPUs were measured, and
// FloorAt finds it; neither answers without a measurement.
func TestAddFloor(t *testing.T) {
	in, err := SummarizeGaps([]GapTrace{periodic(0, 2*time.Second, time.Millisecond, 0, 40*us)})
	if err != nil {
		t.Fatal(err)
	}
	n := len(in.Floors)
	f, ok := in.AddFloor(150*us, 4)
	if !ok || f.Threads != 1 || f.Length != 150*us || len(in.Floors) != n+1 {
		t.Fatalf("AddFloor(150µs, 4 threads) = %+v, %v; floors %d, want %d", f, ok, len(in.Floors), n+1)
	}
	if g, ok := in.AddFloor(150*us, 1); !ok || g != f || len(in.Floors) != n+1 {
		t.Errorf("the same length again: %+v, %v, %d floors", g, ok, len(in.Floors))
	}
	if g, ok := in.FloorAt(150 * us); !ok || g != f {
		t.Errorf("FloorAt = %+v, %v", g, ok)
	}
	if _, ok := in.AddFloor(time.Second, 1); ok || len(in.Floors) != n+1 {
		t.Error("a floor for calls that do not fit the trace")
	}
	var none *Interruptions
	if _, ok := none.AddFloor(150*us, 1); ok {
		t.Error("AddFloor without a measurement answered")
	}
	if _, ok := none.FloorAt(150 * us); ok {
		t.Error("FloorAt without a measurement answered")
	}
}

func TestGapsToKeep(t *testing.T) {
	for d, want := range map[time.Duration]int{10 * time.Millisecond: 1024, 300 * time.Millisecond: 3000, 5 * time.Second: 50000, time.Minute: 1 << 16} {
		if got := gapsToKeep(d); got != want {
			t.Errorf("gapsToKeep(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestInterruptFinding(t *testing.T) {
	in, err := SummarizeGaps([]GapTrace{periodic(0, 2*time.Second, time.Millisecond, 0, 40*us)})
	if err != nil {
		t.Fatal(err)
	}
	f := interruptFinding(in)
	if f == nil || f.Code != "cpu-interruptions" || !strings.Contains(f.Message, "4.0%") || !strings.Contains(f.Message, "1.40 at 100µs") || !strings.Contains(f.Message, "not by this process") {
		t.Errorf("finding for 4%% lost: %+v", f)
	}
	quiet, err := SummarizeGaps([]GapTrace{periodic(0, 2*time.Second, 10*time.Millisecond, 0, 5*us)})
	if err != nil {
		t.Fatal(err)
	}
	if f := interruptFinding(quiet); f != nil {
		t.Errorf("finding for 0.05%% lost: %+v", f)
	}
	if interruptFinding(nil) != nil {
		t.Error("finding without a measurement")
	}
	var lines []string
	in.writeText(func(format string, args ...any) { lines = append(lines, format) })
	if len(lines) != 2 {
		t.Errorf("text: %d lines", len(lines))
	}
}
