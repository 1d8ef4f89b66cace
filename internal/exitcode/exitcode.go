// Package exitcode is the one way an error chooses torchspeed's process exit code (after
// golangci-lint's exitcodes): 0 success, 1 runtime failure, 2 bad flags, config or input,
// 3 the optimized model failed its accuracy thresholds, 130 interrupted. The command's own
// errors carry a code (*Error); the library's carry a class (pkg/tserr), which Of maps here,
// so library packages never import this one.
package exitcode

import (
	"errors"
	"fmt"

	"github.com/torchspeed/torchspeed/pkg/tserr"
)

// Exit codes, as the README documents them.
const (
	OK         = 0
	Failure    = 1 // runtime failure (model, libtorch, I/O)
	Usage      = 2 // bad flags, config or input the user gave
	Validation = 3 // the optimized model failed its accuracy thresholds
	Interrupt  = 130
)

// Error carries an exit code with its cause.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ExitCode is the code the process should exit with.
func (e *Error) ExitCode() int { return e.Code }

// New wraps err with code (nil stays nil).
func New(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Usagef is an error in what the user typed or configured (exit 2).
func Usagef(format string, a ...any) error {
	return &Error{Code: Usage, Err: fmt.Errorf(format, a...)}
}

// Of is the exit code for err: the code of the outermost *Error in its chain (the command's
// choice), else the code of the library's failure class (tserr: bad input, accuracy,
// interrupted), Failure otherwise.
func Of(err error) int {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	switch {
	case errors.Is(err, tserr.ErrBadInput):
		return Usage
	case errors.Is(err, tserr.ErrAccuracy):
		return Validation
	case errors.Is(err, tserr.ErrInterrupted):
		return Interrupt
	}
	return Failure
}
