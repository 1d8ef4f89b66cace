package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// The --runtime choices.
const (
	runtimeTorchspeed = "torchspeed"
	runtimeDefault    = "default"
)

// validateRuntime checks the runtime flags and the serve mode's limits.
func (b *benchCmd) validateRuntime(f *pflag.FlagSet) error {
	switch b.runtime {
	case runtimeTorchspeed:
	case runtimeDefault:
		for _, name := range []string{"allocator", "mode", "numa-node", "interop-threads"} {
			if f.Changed(name) {
				return exitcode.Usagef("bench: --%s applies torchspeed's runtime settings; it cannot be combined with --runtime default", name)
			}
		}
	default:
		return exitcode.Usagef("bench: --runtime %q: want torchspeed (apply torchspeed's settings) or default (libtorch's own)", b.runtime)
	}
	if b.serve && (len(b.models)+len(b.vs) != 1 || b.streams > 1 || b.sweeping()) {
		return exitcode.Usagef("bench: --serve times one model on one stream; drop --vs, --streams and the sweeps")
	}
	return nil
}

// setUpRuntime applies torchspeed's runtime settings, as optimize does (this may re-execute
// the process), and returns them for the report. With --runtime default it changes nothing and
// records only that.
func (b *benchCmd) setUpRuntime(log io.Writer) (map[string]string, error) {
	if b.runtime == runtimeDefault {
		return map[string]string{"runtime": runtimeDefault}, nil
	}
	mode, err := runenv.ParseMode(b.mode)
	if err != nil {
		return nil, exitcode.Usagef("bench: --mode: %v", err)
	}
	o := runenv.Options{Threads: b.threads, InteropThreads: b.interop, Allocator: b.allocator, Mode: mode, NUMANodes: numaNodes(b.numaNode)}
	if b.streams > 1 || b.sweeping() {
		// Each stream sets its own count; the process gets the instance's CPUs.
		o.Threads = 0
	}
	// The wait policy and allocator optimize measured fastest for the (first) artifact, as
	// its manifest records them; an allocator given here wins over the manifest's.
	var cand *runenv.Candidate
	if len(b.models) > 0 && b.mode != string(runenv.ModeThroughput) {
		var warnings []string
		if cand, warnings, err = artifactRuntime(b.models[0]); err != nil {
			return nil, exitcode.New(exitcode.Usage, fmt.Errorf("bench: %w", err))
		}
		for _, w := range warnings {
			fmt.Fprintln(log, "bench: warning:", w)
		}
		if cand != nil && b.allocator != "" && b.allocator != "default" {
			cand.Allocator, cand.AllocatorPath = "", ""
		}
	}
	_, s, applied, warnings, err := setUpRuntime(o, cand)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for _, w := range warnings {
		fmt.Fprintln(log, "bench: warning:", w)
	}
	m := settingsMap(s, applied)
	m["runtime"] = runtimeTorchspeed
	if cand != nil {
		m["runtime_candidate"] = cand.Name
	}
	return m, nil
}
