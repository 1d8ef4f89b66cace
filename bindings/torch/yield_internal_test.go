package torch

import (
	"runtime"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// The slice is shared: one caller yields every 4 ms, n callers every 4/n ms, and a clock that
// has not moved since the last yield never yields.
func TestYieldDue(t *testing.T) {
	for _, c := range []struct {
		now, last time.Duration
		n         int64
		want      bool
	}{
		{yieldSlice, 0, 1, true},
		{yieldSlice - 1, 0, 1, false},
		{10 * time.Millisecond, 9 * time.Millisecond, 1, false},
		{10 * time.Millisecond, 9 * time.Millisecond, 4, true},
		{10 * time.Millisecond, 9*time.Millisecond + 1, 4, false},
		{5 * time.Millisecond, 5 * time.Millisecond, 1000, false},
		{yieldSlice, 0, 0, true}, // a count of 0 (cannot happen: the caller counts itself) is taken as 1
	} {
		if got := yieldDue(c.now, c.last, c.n); got != c.want {
			t.Errorf("yieldDue(now %v, last %v, %d callers) = %v, want %v", c.now, c.last, c.n, got, c.want)
		}
	}
}

// Every forward that waits in C counts itself in while it runs and out when it returns, on
// both paths (the caller's thread at one intra-op thread, the hand-off at more), and a yield
// is recorded once the slice is due.
func TestForwardYieldBookkeeping(t *testing.T) {
	m, in := yieldTestModule(t)
	threadsMu.Lock()
	prev := lastThreads
	threadsMu.Unlock()
	if prev > 0 {
		defer func() { _ = SetNumThreads(prev) }()
	}
	for _, threads := range []int{1, 2} {
		if threads > AvailableCPUs() {
			continue
		}
		if err := SetNumThreads(threads); err != nil {
			t.Fatal(err)
		}
		lastYield.Store(0) // the epoch: the first call is due
		before, yielded := yieldCallers.Load(), yields.Load()
		outs, err := m.Forward(in)
		if err != nil {
			t.Fatal(err)
		}
		CloseOutputs(outs)
		if got := yieldCallers.Load(); got != before {
			t.Errorf("%d threads: %d callers counted after the call, want %d", threads, got, before)
		}
		if lastYield.Load() == 0 || yields.Load() != yielded+1 {
			t.Errorf("%d threads: no yield though the slice was due (turn taken %v, yields %d -> %d)",
				threads, lastYield.Load() != 0, yielded, yields.Load())
		}
		// A caller locked to its thread takes the turn without yielding.
		lastYield.Store(0)
		yielded = yields.Load()
		runtime.LockOSThread()
		outs, err = m.Forward(in)
		runtime.UnlockOSThread()
		if err != nil {
			t.Fatal(err)
		}
		CloseOutputs(outs)
		if lastYield.Load() == 0 || yields.Load() != yielded {
			t.Errorf("%d threads, locked caller: turn taken %v, yields %d -> %d; want the turn taken without a yield",
				threads, lastYield.Load() != 0, yielded, yields.Load())
		}
		yieldOff.Store(true)
		lastYield.Store(0)
		outs, err = m.Forward(in)
		yieldOff.Store(false)
		if err != nil {
			t.Fatal(err)
		}
		CloseOutputs(outs)
		if lastYield.Load() != 0 {
			t.Errorf("%d threads: a yield recorded with the yield off", threads)
		}
	}
}

// lockedToThread follows runtime.LockOSThread, nested calls included.
func TestLockedToThread(t *testing.T) {
	if lockedToThread() {
		t.Fatal("a test goroutine reported locked before LockOSThread")
	}
	runtime.LockOSThread()
	runtime.LockOSThread()
	if !lockedToThread() {
		t.Error("not reported locked after LockOSThread")
	}
	runtime.UnlockOSThread()
	if !lockedToThread() {
		t.Error("not reported locked after one of two UnlockOSThread calls")
	}
	runtime.UnlockOSThread()
	if lockedToThread() {
		t.Error("reported locked after UnlockOSThread")
	}
}

// yieldTestModule loads the digits fixture and its input.
func yieldTestModule(t *testing.T) (*Module, *Tensor) {
	t.Helper()
	f := fixtures.Load(t).Get(t, "digits")
	m, err := Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	arrays := f.InputArrays(t)
	x, err := NewTensorAny(arrays[0].Data, arrays[0].Shape)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return m, x
}
