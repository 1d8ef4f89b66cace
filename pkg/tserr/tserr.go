// Package tserr holds the classes of failure torchspeed's library packages report, as sentinel
// errors a caller matches with errors.Is:
//
//	rep, err := pipeline.Run(ctx, cfg, opts)
//	switch {
//	case errors.Is(err, tserr.ErrBadInput):    // fix the config, flags, model or data
//	case errors.Is(err, tserr.ErrAccuracy):    // rep holds the failed validation
//	case errors.Is(err, tserr.ErrInterrupted): // ctx was canceled
//	case err != nil:                           // a runtime failure: the model, libtorch, I/O
//	}
//
// A classed error keeps its cause's message and chain (errors.As still finds a *torch.Error or
// a *pipeline.ValidationError in it). The library never chooses a process exit code; the
// torchspeed command maps these classes to its documented exit codes.
package tserr

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrBadInput: what the caller gave (a config value, flag, model file, data file or output
	// path) is wrong; the message names it and what to do. Retrying without changing it fails
	// the same way.
	ErrBadInput = errors.New("bad input")
	// ErrAccuracy: the optimized model failed its accuracy thresholds.
	ErrAccuracy = errors.New("the optimized model failed its accuracy thresholds")
	// ErrInterrupted is context.Canceled: the caller's context was canceled before the work was
	// done (nothing was written). A context past its deadline is context.DeadlineExceeded,
	// not this class.
	ErrInterrupted = context.Canceled
)

// classed is an error of a known class: its message is its cause's, and errors.Is matches both
// the class and everything in the cause's chain.
type classed struct {
	class error
	err   error
}

func (e *classed) Error() string   { return e.err.Error() }
func (e *classed) Unwrap() []error { return []error{e.err, e.class} }

// BadInput marks err as bad input (ErrBadInput), keeping its message; nil stays nil.
func BadInput(err error) error {
	if err == nil {
		return nil
	}
	return &classed{class: ErrBadInput, err: err}
}

// BadInputf is BadInput(fmt.Errorf(format, a...)).
func BadInputf(format string, a ...any) error {
	return BadInput(fmt.Errorf(format, a...))
}
