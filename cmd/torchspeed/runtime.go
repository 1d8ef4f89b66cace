package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// The runtime settings shared by the commands that run models (optimize, bench): one
// implementation, so both measure under the same conditions and report them alike.

// settingsEnv carries the parent's settings into the re-executed process: once libgomp has
// read OMP_PROC_BIND it binds the initial thread to the first place, so a second probe there
// would see one CPU and compute different settings.
const settingsEnv = "TORCHSPEED_RUNTIME_SETTINGS"

// cpusEnv carries the parent's count of available CPUs into the re-executed process, which
// starts pinned to the CPUs its settings chose: its flags and config are checked again there,
// against the count the user's values were checked against, not the smaller pinned set.
const cpusEnv = "TORCHSPEED_AVAILABLE_CPUS"

// inheritCPUCount makes a re-executed process check thread counts against its parent's CPUs.
func inheritCPUCount() {
	if os.Getenv(runenv.ReexecMarker) == "" {
		return
	}
	if n, err := strconv.Atoi(os.Getenv(cpusEnv)); err == nil && n > 0 {
		config.AvailableCPUs = func() int { return n }
	}
}

// setUpRuntime computes the runtime settings for this process, with cand's wait policy and
// allocator when cand is not nil (an artifact's measured runtime, see artifactRuntime),
// re-executes it when the OpenMP variables or the allocator need a fresh start, then pins and
// binds it and sets libtorch's thread counts.
func setUpRuntime(o runenv.Options, cand *runenv.Candidate) (*cpu.Probe, runenv.Settings, []string, []string, error) {
	probe, err := cpu.Detect(cpu.Options{})
	if err != nil {
		return nil, runenv.Settings{}, nil, nil, err
	}
	var s runenv.Settings
	if raw := os.Getenv(settingsEnv); raw != "" && os.Getenv(runenv.ReexecMarker) != "" {
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			return nil, s, nil, nil, fmt.Errorf("%s: %w", settingsEnv, err)
		}
	} else {
		// torchspeed is a Go process: OpenMP thread binding would pin every Go thread to the
		// first CPU (measured: a transformer 33% slower at one thread); affinity confines it.
		o.NoThreadBind = true
		settings, err := runenv.Compute(probe, o)
		if err != nil {
			return nil, s, nil, nil, exitcode.New(exitcode.Usage, fmt.Errorf("runtime settings: %w", err))
		}
		s = settings[0]
		if cand != nil {
			if s, err = cand.Apply(s); err != nil {
				return nil, s, nil, nil, err
			}
		}
		raw, err := json.Marshal(s)
		if err != nil {
			return nil, s, nil, nil, err
		}
		os.Setenv(settingsEnv, string(raw))
		os.Setenv(cpusEnv, strconv.Itoa(config.AvailableCPUs()))
		if _, err := runenv.EnsureEnv(s); err != nil {
			return nil, s, nil, nil, err
		}
	}
	applied, warnings, err := runenv.ApplyInProcess(s)
	if err != nil {
		return nil, s, nil, nil, err
	}
	if err := torch.SetNumInteropThreads(max(1, s.InteropThreads)); err != nil {
		return nil, s, nil, nil, err
	}
	if err := torch.SetNumThreads(s.Threads); err != nil {
		return nil, s, nil, nil, err
	}
	return probe, s, applied, warnings, nil
}

func numaNodes(n int) []int {
	if n < 0 {
		return nil
	}
	return []int{n}
}

func settingsMap(s runenv.Settings, applied []string) map[string]string {
	m := map[string]string{
		"cpus":            s.CPUs.String(),
		"threads":         fmt.Sprint(s.Threads),
		"interop_threads": fmt.Sprint(s.InteropThreads),
		"openmp":          s.OpenMP,
		"mode":            string(s.Mode),
		"allocator":       orDash(s.Allocator),
		"numa_node":       fmt.Sprint(s.NUMANode),
	}
	// The BLAS libtorch calls for float matmul; its thread count follows "threads".
	if b, err := torch.BLAS(); err == nil && b.Library != "" {
		m["blas"] = b.Config + ", " + b.Threading
	}
	for _, v := range s.Vars {
		m["env "+v.Name] = v.Value
	}
	for i, a := range applied {
		m[fmt.Sprintf("applied %d", i+1)] = a
	}
	return m
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// artifactRuntime returns the runtime setting optimize measured fastest for the artifact at
// path (its manifest's runtime), ready to apply, or nil when the file is not an artifact or
// its runtime was not measured (or is libtorch's defaults). A manifest naming an allocator
// this machine lacks is an error that says which package to install; warnings name what was
// left out because this machine cannot run it (runenv.Candidate.Fit).
func artifactRuntime(path string) (*runenv.Candidate, []string, error) {
	man, err := torchspeed.VerifyArchive(path)
	if err != nil || man == nil {
		// Not an artifact, or a damaged one: loading it says what is wrong.
		return nil, nil, nil
	}
	return manifestRuntime(path, man)
}

// manifestRuntime is artifactRuntime for a manifest already read and verified from path.
func manifestRuntime(path string, man *torchspeed.Manifest) (*runenv.Candidate, []string, error) {
	rt := man.Runtime
	if rt.Candidate == "" || rt.Candidate == runenv.DefaultCandidate {
		return nil, nil, nil
	}
	c := rt.Setting()
	c, err := c.Resolve(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("artifact %q was measured fastest with %w, or choose another --allocator", path, err)
	}
	// The artifact may have been measured on another machine: its ATen and OpenBLAS kernels
	// may need instructions this CPU lacks, its huge pages a kernel or glibc it lacks.
	probe, err := cpu.Detect(cpu.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("artifact %q: read this CPU's instruction sets for its runtime settings: %w", path, err)
	}
	c, warnings := c.Fit(runenv.MachineOf(probe), man.CPU.Name())
	return &c, warnings, nil
}

// applyArtifact puts the runtime setting measured for --artifact into every instance's
// settings, leaving out what --wait-policy or --allocator chose.
func (l *launchCmd) applyArtifact(c *cobra.Command, settings []runenv.Settings) error {
	if l.artifact == "" {
		return nil
	}
	man, err := torchspeed.VerifyArchive(l.artifact)
	if err != nil {
		return exitcode.New(exitcode.Usage, fmt.Errorf("launch: --artifact: %w", err))
	}
	if man == nil {
		return exitcode.Usagef("launch: --artifact %q: not a torchspeed artifact (no manifest); give the .torchspeed.pt that optimize wrote", l.artifact)
	}
	cand, warnings, err := manifestRuntime(l.artifact, man)
	if err != nil {
		return exitcode.New(exitcode.Usage, fmt.Errorf("launch: %w", err))
	}
	for _, w := range warnings {
		fmt.Fprintln(c.ErrOrStderr(), "launch: warning:", w)
	}
	if cand == nil {
		return nil // measured: libtorch's defaults won (or not measured)
	}
	f := c.Flags()
	for i := range settings {
		cc := *cand
		if f.Changed("wait-policy") || settings[i].Mode == runenv.ModeThroughput {
			// The user's choice, or throughput mode's spinning: measured for one request at
			// a time, the artifact's policy is not for many.
			cc.WaitPolicy, cc.SpinCount = settings[i].WaitPolicy, settings[i].SpinCount
		}
		if f.Changed("allocator") {
			cc.Allocator, cc.AllocatorPath = "", "" // keeps the settings' own
		}
		if settings[i], err = cc.Apply(settings[i]); err != nil {
			return exitcode.New(exitcode.Usage, fmt.Errorf("launch: --artifact: %w", err))
		}
	}
	return nil
}
