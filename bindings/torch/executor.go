package torch

import (
	"runtime"
	"sync"
)

// libtorch's OpenMP pool belongs to the OS thread that calls into it: a call from a new thread
// starts (and keeps spinning) a new pool. Measured on the digits model: 136-184 us per call from
// one locked thread, 650-950 us when calls hopped between 2-3 threads. So inference runs on a
// small set of worker goroutines, each locked to its OS thread for life.

type executor struct {
	mu      sync.RWMutex // read side held by callers in do/broadcast; stop takes the write side
	jobs    chan func()
	workers []chan func() // per-worker queues, for broadcasts
	wg      sync.WaitGroup
}

func newExecutor(n int) *executor {
	e := &executor{jobs: make(chan func())}
	for i := 0; i < n; i++ {
		own := make(chan func())
		e.workers = append(e.workers, own)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			runtime.LockOSThread() // never unlocked: the thread keeps its OpenMP pool
			for {
				select {
				case f, ok := <-e.jobs:
					if !ok {
						return
					}
					f()
				case f, ok := <-own:
					if !ok {
						return
					}
					f()
				}
			}
		}()
	}
	return e
}

// do runs f on one worker thread and waits for it.
func (e *executor) do(f func()) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	done := make(chan struct{})
	e.jobs <- func() { defer close(done); f() }
	<-done
}

// broadcast runs f once on every worker thread and waits for all.
func (e *executor) broadcast(f func()) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var wg sync.WaitGroup
	for _, w := range e.workers {
		wg.Add(1)
		w <- func() { defer wg.Done(); f() }
	}
	wg.Wait()
}

func (e *executor) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	close(e.jobs)
	for _, w := range e.workers {
		close(w)
	}
	e.wg.Wait()
}

var (
	execMu      sync.Mutex
	defaultExec *executor
	execWorkers = 1
)

func getExecutor() *executor {
	execMu.Lock()
	defer execMu.Unlock()
	if defaultExec == nil {
		defaultExec = newExecutor(execWorkers)
	}
	return defaultExec
}

// SetWorkers sets how many locked OS threads run inference calls made through Forward. One (the
// default) suits latency: each call already uses all intra-op threads. Throughput setups with
// several streams want one worker per stream. In-flight calls finish on the old workers.
func SetWorkers(n int) {
	if n < 1 {
		n = 1
	}
	execMu.Lock()
	old := defaultExec
	execWorkers = n
	defaultExec = nil
	execMu.Unlock()
	if old != nil {
		go old.stop()
	}
}

// Workers reports the number of inference worker threads.
func Workers() int {
	execMu.Lock()
	defer execMu.Unlock()
	return execWorkers
}

// Do runs f on an inference worker thread and waits for it. Use it for any libtorch work that
// should share the inference threads' OpenMP pools (calibration runs, timing loops).
func Do(f func()) { getExecutor().do(f) }
