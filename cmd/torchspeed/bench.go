package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/plot"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/version"
)

func init() { extraCommands = append(extraCommands, newBenchCmd) }

// benchCmd holds `torchspeed bench`'s flags.
type benchCmd struct {
	config   string
	models   []string
	vs       []string
	shapes   []string
	dtypes   []string
	runs     int
	duration time.Duration
	warmup   int
	threads  int
	streams  int
	// instances > 0 measures throughput with that many pinned processes (see runInstances).
	instances int
	sweepB    []int
	sweepT    []int
	sweepS    []int
	budget    time.Duration
	order     string
	seed      uint64
	asJSON    bool
	benchfmt  string
	plotDir   string
	outDir    string

	// How the process sits on the machine (see setUpRuntime).
	runtime   string // "torchspeed" (computed settings) or "default" (libtorch's own)
	allocator string
	mode      string
	modeSet   bool // --mode or runtime.mode chose the mode
	numaNode  int
	interop   int
	// serve keeps the models loaded and times rounds on request (see benchrun.ServeRounds).
	serve bool
}

func newBenchCmd() *cobra.Command {
	b := &benchCmd{}
	c := &cobra.Command{
		Use:   "bench -m MODEL [--vs OTHER] --input-shape 1x3x224x224 [--runs N | --duration 10s]",
		Short: "Measure latency (median with its 95% interval, tail percentiles) and throughput; compare models side by side",
		Long: `bench times loading, the first inference and warm-up apart from the timed runs, keeps every
latency, and reports p50 with its 95% confidence interval, p90/p95/p99/p99.9/max, mean,
stddev and throughput, warning when the run is too short or too noisy to trust.

Several models (-m A -m B, or -m A --vs B) run in interleaved rounds in one process; each
is compared with the first by the ratio of medians (bootstrap 95% interval) and a
Mann-Whitney U test: a difference is reported only when p < 0.05.

--streams N runs N concurrent streams on locked OS threads of one process (throughput
mode, --threads each). --instances N runs N processes instead, as torchspeed launch
--instances N would: each pinned to its own physical cores (and NUMA node) with its own
OpenMP settings (--mode throughput unless given), one stream each; all time --runs
inferences at once, and the report pools them as N streams.

--sweep-batch/--sweep-threads/--sweep-streams measure every combination, print the
Pareto front of median latency against items/s and recommend a configuration.`,
		Example: `  torchspeed bench -m resnet18.pt --input-shape 1x3x224x224 --threads 2 --runs 200
  torchspeed bench -m resnet18.pt --vs resnet18.torchspeed.pt --input-shape 1x3x224x224 --duration 20s -o out
  torchspeed bench -m resnet18.pt --input-shape 1x3x224x224 --instances 2 --runs 100
  torchspeed bench -m model.pt --input-shape 1x3x224x224 --sweep-batch 1,4 --sweep-threads 1,2 --sweep-streams 1,2`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return inputUsage(b.run(c)) },
	}
	f := c.Flags()
	f.StringVarP(&b.config, "config", "c", "", "YAML config: model.path, model.inputs, runtime.threads, bench.*, output.dir (flags override it)")
	f.StringArrayVarP(&b.models, "model", "m", nil, "TorchScript file to measure (repeat to compare several)")
	f.StringArrayVar(&b.vs, "vs", nil, "another model to compare with the first, in interleaved rounds")
	f.StringArrayVar(&b.shapes, "input-shape", nil, "shape of a random input, e.g. 1x3x224x224 (repeat for several inputs)")
	f.StringArrayVar(&b.dtypes, "dtype", nil, "dtype of each --input-shape input (float32, int64, int32, bool; default float32)")
	f.IntVar(&b.runs, "runs", 200, "timed runs (per model; per stream in throughput mode)")
	f.DurationVar(&b.duration, "duration", 0, "run for this long instead of a count, e.g. 10s")
	f.IntVar(&b.warmup, "warmup", 20, "untimed runs after the first inference")
	f.IntVar(&b.threads, "threads", 0, "intra-op threads per stream (0: libtorch's default; in throughput mode the CPUs / streams; with --instances the instance's cores)")
	f.IntVar(&b.streams, "streams", 1, "concurrent streams for throughput mode")
	f.IntVar(&b.instances, "instances", 0, "throughput of N pinned processes, one stream each, on their own cores (as torchspeed launch --instances N); 0: off")
	f.IntSliceVar(&b.sweepB, "sweep-batch", nil, "batch sizes to sweep (replaces dimension 0 of every input)")
	f.IntSliceVar(&b.sweepT, "sweep-threads", nil, "threads per stream to sweep")
	f.IntSliceVar(&b.sweepS, "sweep-streams", nil, "stream counts to sweep")
	f.DurationVar(&b.budget, "latency-budget", 0, "p99 budget for the sweep's throughput recommendation, e.g. 20ms")
	f.StringVar(&b.order, "order", "interleaved", "order of models within a round: interleaved or shuffled")
	f.Uint64Var(&b.seed, "seed", 1, "seed for random inputs, shuffled order and the bootstrap")
	f.BoolVar(&b.asJSON, "json", false, "print the report as JSON instead of a table")
	f.StringVar(&b.benchfmt, "benchfmt", "", "also write the Go benchmark format (for benchstat) to this file")
	f.StringVar(&b.plotDir, "plot", "", "also write latency (and sweep) plots as PNG and SVG into this folder")
	f.StringVarP(&b.outDir, "output", "o", "", "write bench.json, bench.txt (benchfmt) and bench_*.png/svg plots into this folder")
	f.StringVar(&b.runtime, "runtime", runtimeTorchspeed, "runtime settings: torchspeed (CPU affinity, OpenMP variables, allocator, as optimize and launch use) or default (libtorch's own, nothing changed)")
	f.StringVar(&b.allocator, "allocator", "default", "memory allocator to preload: default (glibc), jemalloc or tcmalloc (runtime.allocator)")
	f.StringVar(&b.mode, "mode", "latency", "runtime preset: latency or throughput (runtime.mode)")
	f.IntVar(&b.numaNode, "numa-node", -1, "NUMA node to run on, -1 for any (runtime.numa_node)")
	f.IntVar(&b.interop, "interop-threads", 1, "inter-op threads (runtime.interop_threads)")
	// A driver process (BenchmarkRuntimeSettings) alternates rounds between two
	// long-lived bench processes whose OpenMP settings differ: they can only
	// differ between processes, since the runtime reads them at start.
	f.BoolVar(&b.serve, "serve", false, "read \"run K\" lines on stdin; answer each with \"ns\" and K latencies")
	_ = f.MarkHidden("serve")
	return c
}

// inputUsage marks an error that carries a benchrun.InputError (inputs the flags asked for
// that cannot be made: a dtype without random data, a swept batch for a scalar input) as a
// usage error, exit code 2; its message stays as it is.
func inputUsage(err error) error {
	var ie *benchrun.InputError
	if errors.As(err, &ie) {
		return usageError{err}
	}
	return err
}

// sweeping reports whether any sweep flag was given.
func (b *benchCmd) sweeping() bool { return len(b.sweepB)+len(b.sweepT)+len(b.sweepS) > 0 }

// validate checks the flags before anything is loaded or measured.
func (b *benchCmd) validate(c *cobra.Command) error {
	f := c.Flags()
	if len(b.models) == 0 {
		return usageErrorf("bench: --model is required, e.g. -m resnet18.pt")
	}
	if len(b.dtypes) > len(b.shapes) {
		return usageErrorf("bench: %d --dtype values for %d --input-shape inputs; give one per input", len(b.dtypes), len(b.shapes))
	}
	if f.Changed("duration") {
		if b.duration <= 0 {
			return usageErrorf("bench: --duration %v: must be positive, e.g. --duration 10s", b.duration)
		}
		if f.Changed("runs") {
			return usageErrorf("bench: --runs and --duration both given; choose one")
		}
		b.runs = 0
	} else if b.runs <= 0 {
		return usageErrorf("bench: --runs %d: must be 1 or more (200 is a good start; >= 6 for a confidence interval)", b.runs)
	}
	if b.warmup < 0 {
		return usageErrorf("bench: --warmup %d: must be 0 or more", b.warmup)
	}
	if b.threads < 0 {
		return usageErrorf("bench: --threads %d: must be 0 (libtorch's default) or more", b.threads)
	}
	if b.streams < 1 {
		return usageErrorf("bench: --streams %d: must be 1 or more", b.streams)
	}
	if b.budget < 0 {
		return usageErrorf("bench: --latency-budget %v: must be positive", b.budget)
	}
	if _, err := bench.ParseOrder(b.order); err != nil {
		return usageErrorf("bench: --order: %v", err)
	}
	if err := b.validateRuntime(f); err != nil {
		return err
	}
	if err := b.validateInstances(f); err != nil {
		return err
	}
	n := len(b.models) + len(b.vs)
	if n > 1 && (b.streams > 1 || b.sweeping()) {
		return usageErrorf("bench: throughput mode (--streams) and sweeps measure one model; compare models without them, or run bench once per model")
	}
	if b.sweeping() && f.Changed("streams") {
		return usageErrorf("bench: --streams and --sweep-streams both given; use --sweep-streams 1,%d", b.streams)
	}
	return nil
}

// specs names the models: the file name, or the path when two files share
// a name, with "#2" for the same path given twice (an A/A check).
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
		out = append(out, benchrun.ModelSpec{Path: p, Name: name})
	}
	return out
}

// inputSpecs parses --input-shape and --dtype into the inputs to make.
func (b *benchCmd) inputSpecs() ([]benchrun.InputSpec, error) {
	var specs []benchrun.InputSpec
	for i, s := range b.shapes {
		shape, err := ParseShape(s)
		if err != nil {
			return nil, usageErrorf("bench: --input-shape %q: %v", s, err)
		}
		dt := torch.Float32
		if i < len(b.dtypes) {
			if dt, err = torch.ParseDType(b.dtypes[i]); err != nil {
				return nil, usageErrorf("bench: --dtype %q: %v", b.dtypes[i], err)
			}
		}
		specs = append(specs, benchrun.InputSpec{Shape: shape, DType: dt})
	}
	return specs, nil
}

// outputs lists where files go: every folder is checked for writing
// before anything is measured.
type outputs struct {
	benchfmt string   // file
	plotDirs []string // folders for plots
	jsonPath string   // report.json
}

func (b *benchCmd) outputs() (outputs, error) {
	var o outputs
	dirs := map[string]bool{}
	if b.benchfmt != "" {
		o.benchfmt = b.benchfmt
		dirs[filepath.Dir(b.benchfmt)] = true
	}
	if b.plotDir != "" {
		o.plotDirs = append(o.plotDirs, b.plotDir)
		dirs[b.plotDir] = true
	}
	if b.outDir != "" {
		dirs[b.outDir] = true
		// Not report.json: that name is the optimize pipeline's report,
		// which may share the folder.
		o.jsonPath = filepath.Join(b.outDir, "bench.json")
		if o.benchfmt == "" {
			o.benchfmt = filepath.Join(b.outDir, "bench.txt")
		}
		if b.plotDir == "" {
			o.plotDirs = append(o.plotDirs, b.outDir)
		}
	}
	for d := range dirs {
		if err := bench.CheckWritableDir(d); err != nil {
			return o, usageError{fmt.Errorf("bench: %w", err)}
		}
	}
	return o, nil
}

// applyConfig takes what the flags left unset from the config file: the
// model and its inputs, runtime.threads, the bench section and output.dir.
func (b *benchCmd) applyConfig(c *cobra.Command) error {
	if b.config == "" {
		return nil
	}
	cfg, err := config.Load(b.config, nil, nil)
	if err != nil {
		return usageError{fmt.Errorf("bench: %w", err)}
	}
	f := c.Flags()
	if len(b.models) == 0 {
		b.models = []string{cfg.Model.Path}
	}
	if len(b.shapes) == 0 {
		b.dtypes = nil
		for _, in := range cfg.Model.Inputs {
			dims := make([]string, len(in.Shape))
			for i, d := range in.Shape {
				dims[i] = strconv.FormatInt(d, 10)
			}
			b.shapes = append(b.shapes, strings.Join(dims, "x"))
			dt := in.DType
			if dt == "" {
				dt = "float32"
			}
			b.dtypes = append(b.dtypes, dt)
		}
	}
	if !f.Changed("runs") && !f.Changed("duration") {
		if cfg.Bench.Duration > 0 && cfg.Bench.Runs == 0 {
			b.duration = cfg.Bench.Duration
			// Mark it as chosen, as if given on the command line.
			if err := f.Set("duration", cfg.Bench.Duration.String()); err != nil {
				return err
			}
		} else {
			b.runs = cfg.Bench.Runs
		}
	}
	if !f.Changed("warmup") {
		b.warmup = cfg.Bench.Warmup
	}
	if !f.Changed("seed") {
		b.seed = cfg.Bench.Seed
	}
	if !f.Changed("threads") {
		b.threads = cfg.Runtime.Threads
	}
	if !f.Changed("allocator") && cfg.Runtime.Allocator != "" {
		b.allocator = cfg.Runtime.Allocator
	}
	if !f.Changed("mode") && cfg.Runtime.Mode != "" {
		b.mode = cfg.Runtime.Mode
		b.modeSet = true
	}
	if !f.Changed("numa-node") {
		b.numaNode = cfg.Runtime.NUMANode
	}
	if !f.Changed("interop-threads") && cfg.Runtime.InteropThreads > 0 {
		b.interop = cfg.Runtime.InteropThreads
	}
	if !f.Changed("output") && b.outDir == "" {
		b.outDir = cfg.Output.Dir
	}
	return nil
}

func (b *benchCmd) run(c *cobra.Command) error {
	if err := b.applyConfig(c); err != nil {
		return err
	}
	if err := b.validate(c); err != nil {
		return err
	}
	specs := b.specs()
	outs, err := b.outputs()
	if err != nil {
		return err
	}
	for _, s := range specs {
		if _, err := os.Stat(s.Path); err != nil {
			return usageErrorf("bench: model %q: %v", s.Path, err)
		}
	}
	if b.instances > 0 {
		// A driver only: it neither pins itself nor loads the model.
		return b.runInstances(c, specs[0], outs)
	}
	order, _ := bench.ParseOrder(b.order)
	opts := bench.Options{Runs: b.runs, Duration: b.duration, Warmup: b.warmup}
	// Before anything is loaded: applying the settings may re-execute
	// this process.
	settings, err := b.setUpRuntime(c.ErrOrStderr())
	if err != nil {
		return err
	}
	env, avail := captureEnv()
	// Refuse configurations that would oversubscribe the CPUs before
	// spending time on loading (checked again once the inputs are known).
	if _, err := b.checkCPUs(nil, avail); err != nil {
		return err
	}

	progress := c.ErrOrStderr()
	var models []*benchrun.Loaded
	defer func() {
		for _, l := range models {
			l.Model.Close()
		}
	}()
	for _, s := range specs {
		l, err := benchrun.LoadModel(s, progress)
		if err != nil {
			return err
		}
		models = append(models, l)
	}
	if err := b.inputsFromManifest(models); err != nil {
		return err
	}
	ins, err := b.inputSpecs()
	if err != nil {
		return err
	}
	if b.threads == 0 && !c.Flags().Changed("threads") {
		if man := models[0].Model.Manifest; man != nil && man.Runtime.Threads > 0 {
			b.threads = man.Runtime.Threads
			fmt.Fprintf(progress, "bench: %d threads, as the artifact %s was tuned for (--threads overrides)\n", b.threads, models[0].Spec.Name)
		}
	}
	if b.threads == 0 && b.streams == 1 && !b.sweeping() && b.runtime == runtimeTorchspeed {
		// Neither flag, config nor artifact chose: measure, as optimize does. A fixed rule
		// loses somewhere (a small transformer is faster on 1 thread than 2 here).
		b.threads = torch.NumThreads()
		if counts := bench.ThreadCandidates(b.threads); len(counts) > 1 {
			inputs, err := benchrun.MakeInputs(ins, 0, b.seed)
			if err != nil {
				return err
			}
			t := models[0].Target(inputs)
			var ch bench.ThreadChoice
			// The timing runs on the inference worker (t.Run stays on its thread), so the
			// count is switched for that thread only, then set everywhere.
			torch.Do(func() { ch, err = bench.ChooseThreads(counts, torch.SetNumThreadsOnThisThread, t.Run, 4, 5, nil) })
			benchrun.CloseTensors(inputs)
			if err != nil {
				return err
			}
			b.threads = ch.Threads
			fmt.Fprintf(progress, "bench: %d threads, measured fastest for %s (%s; --threads overrides)\n", ch.Threads, models[0].Spec.Name, ch.Why)
		}
	}
	if b.streams > 1 && b.threads == 0 {
		b.threads = max(1, avail/b.streams)
	}
	sweepCfg, err := b.checkCPUs(ins, avail)
	if err != nil {
		return err
	}
	if b.threads > 0 {
		if err := torch.SetNumThreads(b.threads); err != nil {
			return usageErrorf("bench: --threads %d: %v", b.threads, err)
		}
	}
	env.Threads = torch.NumThreads()
	env.InteropThreads = torch.NumInteropThreads()
	qengine, err := torch.QEngine() // an INT8 artifact sets its engine when loaded
	if err != nil {
		return err
	}
	env.QuantizedEngine = qengine
	env.ModelHashes = map[string]string{}
	for _, s := range specs {
		h, err := bench.HashFile(s.Path)
		if err != nil {
			return err
		}
		env.ModelHashes[s.Name] = h
	}
	rep := &bench.Report{Environment: env, Settings: b.settings()}
	for k, v := range settings {
		rep.Settings[k] = v
	}
	// The count in use, which an artifact's manifest or --threads may have
	// changed after the runtime settings were computed.
	rep.Settings["threads"] = strconv.Itoa(env.Threads)
	if b.serve {
		// What a driver of several instances checks against the settings it gave each.
		rep.Settings["affinity"] = cpu.CPUSet(env.CPUsUsed).String()
		rep.Settings["quantized_engine"] = env.QuantizedEngine
		if i := os.Getenv("TORCHSPEED_INSTANCE"); i != "" {
			rep.Settings["instance"] = i
		}
		return benchrun.ServeRounds(c.InOrStdin(), c.OutOrStdout(), models[0], ins, b.seed, b.warmup, rep.Settings)
	}

	switch {
	case b.sweeping():
		if rep.Sweep, err = b.runSweep(models[0], ins, sweepCfg, opts, progress); err != nil {
			return err
		}
	case b.streams > 1:
		fmt.Fprintf(progress, "bench: %s: %d streams x %d threads...\n", models[0].Spec.Name, b.streams, b.threads)
		if rep.Throughput, err = benchrun.RunStreams(models[0], ins, 0, b.threads, b.streams, opts, b.seed); err != nil {
			return err
		}
	default:
		inputs, err := benchrun.MakeInputs(ins, 0, b.seed)
		if err != nil {
			return err
		}
		defer benchrun.CloseTensors(inputs)
		var targets []bench.Target
		for _, l := range models {
			targets = append(targets, l.Target(inputs))
		}
		fmt.Fprintf(progress, "bench: %s...\n", describeRun(specs, opts, order))
		// The whole timing loop runs on one inference worker thread, which
		// owns the OpenMP pool the threads setting applies to.
		torch.Do(func() {
			if len(targets) == 1 {
				var r *bench.Result
				if r, err = bench.Run(targets[0], opts); err == nil {
					rep.Results = []*bench.Result{r}
				}
				return
			}
			rep.Comparison, err = bench.Compare(targets, bench.CompareOptions{Options: opts, Order: order, Seed: b.seed})
		})
		if err != nil {
			return err
		}
		for i, r := range latencyResults(rep) {
			r.Load = models[i].LoadTime
			if len(ins) > 0 && len(ins[0].Shape) > 0 {
				r.Batch = int(ins[0].Shape[0])
			}
		}
		addRooflines(progress, models, inputs, rep)
	}
	return b.write(c.OutOrStdout(), progress, rep, outs)
}

// inputsFromManifest takes the input shapes from the first artifact's
// manifest when no --input-shape (or config) gave them.
func (b *benchCmd) inputsFromManifest(models []*benchrun.Loaded) error {
	if len(b.shapes) > 0 {
		return nil
	}
	for _, l := range models {
		man := l.Model.Manifest
		if man == nil || len(man.Inputs) == 0 {
			continue
		}
		for _, in := range man.Inputs {
			dims := make([]string, len(in.Shape))
			for i, d := range in.Shape {
				dims[i] = strconv.FormatInt(d, 10)
			}
			b.shapes = append(b.shapes, strings.Join(dims, "x"))
			b.dtypes = append(b.dtypes, in.DType)
		}
		return nil
	}
	return usageErrorf("bench: give the model's inputs with --input-shape, e.g. --input-shape 1x3x224x224 (repeat for several inputs); " +
		"only artifacts made by torchspeed optimize list them")
}

// checkCPUs refuses a throughput run or sweep that needs more CPUs than
// available, and returns the sweep's configuration. ins may be nil before
// the inputs are known.
func (b *benchCmd) checkCPUs(ins []benchrun.InputSpec, avail int) (bench.SweepConfig, error) {
	if b.sweeping() {
		return b.sweepConfig(ins, avail)
	}
	if b.streams > 1 && b.threads*b.streams > avail {
		return bench.SweepConfig{}, usageErrorf("bench: %d streams x %d threads need %d CPUs, %d are available; lower --streams or --threads",
			b.streams, b.threads, b.threads*b.streams, avail)
	}
	return bench.SweepConfig{}, nil
}

func latencyResults(r *bench.Report) []*bench.Result {
	if r.Comparison != nil {
		return r.Comparison.Results
	}
	return r.Results
}

func describeRun(specs []benchrun.ModelSpec, o bench.Options, order bench.Order) string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	what := fmt.Sprintf("%d runs", o.Runs)
	if o.Duration > 0 {
		what = o.Duration.String()
	}
	if len(specs) > 1 {
		return fmt.Sprintf("%s in %s rounds, %s", strings.Join(names, " vs "), order, what)
	}
	return fmt.Sprintf("%s, %s", names[0], what)
}

// sweepConfig fills the sweep's unset dimensions from the other flags and
// checks every point against the available CPUs.
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
		return cfg, usageError{fmt.Errorf("bench: %w", err)}
	}
	return cfg, nil
}

func (b *benchCmd) runSweep(l *benchrun.Loaded, ins []benchrun.InputSpec, cfg bench.SweepConfig, o bench.Options, progress io.Writer) (*bench.SweepResult, error) {
	n := len(cfg.Batches) * len(cfg.Threads) * len(cfg.Streams)
	i := 0
	return bench.Sweep(cfg, func(p bench.Point) (*bench.ThroughputResult, error) {
		i++
		fmt.Fprintf(progress, "bench: sweep %d/%d: %s\n", i, n, p)
		return benchrun.RunStreams(l, ins, p.Batch, p.Threads, p.Streams, o, b.seed)
	})
}

// settings records the run's inputs for the report.
func (b *benchCmd) settings() map[string]string {
	s := map[string]string{
		"input-shape": strings.Join(b.shapes, ","),
		"warmup":      strconv.Itoa(b.warmup),
		"seed":        strconv.FormatUint(b.seed, 10),
	}
	if len(b.dtypes) > 0 {
		s["dtype"] = strings.Join(b.dtypes, ",")
	}
	if b.duration > 0 {
		s["duration"] = b.duration.String()
	} else {
		s["runs"] = strconv.Itoa(b.runs)
	}
	if len(b.models)+len(b.vs) > 1 {
		s["order"] = b.order
	}
	if b.streams > 1 {
		s["streams"] = strconv.Itoa(b.streams)
	}
	return s
}

// captureEnv fills the environment from Go, the machine probe and
// libtorch, and returns the number of CPUs the process may keep busy.
func captureEnv() (bench.Environment, int) {
	env := bench.CaptureEnvironment()
	env.TorchspeedVersion = version.Version
	env.LibtorchVersion = torch.Version()
	if e, err := torch.QEngine(); err == nil {
		env.QuantizedEngine = e
	}
	if b, err := torch.BLAS(); err == nil && b.Library != "" {
		env.BLAS = b.Config + ", " + b.Threading // its thread count follows Threads
	}
	avail := runtime.NumCPU()
	p, err := cpu.Detect(cpu.Options{})
	if err != nil {
		return env, avail
	}
	env.CPUModel = p.CPU.Model
	env.ISA = p.ISA.Features()
	env.PhysicalCores = p.Topology.PhysicalCores
	if p.Topology.LogicalCPUs > 0 {
		env.LogicalCPUs = p.Topology.LogicalCPUs
	}
	if len(p.Usable.CPUs) > 0 {
		env.CPUsUsed = p.Usable.CPUs
	}
	if len(p.Usable.Nodes) > 0 {
		ns := make([]string, len(p.Usable.Nodes))
		for i, n := range p.Usable.Nodes {
			ns[i] = strconv.Itoa(n)
		}
		env.NUMANode = strings.Join(ns, ",")
	}
	if p.Cgroup.QuotaCPUs > 0 {
		env.CgroupCPULimit = fmt.Sprintf("%.2f CPUs (quota %dus per %dus)", p.Cgroup.QuotaCPUs, p.Cgroup.QuotaUs, p.Cgroup.PeriodUs)
	}
	env.OpenMPRuntime = p.OpenMPRuntime()
	if len(p.Allocators) > 0 {
		names := make([]string, len(p.Allocators))
		for i, a := range p.Allocators {
			names[i] = a.Name
		}
		env.Allocator = strings.Join(names, ",")
	}
	if p.Usable.Count > 0 {
		avail = p.Usable.Count
	}
	return env, avail
}

// write prints the report (table or JSON) and writes the files asked for.
func (b *benchCmd) write(stdout, progress io.Writer, rep *bench.Report, o outputs) error {
	var errs []error
	if o.jsonPath != "" {
		if err := bench.WriteFileAtomic(o.jsonPath, rep.WriteJSON); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintln(progress, "wrote", o.jsonPath)
		}
	}
	if o.benchfmt != "" {
		if err := bench.WriteFileAtomic(o.benchfmt, rep.WriteBenchfmt); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintln(progress, "wrote", o.benchfmt)
		}
	}
	for _, dir := range o.plotDirs {
		paths, err := writePlots(rep, dir)
		if err != nil {
			errs = append(errs, err)
		}
		for _, p := range paths {
			fmt.Fprintln(progress, "wrote", p)
		}
	}
	var err error
	if b.asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	return errors.Join(append([]error{err}, errs...)...)
}

// writePlots draws the latency distributions (per model, or per stream in
// throughput mode) and the sweep curve into dir.
func writePlots(rep *bench.Report, dir string) ([]string, error) {
	var all []string
	title := fmt.Sprintf("latency, %d threads", rep.Environment.Threads)
	if rs := latencyResults(rep); len(rs) > 0 {
		p, err := plot.Latency(plot.SeriesFromResults(rs), title, dir, "bench_latency")
		if err != nil {
			return all, err
		}
		all = append(all, p...)
	}
	if t := rep.Throughput; t != nil {
		p, err := plot.Latency(plot.SeriesFromThroughput(t), fmt.Sprintf("%s: %d streams x %d threads", t.Name, t.Streams, t.Threads), dir, "bench_latency")
		if err != nil {
			return all, err
		}
		all = append(all, p...)
	}
	if s := rep.Sweep; s != nil {
		p, err := plot.Sweep(s, "sweep: median latency vs throughput", dir, "bench_sweep")
		if err != nil {
			return all, err
		}
		all = append(all, p...)
	}
	return all, nil
}

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
				return usageErrorf("bench: --%s applies torchspeed's runtime settings; it cannot be combined with --runtime default", name)
			}
		}
	default:
		return usageErrorf("bench: --runtime %q: want torchspeed (apply torchspeed's settings) or default (libtorch's own)", b.runtime)
	}
	if _, err := runenv.ParseMode(b.mode); err != nil || b.mode == "" {
		return usageErrorf("bench: --mode %q: want latency or throughput", b.mode)
	}
	if b.numaNode < -1 {
		return usageErrorf("bench: --numa-node %d: want a node number from `torchspeed probe`, or -1 for any", b.numaNode)
	}
	if b.interop < 1 {
		return usageErrorf("bench: --interop-threads %d: must be 1 or more", b.interop)
	}
	if b.serve && (len(b.models)+len(b.vs) != 1 || b.streams > 1 || b.sweeping()) {
		return usageErrorf("bench: --serve times one model on one stream; drop --vs, --streams and the sweeps")
	}
	return nil
}

// setUpRuntime applies torchspeed's runtime settings, as optimize does (this
// may re-execute the process), and returns them for the report. With
// --runtime default it changes nothing and records only that.
func (b *benchCmd) setUpRuntime(log io.Writer) (map[string]string, error) {
	if b.runtime == runtimeDefault {
		return map[string]string{"runtime": runtimeDefault}, nil
	}
	mode, err := runenv.ParseMode(b.mode)
	if err != nil {
		return nil, usageErrorf("bench: --mode: %v", err)
	}
	o := runenv.Options{Threads: b.threads, InteropThreads: b.interop, Allocator: b.allocator, Mode: mode, NUMANodes: numaNodes(b.numaNode)}
	if b.streams > 1 || b.sweeping() {
		// Each stream sets its own count; the process gets the instance's CPUs.
		o.Threads = 0
	}
	_, s, applied, warnings, err := setUpRuntime(o)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for _, w := range warnings {
		fmt.Fprintln(log, "bench: warning:", w)
	}
	m := settingsMap(s, applied)
	m["runtime"] = runtimeTorchspeed
	return m, nil
}
