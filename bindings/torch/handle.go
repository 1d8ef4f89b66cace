package torch

import (
	"errors"
	"sync"
)

// guard makes a C handle safe to use from many goroutines and to close while in use: readers
// hold the read side for the length of a C call, calls that change the handle hold the write
// side; Close takes the write side, so it waits for both. A method that holds the guard never
// calls another method that takes it (a second RLock behind a waiting Close deadlocks): it uses
// the *Locked helpers instead.
type guard struct {
	mu     sync.RWMutex
	closed bool
}

func (g *guard) acquire() error {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (g *guard) release() { g.mu.RUnlock() }

func (g *guard) acquireWrite() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	return nil
}

func (g *guard) releaseWrite() { g.mu.Unlock() }

// close runs free once, after in-flight users are done. Later calls do nothing.
func (g *guard) close(free func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.closed = true
	free()
}

// ErrNilHandle is returned by methods called on a nil *Module or *Tensor, or on one not made by
// this package (a zero value).
var ErrNilHandle = errors.New("torch: nil or zero-value handle: make it with Load, NewTensor or a method that returns one")
