package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/callargs"
	"github.com/torchspeed/torchspeed/pkg/config"
)

// sweeping reports whether any sweep flag was given.
func (b *benchCmd) sweeping() bool { return len(b.sweepB)+len(b.sweepT)+len(b.sweepS) > 0 }

// loadConfig merges flags, TORCHSPEED_* variables, the config file (with or without -c) and
// the defaults, and takes the model and its inputs from the file when no flag gave them.
func (b *benchCmd) loadConfig(c *cobra.Command) error {
	cfg, err := loadConfig("bench", b.config, c.Flags(), benchKeys, false)
	if err != nil {
		return err
	}
	b.runs, b.duration, b.warmup, b.seed = cfg.Bench.Runs, cfg.Bench.Duration, cfg.Bench.Warmup, cfg.Bench.Seed
	b.threads, b.interop, b.numaNode = cfg.Runtime.Threads, cfg.Runtime.InteropThreads, cfg.Runtime.NUMANode
	b.allocator, b.mode, b.modeSet = cfg.Runtime.Allocator, cfg.Runtime.Mode, cfg.Given("runtime.mode")
	if b.duration > 0 && !c.Flags().Changed("runs") {
		b.runs = 0 // a duration given anywhere replaces the default count
	}
	if b.outDir == "" && cfg.Given("output.dir") {
		b.outDir = cfg.Output.Dir
	}
	if len(b.models) == 0 && cfg.Model.Path != "" {
		b.models = []string{cfg.Model.Path}
	}
	if b.method == "" {
		b.method = cfg.Model.Method
	}
	b.reset = cfg.Model.ResetMethod
	b.opLibs = cfg.Model.OpLibraries
	if givesValues(cfg.Model.Inputs) {
		b.cfgInputs = cfg.Model.Inputs
	} else if len(b.shapes) == 0 && len(cfg.Model.Inputs) > 0 {
		b.dtypes = nil
		for _, in := range cfg.Model.Inputs {
			b.shapes = append(b.shapes, config.FormatShape(in.Shape))
			b.dtypes = append(b.dtypes, in.DType)
		}
	}
	return nil
}

// validate checks the flags before anything is loaded or measured.
func (b *benchCmd) validate(c *cobra.Command) error {
	f := c.Flags()
	if len(b.models) == 0 {
		return exitcode.Usagef("bench: --model is required, e.g. -m resnet18.pt")
	}
	if len(b.dtypes) > len(b.shapes) {
		return exitcode.Usagef("bench: %d --dtype values for %d --input-shape inputs; give one per input", len(b.dtypes), len(b.shapes))
	}
	switch {
	case f.Changed("duration") && b.duration <= 0:
		return exitcode.Usagef("bench: --duration %v: must be positive, e.g. --duration 10s", b.duration)
	case b.duration > 0 && f.Changed("runs"):
		return exitcode.Usagef("bench: --runs and --duration (or bench.duration) both given; choose one")
	case b.duration <= 0 && b.runs <= 0:
		return exitcode.Usagef("bench: --runs %d: must be 1 or more (200 is a good start; >= 6 for a confidence interval)", b.runs)
	case b.warmup < 0:
		return exitcode.Usagef("bench: --warmup %d: must be 0 or more", b.warmup)
	case b.streams < 1:
		return exitcode.Usagef("bench: --streams %d: must be 1 or more", b.streams)
	case b.budget < 0:
		return exitcode.Usagef("bench: --latency-budget %v: must be positive", b.budget)
	case b.intrDur != 0 && (b.intrDur < 10*time.Millisecond || b.intrDur > time.Minute):
		return exitcode.Usagef("bench: --interrupts %v: want 0 (skip) or 10ms to 1m", b.intrDur)
	}
	if _, err := bench.ParseOrder(b.order); err != nil {
		return exitcode.Usagef("bench: --order: %v", err)
	}
	for _, n := range b.sweepB {
		if n < 1 || n > bench.MaxSweepBatch {
			return exitcode.Usagef("bench: --sweep-batch %d: want 1 to %d", n, bench.MaxSweepBatch)
		}
	}
	for _, t := range b.sweepT {
		if err := config.CheckThreads("bench: --sweep-threads", t, ""); err != nil {
			return exitcode.New(exitcode.Usage, err)
		}
	}
	if err := b.validateRuntime(f); err != nil {
		return err
	}
	if err := b.validateInstances(f); err != nil {
		return err
	}
	n := len(b.models) + len(b.vs)
	if n > 1 && (b.streams > 1 || b.sweeping()) {
		return exitcode.Usagef("bench: throughput mode (--streams) and sweeps measure one model; compare models without them, or run bench once per model")
	}
	if b.asJSON && b.csvPath == "-" {
		return exitcode.Usagef("bench: --json and --csv - both print the report on stdout; choose one, or give --csv a file")
	}
	if b.profile && b.csvPath == "-" && b.outDir == "" {
		return exitcode.Usagef("bench: --profile with --csv -: stdout holds one CSV table, the results; give --csv a file (the ops go to FILE_ops.csv) or -o DIR (bench_ops.csv)")
	}
	if b.profile && (b.streams > 1 || b.sweeping() || b.instances > 0 || b.serve) {
		return exitcode.Usagef("bench: --profile times one model's forward at a time; drop --streams, --instances and the sweeps, or profile in a separate run")
	}
	if b.sweeping() && f.Changed("streams") {
		return exitcode.Usagef("bench: --streams and --sweep-streams both given; use --sweep-streams 1,%d", b.streams)
	}
	return nil
}

// specs names the models: the file name, or the path when two files share a name, with "#2"
// for the same path given twice (an A/A check).
func (b *benchCmd) specs() []benchrun.ModelSpec {
	paths := append(append([]string{}, b.models...), b.vs...)
	// How many different paths share each file name.
	base := map[string]map[string]bool{}
	for _, p := range paths {
		b := filepath.Base(p)
		if base[b] == nil {
			base[b] = map[string]bool{}
		}
		base[b][filepath.Clean(p)] = true
	}
	seen := map[string]int{}
	var out []benchrun.ModelSpec
	for _, p := range paths {
		name := filepath.Base(p)
		if len(base[name]) > 1 {
			name = p
		}
		seen[name]++
		if k := seen[name]; k > 1 {
			name = fmt.Sprintf("%s#%d", name, k)
		}
		out = append(out, benchrun.ModelSpec{Path: p, Name: name, Method: b.method, ResetMethod: b.reset})
	}
	return out
}

// inputs are the inputs to make: from --input-shape (or the config), else from the first
// artifact's manifest; each checked for size before anything is allocated.
func (b *benchCmd) inputs(models []*benchrun.Loaded) ([]benchrun.InputSpec, error) {
	what := "--input-shape"
	if len(b.shapes) == 0 {
		for _, l := range models {
			if man := l.Model.Manifest; man != nil && len(man.Inputs) > 0 {
				for _, in := range man.Inputs {
					b.shapes = append(b.shapes, config.FormatShape(in.Shape))
					b.dtypes = append(b.dtypes, in.DType)
				}
				what = fmt.Sprintf("the manifest of %s", l.Spec.Name)
				break
			}
		}
	}
	if len(b.shapes) == 0 {
		return nil, exitcode.Usagef("bench: give the model's inputs with --input-shape, e.g. --input-shape 1x3x224x224 (repeat for several inputs); " +
			"only artifacts made by torchspeed optimize list them")
	}
	return parseInputs("bench: "+what, b.shapes, b.dtypes)
}

// chooseThreads settles the thread count: the user's, the artifact's (bounded by the CPUs
// here), a measurement, or the CPUs shared among streams (bench.ThreadPlan).
func (b *benchCmd) chooseThreads(c *cobra.Command, models []*benchrun.Loaded, ins []benchrun.InputSpec, plans []*callargs.Plan, avail int, log io.Writer) error {
	plan := bench.ThreadPlan{Chosen: b.threads, Default: torch.NumThreads(), Streams: b.streams, AvailableCPUs: avail}
	if man := models[0].Model.Manifest; man != nil && man.Runtime.Threads != 0 {
		n, warning := config.ClampThreads("the manifest of "+models[0].Spec.Name, man.Runtime.Threads)
		if warning != "" {
			fmt.Fprintln(c.ErrOrStderr(), "bench: warning:", warning)
		}
		plan.Manifest, plan.ManifestOf = n, models[0].Spec.Name
	}
	if b.streams == 1 && !b.sweeping() && b.runtime == runtimeTorchspeed {
		plan.Measure = func(counts []int) (bench.ThreadChoice, error) {
			t, done, err := b.target(models[0], ins, plans)
			if err != nil {
				return bench.ThreadChoice{}, err
			}
			defer done()
			var ch bench.ThreadChoice
			// The timing runs on the inference worker (t.Run stays on its thread), so the
			// count is switched for that thread only, then set everywhere.
			torch.Do(func() { ch, err = bench.ChooseThreads(counts, torch.SetNumThreadsOnThisThread, t.Run, 4, 5, nil) })
			return ch, err
		}
	}
	n, why, err := plan.Resolve()
	if err != nil {
		return err
	}
	b.threads = n
	if why != "" {
		fmt.Fprintf(log, "bench: %s: %s\n", models[0].Spec.Name, why)
	}
	return nil
}

// outputs lists where files go: every folder is checked for writing before anything is
// measured.
type outputs struct {
	benchfmt string   // file
	plotDirs []string // folders for plots
	jsonPath string   // report.json
	csvPath  string   // results as CSV; "-" is stdout
	opsCSV   string   // the op profiles as CSV (with --profile)
}

func (b *benchCmd) outputs() (outputs, error) {
	var o outputs
	dirs := map[string]bool{}
	if b.benchfmt != "" {
		o.benchfmt = b.benchfmt
		dirs[filepath.Dir(b.benchfmt)] = true
	}
	if b.csvPath != "" {
		o.csvPath = b.csvPath
		if b.csvPath != "-" {
			if fi, err := os.Stat(b.csvPath); err == nil && fi.IsDir() {
				return o, exitcode.Usagef("bench: --csv %s is a folder; give a file name, e.g. %s", b.csvPath, filepath.Join(b.csvPath, "bench.csv"))
			}
			dirs[filepath.Dir(b.csvPath)] = true
		}
	}
	if b.plotDir != "" {
		o.plotDirs = append(o.plotDirs, b.plotDir)
		dirs[b.plotDir] = true
	}
	if b.outDir != "" {
		dirs[b.outDir] = true
		// Not report.json: that name is the optimize pipeline's report, which may share the
		// folder.
		o.jsonPath = filepath.Join(b.outDir, "bench.json")
		if o.benchfmt == "" {
			o.benchfmt = filepath.Join(b.outDir, "bench.txt")
		}
		if b.plotDir == "" {
			o.plotDirs = append(o.plotDirs, b.outDir)
		}
		if o.csvPath == "" {
			o.csvPath = filepath.Join(b.outDir, "bench.csv")
		}
	}
	if b.profile && o.csvPath != "" {
		if o.csvPath == "-" {
			// One CSV table per stream: the ops go to the folder's file when there is one.
			if b.outDir != "" {
				o.opsCSV = filepath.Join(b.outDir, "bench_ops.csv")
			}
		} else {
			o.opsCSV = strings.TrimSuffix(o.csvPath, filepath.Ext(o.csvPath)) + "_ops.csv"
		}
	}
	written := named("--benchfmt", o.benchfmt)
	written = append(written, named("the bench report", o.jsonPath)...)
	if o.csvPath != "-" {
		written = append(written, named("--csv", o.csvPath)...)
	}
	written = append(written, named("the op profile CSV", o.opsCSV)...)
	for _, d := range o.plotDirs {
		written = append(written, named("a plot", benchPlotFiles(d)...)...)
	}
	read := append(named("the model", b.models...), named("the --vs model", b.vs...)...)
	read = append(append(read, named("the config", b.config)...), valueFiles(b.values, b.cfgInputs)...)
	if err := checkNotInput("bench", written, read); err != nil {
		return o, err
	}
	for d := range dirs {
		if err := bench.CheckWritableDir(d); err != nil {
			return o, exitcode.New(exitcode.Usage, fmt.Errorf("bench: %w", err))
		}
	}
	return o, nil
}

// checkCPUs refuses a throughput run or sweep that needs more CPUs than available, and
// returns the sweep's configuration. ins may be nil before the inputs are known.
func (b *benchCmd) checkCPUs(ins []benchrun.InputSpec, avail int) (bench.SweepConfig, error) {
	if b.sweeping() {
		return b.sweepConfig(ins, avail)
	}
	if b.streams > 1 && b.threads*b.streams > avail {
		return bench.SweepConfig{}, exitcode.Usagef("bench: %d streams x %d threads need %d CPUs, %d are available; lower --streams or --threads",
			b.streams, b.threads, b.threads*b.streams, avail)
	}
	return bench.SweepConfig{}, nil
}

// sweepConfig fills the sweep's unset dimensions from the other flags and checks every point
// against the available CPUs.
func (b *benchCmd) sweepConfig(ins []benchrun.InputSpec, avail int) (bench.SweepConfig, error) {
	cfg := bench.SweepConfig{Batches: b.sweepB, Threads: b.sweepT, Streams: b.sweepS, AvailableCPUs: avail, P99Budget: b.budget}
	if len(cfg.Batches) == 0 {
		cfg.Batches = []int{1}
		if len(ins) > 0 && len(ins[0].Shape) > 0 {
			cfg.Batches = []int{int(ins[0].Shape[0])}
		}
	}
	if len(cfg.Threads) == 0 {
		cfg.Threads = []int{b.threads}
		if b.threads == 0 {
			cfg.Threads = []int{avail}
		}
	}
	if len(cfg.Streams) == 0 {
		cfg.Streams = []int{b.streams}
	}
	if _, err := cfg.Points(); err != nil {
		return cfg, exitcode.New(exitcode.Usage, fmt.Errorf("bench: %w", err))
	}
	// The largest batch's inputs must fit in memory, as --input-shape's must.
	if len(ins) > 0 && len(b.sweepB) > 0 {
		batch := int64(slices.Max(b.sweepB))
		var checks []config.InputSpec
		for i, in := range ins {
			shape := slices.Clone(in.Shape)
			if len(shape) > 0 {
				shape[0] = batch
			}
			checks = append(checks, config.InputSpec{Name: fmt.Sprintf("input %d", i), Shape: shape, DType: in.DType.String()})
		}
		if err := config.CheckInputs(fmt.Sprintf("bench: --sweep-batch %d", batch), checks); err != nil {
			return cfg, exitcode.New(exitcode.Usage, err)
		}
	}
	return cfg, nil
}
