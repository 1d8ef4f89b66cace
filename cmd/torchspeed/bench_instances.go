package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/launch"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// validateInstances checks --instances against the other flags, before anything starts.
func (b *benchCmd) validateInstances(f *pflag.FlagSet) error {
	if b.instances < 0 {
		return exitcode.Usagef("bench: --instances %d: must be 1 or more (0, the default, measures in this process)", b.instances)
	}
	if b.instances == 0 {
		return nil
	}
	switch {
	case b.serve:
		return exitcode.Usagef("bench: --instances starts --serve processes itself; drop --serve")
	case len(b.models)+len(b.vs) > 1:
		return exitcode.Usagef("bench: --instances measures one model; drop --vs and the other -m, or run bench once per model")
	case b.streams > 1:
		return exitcode.Usagef("bench: --instances %d and --streams %d: each instance runs one stream; use --instances for N processes or --streams for N streams in one process", b.instances, b.streams)
	case b.sweeping():
		return exitcode.Usagef("bench: --instances cannot be combined with --sweep-batch, --sweep-threads or --sweep-streams; sweep with --streams in one process")
	case f.Changed("duration") || b.duration > 0:
		return exitcode.Usagef("bench: --instances times a count of runs per instance; give --runs instead of --duration")
	case b.runtime != runtimeTorchspeed:
		return exitcode.Usagef("bench: --instances pins each instance with torchspeed's runtime settings; it cannot be combined with --runtime %s", b.runtime)
	}
	return nil
}

// instanceSettings computes each instance's settings as `torchspeed launch --instances N`
// does, throughput mode unless --mode (or runtime.mode) chose another.
func (b *benchCmd) instanceSettings(f *pflag.FlagSet) ([]runenv.Settings, error) {
	mode := runenv.ModeThroughput
	if f.Changed("mode") || b.modeSet {
		var err error
		if mode, err = runenv.ParseMode(b.mode); err != nil {
			return nil, exitcode.Usagef("bench: --mode: %v", err)
		}
	}
	probe, err := cpu.Detect(cpu.Options{})
	if err != nil {
		return nil, err
	}
	settings, err := runenv.Compute(probe, runenv.Options{
		Instances: b.instances, Threads: b.threads, InteropThreads: b.interop, Allocator: b.allocator,
		Mode: mode, NUMANodes: numaNodes(b.numaNode),
		// Each instance is a Go process (bench --serve): OpenMP's thread binding would pin
		// all its Go threads to the first CPU (see setUpRuntime); affinity confines it.
		NoThreadBind: true,
	})
	if err != nil {
		return nil, exitcode.New(exitcode.Usage, fmt.Errorf("bench: %w", err))
	}
	return settings, nil
}

// serveArgs is instance i's command: this binary's hidden serve mode on the instance's
// threads, with libtorch's runtime left as the launch set it up.
func (b *benchCmd) serveArgs(exe string, spec benchrun.ModelSpec, s runenv.Settings, i int) []string {
	args := []string{exe, "bench", "--serve", "--runtime", runtimeDefault, "-m", spec.Path,
		"--threads", strconv.Itoa(s.Threads), "--warmup", strconv.Itoa(b.warmup),
		// Each its own inputs, as each stream of --streams has.
		"--seed", strconv.FormatUint(b.seed+uint64(i), 10)}
	for _, sh := range b.shapes {
		args = append(args, "--input-shape", sh)
	}
	for _, dt := range b.dtypes {
		args = append(args, "--dtype", dt)
	}
	for _, l := range b.opLibs {
		args = append(args, "--op-library", l)
	}
	for _, in := range b.values {
		args = append(args, "--input", in)
	}
	if b.method != "" {
		args = append(args, "--method", b.method)
	}
	if b.config != "" && b.cfgInputs != nil {
		args = append(args, "-c", b.config) // its model.inputs give the values
	}
	return args
}

// runInstances measures throughput with --instances processes: it computes their settings,
// starts each through launch's trampoline (pinned and bound before its first instruction)
// running `bench --serve`, times --runs inferences on all at once (benchrun.RunInstances)
// and reports the result as a throughput run of one stream per instance.
func (b *benchCmd) runInstances(c *cobra.Command, spec benchrun.ModelSpec, outs outputs) error {
	progress := b.ui.logOrDiscard(c.ErrOrStderr())
	settings, err := b.instanceSettings(c.Flags())
	if err != nil {
		return err
	}
	for _, n := range settings[0].Notes {
		fmt.Fprintf(progress, "bench: note: %s\n", n)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: --instances: find this program to start it again: %w", err)
	}
	env, _ := captureEnv()
	hash, err := bench.HashFile(spec.Path)
	if err != nil {
		return err
	}
	env.ModelHashes = map[string]string{spec.Name: hash}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(progress, "bench: %s: %d instances x %d threads, %d runs each...\n", spec.Name, len(settings), settings[0].Threads, b.runs)
	res, err := benchrun.RunInstances(ctx, benchrun.InstancesConfig{
		Name:       spec.Name,
		Settings:   settings,
		Trampoline: launch.SelfTrampoline(exe),
		Command:    func(i int) []string { return b.serveArgs(exe, spec, settings[i], i) },
		Runs:       b.runs,
		Stderr:     progress,
		Log:        progress,
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return exitcode.New(exitcode.Interrupt, errors.New("bench: interrupted; the instances were stopped"))
		}
		return err
	}

	// The environment the instances ran in: their threads, CPUs and OpenMP variables.
	s0, ready := settings[0], res.Ready[0]
	env.Threads, env.InteropThreads = s0.Threads, s0.InteropThreads
	if q := ready["quantized_engine"]; q != "" {
		env.QuantizedEngine = q
	}
	var used cpu.CPUSet
	for _, s := range settings {
		used = used.Union(s.CPUs)
	}
	env.CPUsUsed = used
	env.OpenMPEnv = map[string]string{}
	for _, v := range s0.Vars {
		if strings.HasPrefix(v.Name, "OMP_") || strings.HasPrefix(v.Name, "GOMP_") || strings.HasPrefix(v.Name, "KMP_") ||
			strings.HasPrefix(v.Name, "MKL_") || strings.HasPrefix(v.Name, "OPENBLAS_") {
			env.OpenMPEnv[v.Name] = v.Value
		}
	}
	if ready["input-shape"] != "" && len(b.shapes) == 0 {
		b.shapes = []string{ready["input-shape"]} // from an artifact's manifest
	}
	rep := &bench.RunReport{Environment: env, Settings: b.settings(), Throughput: res.Throughput}
	for k, v := range settingsMap(s0, nil) {
		rep.Settings[k] = v
	}
	// What differs between instances is listed per instance.
	for _, k := range []string{"cpus", "numa_node", "env TORCHSPEED_INSTANCE", "env TORCHSPEED_CPUS", "env TORCHSPEED_NUMA_NODE", "env OMP_PLACES"} {
		delete(rep.Settings, k)
	}
	rep.Settings["runtime"] = runtimeTorchspeed
	rep.Settings["instances"] = strconv.Itoa(len(settings))
	for i, s := range settings {
		rep.Settings[fmt.Sprintf("instance %d cpus", i)] = s.CPUs.String()
		rep.Settings[fmt.Sprintf("instance %d numa_node", i)] = strconv.Itoa(s.NUMANode)
	}
	return b.write(c.OutOrStdout(), progress, rep, outs)
}
