package cpu

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// MeasureInterruptions runs the measurer on one thread per CPU, pinned to it, all at once.
func TestMeasureInterruptionsPinsEachThread(t *testing.T) {
	cpus := liveAffinity()
	if len(cpus) == 0 {
		t.Skip("no affinity mask")
	}
	var mu sync.Mutex
	seen := map[int]bool{}
	fake := func(d, thr time.Duration, max int) (GapTrace, error) {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return GapTrace{}, err
		}
		if set.Count() != 1 {
			return GapTrace{}, errors.New("thread not pinned to one CPU")
		}
		c := 0
		for !set.IsSet(c) {
			c++
		}
		mu.Lock()
		seen[c] = true
		mu.Unlock()
		if d != 30*time.Millisecond || thr != 2*us || max != 1024 {
			return GapTrace{}, errors.New("options not passed on")
		}
		return GapTrace{Elapsed: d, Threshold: thr, Count: 1, Lost: us, Longest: us, Gaps: []Gap{{At: us, Len: us}}}, nil
	}
	in, err := MeasureInterruptions(InterruptOptions{CPUs: cpus, Duration: 30 * time.Millisecond}, fake)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(cpus) || len(in.CPUs) != len(cpus) {
		t.Fatalf("measured on %v, summary %+v; want each of %v", seen, in.CPUs, cpus)
	}
	for i, c := range in.CPUs {
		if c.CPU != cpus[i] || !seen[c.CPU] {
			t.Errorf("summary %d is CPU %d, want %d", i, c.CPU, cpus[i])
		}
	}
	// The caller's own mask is untouched.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if now := liveAffinity(); len(now) != len(cpus) {
		t.Errorf("affinity after: %v, before %v", now, cpus)
	}
	failing := func(time.Duration, time.Duration, int) (GapTrace, error) { return GapTrace{}, errors.New("boom") }
	if _, err := MeasureInterruptions(InterruptOptions{CPUs: cpus[:1], Duration: 30 * time.Millisecond}, failing); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("failing measurer: %v", err)
	}
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Minute} {
		if _, err := MeasureInterruptions(InterruptOptions{Duration: d}, fake); err == nil {
			t.Errorf("duration %v accepted", d)
		}
	}
	if _, err := MeasureInterruptions(InterruptOptions{CPUs: []int{-1}, Duration: 30 * time.Millisecond}, fake); err == nil || !strings.Contains(err.Error(), "CPU -1") {
		t.Errorf("CPU -1: %v", err)
	}
	if _, err := MeasureInterruptions(InterruptOptions{}, nil); err == nil {
		t.Error("no measurer accepted")
	}
}
