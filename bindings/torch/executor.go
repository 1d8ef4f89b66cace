package torch

import (
	"errors"
	"runtime"
	"sync"
)

// libtorch's OpenMP pool belongs to the OS thread that calls into it: a call from a new thread
// starts (and keeps spinning) a new pool. Measured on the digits model: 136-184 us per call from
// one locked thread, 650-950 us when calls hopped between 2-3 threads. So inference runs on
// worker goroutines, each locked to its OS thread for life: one shared default Thread (Forward,
// Do), and any number of dedicated ones (NewThread) for callers that run streams side by side.

// Thread is a goroutine locked to one OS thread, with that thread's own OpenMP pool. Do runs
// work on it. It is safe from many goroutines; Close waits for calls in flight.
type Thread struct {
	mu     sync.RWMutex // read side held by Do for the length of a call; Close takes the write side
	closed bool
	jobs   chan func()
	done   chan struct{} // closed when the worker goroutine has returned
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
	t := &Thread{jobs: make(chan func()), done: make(chan struct{})}
	threadsMu.Lock()
	n := lastThreads
	liveThreads[t] = struct{}{}
	threadsMu.Unlock()
	go func() {
		defer close(t.done)
		runtime.LockOSThread() // never unlocked: the thread keeps its OpenMP pool
		if n > 0 {
			// A new OS thread reads OMP_NUM_THREADS, not the count set on other threads.
			_ = setThreadsHere(n)
		}
		for f := range t.jobs {
			f()
		}
	}()
	return t
}

// Do runs f on the thread and waits for it. f must not call Do on the same Thread (it would
// wait for itself). After Close, Do returns ErrThreadClosed without running f.
func (t *Thread) Do(f func()) error {
	if t == nil || f == nil {
		return errors.New("torch: Thread.Do needs a thread from NewThread and a non-nil function")
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return ErrThreadClosed
	}
	done := make(chan struct{})
	t.jobs <- func() { defer close(done); f() }
	<-done
	return nil
}

// Close stops the thread after calls in flight return. It is idempotent.
func (t *Thread) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.jobs)
	t.mu.Unlock()
	<-t.done
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
