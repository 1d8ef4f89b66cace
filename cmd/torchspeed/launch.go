package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/launch"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

type launchCmd struct {
	opts       runenv.Options
	latency    bool
	throughput bool
	printEnv   bool
	asJSON     bool
	quiet      bool

	// The hidden trampoline mode (launch.SelfTrampoline) for callers of pkg/launch that
	// want torchspeed to pin and exec inside the child.
	internalExec    bool
	internalCPUs    string
	internalMemBind int
}

// childExit makes torchspeed exit with the worst instance's code.
type childExit struct {
	code int
	msg  string
}

func (e childExit) Error() string { return e.msg }
func (e childExit) ExitCode() int { return e.code }

func newLaunchCmd() *cobra.Command {
	l := &launchCmd{}
	c := &cobra.Command{
		Use:   "launch [flags] -- COMMAND [ARGS...]",
		Short: "Run any program pinned to cores and a NUMA node with tuned OpenMP and allocator settings, as one or many instances",
		Long: `launch works out per-instance settings from this machine (one thread per physical core,
packed within a NUMA node, within the cgroup's cpuset and quota), then starts COMMAND once
per instance with its CPU affinity and memory policy set before the command's first
instruction (inherited from a pinned launcher thread), and with OMP_NUM_THREADS, OMP_PLACES, OMP_PROC_BIND, OMP_WAIT_POLICY (or the
Intel runtime's KMP_* with --openmp intel), MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, TORCHSPEED_INSTANCE,
TORCHSPEED_INSTANCES and, with --allocator, LD_PRELOAD. Signals (INT, TERM, HUP) go to every
instance; the exit code is the worst instance's. numactl and taskset are not needed.

  torchspeed launch --instances 2 -- sh -c 'grep Cpus_allowed_list /proc/self/status'
  torchspeed launch --latency-mode --allocator jemalloc -- python serve.py
  eval "$(torchspeed launch --print-env --latency-mode)"`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error { return l.run(c, args) },
	}
	f := c.Flags()
	// Flags after COMMAND belong to COMMAND.
	f.SetInterspersed(false)
	o := &l.opts
	f.IntVar(&o.Instances, "instances", 0, "number of instances (0: 1, or one per NUMA node with --throughput-mode)")
	f.IntVar(&o.CoresPerInstance, "cores-per-instance", 0, "physical cores per instance (0: split the usable cores evenly)")
	f.IntVar(&o.ReserveCores, "reserve-cores", 0, "physical cores to leave free, from the first one")
	f.StringVar(&o.CPUs, "cpus", "", "CPUs to use, in list form (0-7,16); default: all this process may use")
	f.IntSliceVar(&o.NUMANodes, "numa-node", nil, "NUMA node(s) to run on (default: all)")
	f.IntVar(&o.Threads, "threads", 0, "intra-op threads per instance (0: one per CPU used)")
	f.IntVar(&o.InteropThreads, "interop-threads", 0, "inter-op threads per instance, passed as TORCHSPEED_INTEROP_THREADS (0: 1)")
	f.StringVar(&o.Allocator, "allocator", "default", "memory allocator to preload: jemalloc, tcmalloc or default (glibc)")
	f.StringVar(&o.WaitPolicy, "wait-policy", "", "OpenMP wait policy: active, or passive (workers sleep at once when idle) (default: the OpenMP runtime's own, measured faster than a passive preset at equal threads; active in throughput mode)")
	f.StringVar(&o.OpenMP, "openmp", "auto", "OpenMP runtime the command uses: auto (the one torchspeed's libtorch loaded), gnu, intel or llvm")
	f.BoolVar(&o.UseSMT, "use-smt", false, "use both hardware threads of each core")
	f.BoolVar(&o.NoMemBind, "no-membind", false, "do not bind memory to the instance's NUMA node")
	f.BoolVar(&o.NoThreadBind, "no-thread-bind", false, "leave out OMP_PROC_BIND/OMP_PLACES (KMP_AFFINITY): use it for Go programs, whose threads would all inherit the first CPU; affinity still confines the instance")
	f.BoolVar(&l.latency, "latency-mode", false, "preset for one request at a time: one instance on one node, passive waiting on few cores")
	f.BoolVar(&l.throughput, "throughput-mode", false, "preset for many requests: one instance per NUMA node, spinning workers")
	f.BoolVar(&l.printEnv, "print-env", false, "print the settings as shell exports (JSON with --json) and start nothing")
	f.BoolVar(&l.asJSON, "json", false, "print settings (--print-env) or the per-instance exit summary as JSON on stdout")
	f.BoolVarP(&l.quiet, "quiet", "q", false, "do not log where each instance runs")
	f.BoolVar(&l.internalExec, "internal-exec", false, "trampoline mode used by launch itself")
	f.StringVar(&l.internalCPUs, "internal-cpus", "", "trampoline: CPUs to pin to")
	f.IntVar(&l.internalMemBind, "internal-membind", -1, "trampoline: NUMA node to bind memory to")
	for _, h := range []string{"internal-exec", "internal-cpus", "internal-membind"} {
		_ = f.MarkHidden(h)
	}
	return c
}

func (l *launchCmd) run(c *cobra.Command, args []string) error {
	if l.internalExec {
		spec := launch.Spec{MemNode: l.internalMemBind}
		var err error
		if spec.CPUs, err = cpu.ParseCPUList(l.internalCPUs); err != nil {
			return usageError{err}
		}
		return launch.Exec(spec, args, c.ErrOrStderr())
	}
	switch {
	case l.latency && l.throughput:
		return usageErrorf("launch: --latency-mode and --throughput-mode exclude each other")
	case l.latency:
		l.opts.Mode = runenv.ModeLatency
	case l.throughput:
		l.opts.Mode = runenv.ModeThroughput
	}
	if !l.printEnv && len(args) == 0 {
		return usageErrorf("launch: no command; give it after --, e.g. torchspeed launch --instances 2 -- python serve.py")
	}
	probe, err := cpu.Detect(cpu.Options{})
	if err != nil {
		return err
	}
	settings, err := runenv.Compute(probe, l.opts)
	if err != nil {
		return usageError{fmt.Errorf("launch: %w", err)}
	}
	out := c.OutOrStdout()
	if l.printEnv {
		if l.asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(settings)
		}
		for _, s := range settings {
			if _, err := fmt.Fprint(out, s.ShellExports()); err != nil {
				return err
			}
		}
		return nil
	}
	// Children start from pinned threads of this process (see pkg/launch): no
	// trampoline, so an instance does not pay for loading libtorch twice.
	cfg := launch.Config{
		Settings: settings,
		Command:  args,
		Stdin:    os.Stdin,
		Stdout:   out,
		Stderr:   c.ErrOrStderr(),
	}
	if !l.quiet {
		cfg.Log = c.ErrOrStderr()
		for _, n := range settings[0].Notes {
			fmt.Fprintf(c.ErrOrStderr(), "torchspeed launch: note: %s\n", n)
		}
	}
	res, err := launch.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
	if l.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	if res.ExitCode != 0 {
		var failed []string
		for _, r := range res.Instances {
			if r.ExitCode != 0 {
				why := fmt.Sprintf("exit %d", r.ExitCode)
				if r.Signal != "" {
					why = "killed by " + r.Signal
				}
				failed = append(failed, fmt.Sprintf("instance %d (%s)", r.Instance, why))
			}
		}
		return childExit{code: res.ExitCode, msg: "launch: " + strings.Join(failed, ", ")}
	}
	return nil
}
