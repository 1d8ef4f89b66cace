// Command torchspeed probes x86 machines, optimizes and quantizes TorchScript models, proves the
// result against the original, and benchmarks it. Results go to stdout, progress and logs to
// stderr. Exit codes are internal/exitcode's: 0 success, 1 runtime failure, 2 bad flags, config
// or input, 3 the optimized model failed validation, 130 interrupted.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// commands are torchspeed's subcommands, in the order help lists them.
var commands = []func(*ui) *cobra.Command{
	newProbeCmd,
	newOptimizeCmd,
	newBenchCmd,
	newRunCmd,
	newCheckCmd,
	newLaunchCmd,
	newServeCmd,
	newExportCmd,
	newConfigCmd,
	newVersionCmd,
	newInternalCmd,
}

func newRootCmd() *cobra.Command {
	u := &ui{}
	root := &cobra.Command{
		Use:           "torchspeed",
		Short:         "Make TorchScript models fast on x86 CPUs, and prove it",
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("torchspeed {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return exitcode.New(exitcode.Usage, err) })
	u.addFlags(root)
	for _, add := range commands {
		root.AddCommand(add(u))
	}
	return root
}

// An instance of `bench --instances` dies with its driver, even one killed with SIGKILL. In
// init, on the main thread, before any other goroutine: see benchrun.FollowDriver.
func init() {
	if err := benchrun.FollowDriver(); err != nil {
		fmt.Fprintln(os.Stderr, "torchspeed:", err)
		os.Exit(exitcode.Failure)
	}
}

func main() {
	inheritCPUCount()
	err := newRootCmd().Execute()
	if err != nil {
		fmt.Fprintln(os.Stderr, "torchspeed:", err)
	}
	os.Exit(exitcode.Of(err))
}
