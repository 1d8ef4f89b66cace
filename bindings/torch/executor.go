package torch

/*
#include "torchspeed.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// libtorch's OpenMP pool belongs to the OS thread that calls into it: a call from a new thread
// starts (and keeps spinning) a new pool. Measured on the digits model: 136-184 us per call from
// one locked thread, 650-950 us when calls hopped between 2-3 threads. So inference runs on
// worker goroutines, each locked to its OS thread for life: one shared default Thread (Forward,
// Do), and any number of dedicated ones (NewThread) for callers that run streams side by side.

// Thread is a goroutine locked to one OS thread, with that thread's own OpenMP pool. Do runs
// work on it; Forward runs a module's forward on it. It is safe from many goroutines; Close
// waits for calls in flight.
//
// The thread waits in C (ts_worker_serve) rather than on a Go channel, so that Forward hands its
// inputs over in one cgo call with one wake-up each way. A hand-off through the Go scheduler
// (wake the locked goroutine's thread, then a thread for the caller) cost ~100 us per call on the
// digits model at 2 threads, twice the model's own time. Do's functions still reach the thread
// through a channel: a kick makes ts_worker_serve return to Go to run them.
type Thread struct {
	mu     sync.RWMutex // read side held by Do and Forward for the length of a call; Close takes the write side
	closed bool
	w      *C.ts_worker // nil when it could not be made: everything then goes through jobs
	jobs   chan func()
	done   chan struct{} // closed when the worker goroutine has returned
}

// SetHandoffSpin sets, for every Thread in the process, how long each side of Forward's hand-off
// spins before it sleeps: the thread waiting for its next forward (serve; after forwards shorter
// than 10 x serve), and a caller waiting for its result (wait; only when the thread's last
// forward was shorter than wait and its OpenMP team is smaller than the CPUs the process may
// use, so that the caller never takes a CPU from the team; one caller per thread at a time).
// Zero sleeps at once. On a VM a wake-up from sleep can cost as much as a small model's forward
// (docs/architecture.md); spinning holds a CPU. Defaults: 100 us and 500 us.
func SetHandoffSpin(serve, wait time.Duration) error {
	if serve < 0 || wait < 0 {
		return fmt.Errorf("torch: hand-off spin times must be >= 0, got %v and %v", serve, wait)
	}
	return statusErr(C.ts_set_handoff_spin(C.int64_t(serve.Nanoseconds()), C.int64_t(wait.Nanoseconds())))
}

// HandoffSpin returns the spin times SetHandoffSpin sets.
func HandoffSpin() (serve, wait time.Duration) {
	var s, w C.int64_t
	C.ts_get_handoff_spin(&s, &w)
	return time.Duration(s), time.Duration(w)
}

// ErrThreadClosed is returned by Thread.Do after Close.
var ErrThreadClosed = errors.New("torch: use of a closed Thread")

var (
	threadsMu   sync.Mutex
	liveThreads = map[*Thread]struct{}{}
	lastThreads int // the last count SetNumThreads applied; new threads start with it
)

// NewThread starts a dedicated inference thread. It starts with the intra-op thread count last
// set by SetNumThreads and follows later SetNumThreads calls. Close it when done.
func NewThread() *Thread {
	t := &Thread{done: make(chan struct{})}
	var w *C.ts_worker
	if statusErr(C.ts_worker_new(&w)) == nil {
		t.w = w
	} // else out of memory for a few bytes: the thread runs as a plain channel worker
	if t.w != nil {
		// Buffered: Do sends, then kicks the thread out of C to drain the channel.
		t.jobs = make(chan func(), 16)
	} else {
		t.jobs = make(chan func())
	}
	threadsMu.Lock()
	n := lastThreads
	liveThreads[t] = struct{}{}
	threadsMu.Unlock()
	go t.serve(n)
	return t
}

func (t *Thread) serve(threads int) {
	defer close(t.done)
	runtime.LockOSThread() // never unlocked: the thread keeps its OpenMP pool
	if threads > 0 {
		// A new OS thread reads OMP_NUM_THREADS, not the count set on other threads.
		_ = setOnlyHere(threads)
	}
	if t.w == nil {
		for f := range t.jobs {
			f()
		}
		return
	}
	for {
		more := C.ts_worker_serve(t.w) != 0
		t.runPending()
		if !more {
			return
		}
	}
}

// runPending runs the functions Do has queued.
func (t *Thread) runPending() {
	for {
		select {
		case f := <-t.jobs:
			f()
		default:
			return
		}
	}
}

// Do runs f on the thread and waits for it. f must not call Do or Forward on the same Thread (it
// would wait for itself). After Close, Do returns ErrThreadClosed without running f.
func (t *Thread) Do(f func()) error {
	if t == nil || f == nil || t.done == nil {
		return errors.New("torch: Thread.Do needs a thread from NewThread and a non-nil function")
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return ErrThreadClosed
	}
	done := make(chan struct{})
	t.jobs <- func() { defer close(done); f() }
	if t.w != nil {
		C.ts_worker_kick(t.w)
	}
	<-done
	return nil
}

// Forward runs m's forward on the thread (as ForwardOnThisThread there) and waits for it.
func (t *Thread) Forward(m *Module, inputs ...*Tensor) ([]Output, error) {
	if t == nil || t.done == nil {
		return nil, errors.New("torch: Thread.Forward needs a thread from NewThread")
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return nil, ErrThreadClosed
	}
	if t.w == nil {
		var (
			outs []Output
			err  error
		)
		done := make(chan struct{})
		t.jobs <- func() { defer close(done); outs, err = m.call("forward", inputs, nil, false) }
		<-done
		return outs, err
	}
	defer yieldIfDue()()
	return m.call("forward", inputs, t.w, false)
}

// Close stops the thread after calls in flight return. It is idempotent.
func (t *Thread) Close() error {
	if t == nil || t.done == nil {
		return nil
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	if t.w != nil {
		C.ts_worker_close(t.w)
	} else {
		close(t.jobs)
	}
	t.mu.Unlock()
	<-t.done
	// No call holds the read side and the serving loop has returned: nothing uses w now.
	C.ts_worker_free(t.w)
	threadsMu.Lock()
	delete(liveThreads, t)
	threadsMu.Unlock()
	return nil
}

var (
	defaultOnce   sync.Once
	defaultThread *Thread
)

// worker is the shared thread that Forward, RunMethod and Do use. It is never closed.
func worker() *Thread {
	defaultOnce.Do(func() { defaultThread = NewThread() })
	return defaultThread
}

// Do runs f on the shared inference thread and waits for it. Use it for any libtorch work that
// should share the inference thread's OpenMP pool (calibration runs, timing loops). f must not
// call Do, Forward, RunMethod or SetNumThreads (they would wait for the thread f runs on); call
// the OnThisThread variants inside f.
func Do(f func()) {
	if f == nil {
		return
	}
	// The shared thread is never closed, so Do cannot fail.
	_ = worker().Do(f)
}
