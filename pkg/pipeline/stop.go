package pipeline

import (
	"os"
	"sync"
)

// Stop ends a run from outside when its context's cancellation cannot: libtorch cannot
// interrupt a model call, and a model whose forward loops holds the run for as long as it
// loops. A caller that has canceled the context and waited long enough calls Now, then exits
// the process.
type Stop struct {
	mu      sync.Mutex // held by a commit, and by Now for good
	stopped bool
	out     *output
	stages  map[string]bool
}

// Now waits for a commit in progress (the output folder then holds the old files or all the new
// ones, never a mix), removes the run's staging folder and the folders it created (when still
// empty), and keeps any later commit from starting. It does not return the lock: the caller is
// expected to exit.
func (s *Stop) Now() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.stopped = true
	for stage := range s.stages {
		os.RemoveAll(stage)
	}
	if s.out != nil {
		s.out.abandon()
	}
}

// track records the run's output, once prepared.
func (s *Stop) track(out *output) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out = out
}

// stage records (add) or forgets a staging folder; false when the run was stopped.
func (s *Stop) stage(dir string, add bool) bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stages == nil {
		s.stages = map[string]bool{}
	}
	if add {
		s.stages[dir] = true
	} else {
		delete(s.stages, dir)
	}
	return !s.stopped
}

// commitLock holds off Now while a commit moves files; ok is false when the run was stopped.
func (s *Stop) commitLock() (unlock func(), ok bool) {
	if s == nil {
		return func() {}, true
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, false
	}
	return s.mu.Unlock, true
}
