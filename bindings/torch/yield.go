package torch

import (
	"bytes"
	"runtime"
	"sync/atomic"
	"time"
)

// Go's sysmon counts a goroutine's time slice from the last time the scheduler ran it. A cgo
// call that returns while an idle P is free takes that P without being scheduled anew, so a
// goroutine that calls a model back to back (a batch loop, a stream, a benchmark) keeps one
// time slice forever. Once it is 10 ms old, Go 1.26's sysmon takes the P away in every cgo
// call and, since it keeps finding work, wakes every 20 us to do it again; the kernel puts
// those wake-ups on the CPU the model runs on and preempts it: the inference thread is switched
// out hundreds of times where a goroutine locked to its thread sees a few, and the tail doubles.
// A runtime.Gosched every 5 ms brings both back to the locked goroutine's, at the same p50
// (docs/architecture.md).
//
// yieldIfDue, called before a forward that waits in C, lets the scheduler run the caller anew
// once per slice. The slice is shared by the goroutines inside such calls: with n of them one
// yields every yieldSlice/n, so each one's slice renews within the 10 ms as long as they take
// turns. A Gosched inside every call cost 13 us at p50 on the same VM (transformer_traced,
// 122 -> 135 us); once per 4 ms that is 0.3% of the time.
const yieldSlice = 4 * time.Millisecond

var (
	yieldEpoch   = time.Now()
	lastYield    atomic.Int64 // time since yieldEpoch of the last yield
	yieldCallers atomic.Int64 // goroutines between yieldIfDue and the end of their call
	yieldOff     atomic.Bool  // benchmarks turn the yield off to measure what it changes
	yields       atomic.Int64 // Gosched calls made, for tests
)

// yieldIfDue yields if the slice is due and returns the function that ends the call. A caller
// locked to its OS thread (runtime.LockOSThread) takes its turn without yielding: sysmon leaves
// such goroutines alone (transformer_traced from a locked goroutine without the yield: 5-8
// involuntary switches in 20,000 calls), and a Gosched there hands the goroutine to another
// thread and back, since only its own thread may run it: 430-650 voluntary switches of the
// inference thread in 20,000 calls, each of those calls over 1.5x the median, p95/p50
// 1.46-1.52 against 1.41-1.43 without.
func yieldIfDue() (done func()) {
	n := yieldCallers.Add(1)
	if yieldOff.Load() {
		return endYieldCall
	}
	now := time.Since(yieldEpoch)
	last := lastYield.Load()
	if yieldDue(now, time.Duration(last), n) && lastYield.CompareAndSwap(last, int64(now)) && !lockedToThread() {
		runtime.Gosched()
		yields.Add(1)
	}
	return endYieldCall
}

// lockedToThread reports whether the calling goroutine is locked to its OS thread. Go has no
// call for it; the first line of the goroutine's own traceback says so ("goroutine 7 [running,
// locked to thread]:"). It costs a traceback of the caller's stack, a few microseconds, once
// per slice. Should the wording ever change, it reports false and locked callers yield as
// unlocked ones do.
func lockedToThread() bool {
	var buf [128]byte
	line := buf[:runtime.Stack(buf[:], false)]
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	return bytes.Contains(line, []byte(", locked to thread"))
}

// yieldDue: whether a caller, one of n inside calls, yields at now when the last yield was at last.
func yieldDue(now, last time.Duration, n int64) bool {
	return now-last >= yieldSlice/time.Duration(max(n, 1))
}

func endYieldCall() { yieldCallers.Add(-1) }
