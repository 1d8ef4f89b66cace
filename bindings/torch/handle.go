package torch

import "sync"

// guard makes a C handle safe to use from many goroutines and to close while in use: users hold
// the read side for the length of a C call; Close takes the write side, so it waits for them.
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
