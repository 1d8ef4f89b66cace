package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// benchCmd holds `torchspeed bench`'s flags and, once config.Load has merged them with the
// config file, the environment and the defaults, the values to run with.
type benchCmd struct {
	ui       *ui
	config   string
	models   []string
	vs       []string
	shapes   []string
	dtypes   []string
	values   []string // --input [NAME=]VALUE
	method   string
	reset    string   // model.reset_method
	opLibs   []string // model.op_libraries
	streams  int
	sweepB   []int
	sweepT   []int
	sweepS   []int
	budget   time.Duration
	order    string
	asJSON   bool
	benchfmt string
	plotDir  string
	runtime  string // "torchspeed" (computed settings) or "default" (libtorch's own)
	intrDur  time.Duration
	profile  bool   // --profile: time every op of each model's forward
	csvPath  string // --csv FILE ("-": stdout instead of the table)
	// instances > 0 measures throughput with that many pinned processes (see runInstances).
	instances int
	// serve keeps the models loaded and times rounds on request (see benchrun.ServeRounds).
	serve bool
	// cfgInputs are a config's model.inputs that give values (data, constants): the typed path.
	cfgInputs []config.Input

	// From config.Load (flag > TORCHSPEED_* > file > default).
	runs      int
	duration  time.Duration
	warmup    int
	seed      uint64
	threads   int
	allocator string
	mode      string
	modeSet   bool // --mode or runtime.mode chose the mode
	numaNode  int
	interop   int
	outDir    string
}

// benchKeys binds bench's flags to config keys.
var benchKeys = map[string]string{
	"threads": "runtime.threads", "allocator": "runtime.allocator", "mode": "runtime.mode",
	"numa-node": "runtime.numa_node", "interop-threads": "runtime.interop_threads",
	"runs": "bench.runs", "duration": "bench.duration", "warmup": "bench.warmup", "seed": "bench.seed",
	"op-library": "model.op_libraries",
}

func newBenchCmd(u *ui) *cobra.Command {
	b := &benchCmd{ui: u}
	c := &cobra.Command{
		Use:   "bench -m MODEL [--vs OTHER] --input-shape 1x3x224x224 [--runs N | --duration D]",
		Short: "Measure latency (median, 95% interval, tails) and throughput; compare models",
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
Pareto front of median latency against items/s and recommend a configuration.

Values come from flags, then TORCHSPEED_* variables (TORCHSPEED_RUNTIME_THREADS=2), then
the config file (-c), then defaults. An artifact made by optimize gives its own inputs and
thread count when none is given.`,
		Example: `  torchspeed bench -m resnet18.pt --input-shape 1x3x224x224 --threads 2 --runs 200
  torchspeed bench -m resnet18.pt --vs out/resnet18.torchspeed.pt --input-shape 1x3x224x224 \
      --duration 20s -o out
  torchspeed bench -m out/resnet18.torchspeed.pt --profile --time 30s --csv resnet18.csv
  torchspeed bench -m resnet18.pt --input-shape 1x3x224x224 --instances 2 --runs 100
  torchspeed bench -m model.pt --input-shape 1x3x224x224 --sweep-batch 1,4 --sweep-threads 1,2 \
      --sweep-streams 1,2`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return b.run(c) },
	}
	f := c.Flags()
	f.StringVarP(&b.config, "config", "c", "", "YAML config: model.path, model.inputs, runtime.*, bench.*, output.dir (flags override it)")
	f.StringArrayVarP(&b.models, "model", "m", nil, "TorchScript file to measure (repeat to compare several)")
	f.StringArrayVar(&b.vs, "vs", nil, "another model to compare with the first, in interleaved rounds")
	f.StringArrayVar(&b.shapes, "input-shape", nil, "shape of a random input, e.g. 1x3x224x224 (repeat for several inputs)")
	f.StringArrayVar(&b.dtypes, "dtype", nil, "dtype of each --input-shape input (float32, int64, int32, bool; default float32)")
	f.StringArrayVar(&b.values, "input", nil, "an argument's value, as run takes it: [NAME=]FILE.npy, FILE.npz[:MEMBER], seq:CHUNKS.npy, A.npy,B.npy, int:N, float:X, bool:true|false, str:TEXT or none (repeat)")
	f.StringVar(&b.method, "method", "", "method to time (default: forward, or the artifact's)")
	f.StringArray("op-library", nil, "shared library of custom operators the model calls, loaded before it (repeat; model.op_libraries)")
	f.Int("runs", 200, "timed runs (per model; per stream in throughput mode) (bench.runs)")
	f.Duration("duration", 0, "run for this long instead of a count, e.g. 30s; --time is the same flag, as benchmark_app's -t (bench.duration)")
	f.Int("warmup", 20, "untimed runs after the first inference (bench.warmup)")
	f.Int("threads", 0, "intra-op threads per stream, 1 to the CPUs available (0: measured, or the artifact's; in throughput mode the CPUs / streams; with --instances the instance's cores) (runtime.threads)")
	f.IntVar(&b.streams, "streams", 1, "concurrent streams for throughput mode")
	f.IntVar(&b.instances, "instances", 0, "throughput of N pinned processes, one stream each, on their own cores (as torchspeed launch --instances N); 0: off")
	f.IntSliceVar(&b.sweepB, "sweep-batch", nil, "batch sizes to sweep (replaces dimension 0 of every input)")
	f.IntSliceVar(&b.sweepT, "sweep-threads", nil, "threads per stream to sweep")
	f.IntSliceVar(&b.sweepS, "sweep-streams", nil, "stream counts to sweep")
	f.DurationVar(&b.budget, "latency-budget", 0, "p99 budget for the sweep's throughput recommendation, e.g. 20ms")
	f.StringVar(&b.order, "order", "interleaved", "order of models within a round: interleaved or shuffled")
	f.DurationVar(&b.intrDur, "interrupts", 300*time.Millisecond, "after latency runs, measure for at least this long (longer for slow models, up to 5s) what the machine takes from the CPUs in use, and report the p95/p50 that alone gives fixed work as long as each model's p50 (0: skip; 10ms to 1m)")
	f.Uint64("seed", 1, "seed for random inputs, shuffled order and the bootstrap (bench.seed)")
	f.BoolVar(&b.asJSON, "json", false, "print the report as JSON instead of a table")
	f.BoolVar(&b.profile, "profile", false, "after the timed runs, time every op of each model's forward (as many forwards as the timed runs, at most 1000) and print the time per op kind side by side and per op in the order run; an artifact alone is profiled beside its original when that file is next to it")
	f.StringVar(&b.csvPath, "csv", "", "also write the results as CSV to this file (\"-\": print CSV instead of the table); with --profile, the ops go to FILE_ops.csv (columns: docs/bench.md)")
	f.StringVar(&b.benchfmt, "benchfmt", "", "also write the Go benchmark format (for benchstat) to this file")
	f.StringVar(&b.plotDir, "plot", "", "also write latency (and sweep) plots as PNG and SVG into this folder")
	f.StringVarP(&b.outDir, "output", "o", "", "write bench.json, bench.txt (benchfmt) and bench_*.png/svg plots into this folder (output.dir)")
	f.StringVar(&b.runtime, "runtime", runtimeTorchspeed, "runtime settings: torchspeed (CPU affinity, OpenMP variables, allocator, as optimize and launch use) or default (libtorch's own, nothing changed)")
	f.String("allocator", "default", "memory allocator to preload: default (glibc), jemalloc or tcmalloc (runtime.allocator)")
	f.String("mode", "latency", "runtime preset: latency or throughput (runtime.mode)")
	f.Int("numa-node", -1, "NUMA node to run on, -1 for any (runtime.numa_node)")
	f.Int("interop-threads", 1, "inter-op threads (runtime.interop_threads)")
	// A driver process (BenchmarkRuntimeSettings) alternates rounds between two
	// long-lived bench processes whose OpenMP settings differ: they can only
	// differ between processes, since the runtime reads them at start.
	f.BoolVar(&b.serve, "serve", false, "read \"run K\" lines on stdin; answer each with \"ns\" and K latencies")
	_ = f.MarkHidden("serve")
	f.SetNormalizeFunc(timeAlias)
	completeEnums(c, map[string][]string{
		"order": {"interleaved", "shuffled"}, "runtime": {runtimeTorchspeed, runtimeDefault},
		"allocator": allocators, "mode": modes, "dtype": dtypes,
	})
	return c
}

func (b *benchCmd) run(c *cobra.Command) error {
	if err := b.loadConfig(c); err != nil {
		return err
	}
	if err := b.validate(c); err != nil {
		return err
	}
	if err := torchspeed.LoadOpLibraries(b.opLibs); err != nil {
		return exitcode.New(exitcode.Usage, fmt.Errorf("bench: --op-library (model.op_libraries): %w", err))
	}
	specs := b.specs()
	outs, err := b.outputs()
	if err != nil {
		return err
	}
	for _, s := range specs {
		if err := safefile.CheckInputFile(s.Path); err != nil {
			return exitcode.Usagef("bench: model: %v", err)
		}
	}
	if b.instances > 0 {
		// A driver only: it neither pins itself nor loads the model.
		return b.runInstances(c, specs[0], outs)
	}
	log := b.ui.logOrDiscard(c.ErrOrStderr())
	// Before anything is loaded: applying the settings may re-execute this process.
	settings, err := b.setUpRuntime(c.ErrOrStderr())
	if err != nil {
		return err
	}
	env, avail := captureEnv()
	// Refuse configurations that would oversubscribe the CPUs before spending time on loading
	// (checked again once the inputs are known).
	if _, err := b.checkCPUs(nil, avail); err != nil {
		return err
	}
	var models []*benchrun.Loaded
	defer func() {
		for _, l := range models {
			l.Model.Close()
		}
	}()
	for _, s := range specs {
		// Warnings on stderr even with --quiet, which promises warnings and errors.
		l, err := benchrun.LoadModel(s, c.ErrOrStderr())
		if errors.Is(err, torchspeed.ErrNoMethod) {
			return exitcode.Usagef("bench: --method or model.reset_method: %s", strings.TrimPrefix(err.Error(), "bench: "))
		} else if err != nil {
			return err
		}
		models = append(models, l)
	}
	plans, err := b.typedPlans(models, log)
	if err != nil {
		return err
	}
	defer closePlans(plans)
	var ins []benchrun.InputSpec
	if plans == nil {
		if ins, err = b.inputs(models); err != nil {
			return err
		}
	}
	if err := b.chooseThreads(c, models, ins, plans, avail, log); err != nil {
		return err
	}
	sweepCfg, err := b.checkCPUs(ins, avail)
	if err != nil {
		return err
	}
	if b.threads > 0 {
		if err := torch.SetNumThreads(b.threads); err != nil {
			return exitcode.Usagef("bench: --threads %d: %v", b.threads, err)
		}
	}
	env.Threads = torch.NumThreads()
	env.InteropThreads = torch.NumInteropThreads()
	qengine, err := torch.QEngine() // an INT8 artifact sets its engine when loaded
	if err != nil {
		return err
	}
	env.QuantizedEngine = qengine
	if env.ModelHashes, err = hashModels(specs); err != nil {
		return err
	}
	rep := &bench.RunReport{Environment: env, Settings: b.settings()}
	for k, v := range settings {
		rep.Settings[k] = v
	}
	// The count in use, which an artifact's manifest or --threads may have changed after the
	// runtime settings were computed.
	rep.Settings["threads"] = strconv.Itoa(env.Threads)
	if b.serve {
		// What a driver of several instances checks against the settings it gave each.
		rep.Settings["affinity"] = cpu.CPUSet(env.CPUsUsed).String()
		rep.Settings["quantized_engine"] = env.QuantizedEngine
		if i := os.Getenv("TORCHSPEED_INSTANCE"); i != "" {
			rep.Settings["instance"] = i
		}
		return b.serveRounds(c, models[0], ins, plans, rep.Settings)
	}
	if err := b.measure(rep, models, specs, ins, plans, sweepCfg, log); err != nil {
		return err
	}
	if err := measureMemory(rep, specs); err != nil {
		return err
	}
	return b.write(c.OutOrStdout(), log, rep, outs)
}

// timeAlias makes --time the same flag as --duration: benchmark_app users know it as -t/--time.
func timeAlias(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if name == "time" {
		name = "duration"
	}
	return pflag.NormalizedName(name)
}

// hashModels records the SHA-256 of each model file, by name.
func hashModels(specs []benchrun.ModelSpec) (map[string]string, error) {
	hashes := map[string]string{}
	for _, s := range specs {
		h, err := bench.HashFile(s.Path)
		if err != nil {
			return nil, err
		}
		hashes[s.Name] = h
	}
	return hashes, nil
}
