// Command torchspeed probes x86 machines, optimizes and quantizes TorchScript models, proves the
// result against the original, and benchmarks it. Results go to stdout, progress and logs to
// stderr. Exit codes are internal/exitcode's: 0 success, 1 runtime failure, 2 bad flags, config
// or input, 3 the optimized model failed validation, 130 interrupted.
package main

import (
	"fmt"
	"os"
	"strings"

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
	root.SetUsageTemplate(wrappedUsage(root.UsageTemplate()))
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return exitcode.New(exitcode.Usage, err) })
	u.addFlags(root)
	for _, add := range commands {
		root.AddCommand(add(u))
	}
	usageArgs(root)
	return root
}

// usageArgs makes a wrong positional argument (`bench model.pt` for `bench -m model.pt`)
// bad input, exit 2, as a wrong flag is: cobra reports both before any work.
func usageArgs(c *cobra.Command) {
	if args := c.Args; args != nil {
		c.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return exitcode.New(exitcode.Usage, fmt.Errorf("%w; see %s --help", err, c.CommandPath()))
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// helpWidth is the widest line --help prints: flag texts wrap there, so each flag's
// explanation stays readable on an 80- to 100-column terminal.
const helpWidth = 100

// wrappedUsage is cobra's usage template with flag texts wrapped at helpWidth columns.
func wrappedUsage(tmpl string) string {
	wrap := fmt.Sprintf("FlagUsagesWrapped %d", helpWidth)
	return strings.ReplaceAll(tmpl, "FlagUsages", wrap)
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
