package benchrun

import (
	"fmt"
	"sync"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// Calls gives the arguments of each call of a method that takes more than tensors
// (callargs.Plan): Calls is the length of its sequences (0: the same arguments every call).
type Calls interface {
	Calls() int
	Args(i int) []*torch.Value
}

// SessionTarget is one stream of calls of a method on a torchspeed.Session, as a
// bench.Target: a stateful model's stream has its own copy of the module, reset first, and
// replays the sequences in order; at their end it is reset and starts over (the reset is
// timed with that call). A stateless model's session shares the module. Calls run on the
// calling thread, as ModuleTarget's do. Close it when done.
type SessionTarget struct {
	name   string
	method string
	s      *torchspeed.Session
	calls  Calls
	next   int
	reset  bool
}

// SessionTarget starts a stream of method calls with calls' arguments.
func (l *Loaded) SessionTarget(method string, calls Calls) (*SessionTarget, error) {
	s, err := l.Model.NewSession(torchspeed.SessionOptions{CallerThread: true})
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", l.Spec.Name, err)
	}
	return &SessionTarget{name: l.Spec.Name, method: method, s: s, calls: calls, reset: l.Model.Stateful()}, nil
}

// Name returns the name the model is reported under.
func (t *SessionTarget) Name() string { return t.name }

// Run makes the stream's next call and releases its result.
func (t *SessionTarget) Run() error {
	if n := t.calls.Calls(); n > 0 && t.next == n {
		if t.reset {
			if err := t.s.Reset(); err != nil {
				return err
			}
		}
		t.next = 0
	}
	v, err := t.s.RunMethod(t.method, t.calls.Args(t.next)...)
	t.next++
	if err != nil {
		return err
	}
	return v.Close()
}

// Close ends the stream (a stateful model's copy is freed).
func (t *SessionTarget) Close() error { return t.s.Close() }

// RunSessionStreams is RunStreams for a method called with calls' arguments: each stream gets
// its own session (its own copy of a stateful module; a stateless one is shared) and replays
// the sequences from a reset state.
func RunSessionStreams(l *Loaded, method string, calls Calls, threads, streams int, o bench.Options) (*bench.ThroughputResult, error) {
	var mu sync.Mutex
	var made []*SessionTarget
	defer func() {
		for _, t := range made {
			t.Close()
		}
	}()
	factory := func(int) (bench.Target, error) {
		// On the stream's own locked thread, whose OpenMP pool the count applies to.
		if err := torch.SetNumThreads(threads); err != nil {
			return nil, err
		}
		t, err := l.SessionTarget(method, calls)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		made = append(made, t)
		mu.Unlock()
		return t, nil
	}
	r, err := bench.Throughput(l.Spec.Name, factory, bench.ThroughputOptions{Options: o, Streams: streams, Batch: 1})
	if err != nil {
		return nil, err
	}
	r.Threads = threads
	return r, nil
}
