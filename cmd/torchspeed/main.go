// Command torchspeed probes x86 machines, optimizes and quantizes TorchScript models, proves the
// result against the original, and benchmarks it. Results go to stdout, progress and logs to
// stderr.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// Exit codes: scripts tell a bad config from a model that failed validation.
const (
	exitOK         = 0
	exitError      = 1 // runtime failure (model, libtorch, I/O)
	exitUsage      = 2 // bad flags or config
	exitValidation = 3 // the optimized model failed its accuracy thresholds
	exitInterrupt  = 130
)

// usageError marks errors caused by what the user typed or configured.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitCoder lets an error choose the process exit code.
type exitCoder interface{ ExitCode() int }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "torchspeed",
		Short:         "Make TorchScript models fast on x86 CPUs, and prove it",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newVersionCmd(), newRunCmd(), newOptimizeCmd(), newExportCmd())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	return root
}

// extraCommands are registered by the files that define them.
var extraCommands []func() *cobra.Command

func main() {
	err := newRootCmd().Execute()
	if err == nil {
		os.Exit(exitOK)
	}
	fmt.Fprintln(os.Stderr, "torchspeed:", err)
	var ec exitCoder
	var ue usageError
	switch {
	case errors.As(err, &ec):
		os.Exit(ec.ExitCode())
	case errors.As(err, &ue):
		os.Exit(exitUsage)
	default:
		os.Exit(exitError)
	}
}
