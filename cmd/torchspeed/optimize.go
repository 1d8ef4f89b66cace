package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/pipeline"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

type optimizeCmd struct {
	ui         *ui
	configPath string
	shapes     []string
	dtypes     []string
	asJSON     bool
}

// optimizeKeys binds optimize's flags to config keys.
var optimizeKeys = map[string]string{
	"model":           "model.path",
	"name":            "model.name",
	"output":          "output.dir",
	"threads":         "runtime.threads",
	"mode":            "runtime.mode",
	"allocator":       "runtime.allocator",
	"measure-runtime": "runtime.measure",
	"quantize":        "quantize.mode",
	"engine":          "quantize.engine",
	"calibration":     "calibration.path",
	"runs":            "bench.runs",
	"duration":        "bench.duration",
	"quiet":           "output.quiet",
	"overwrite":       "output.overwrite",
	"op-library":      "model.op_libraries",
	"search":          "optimize.search",
	"budget":          "optimize.budget",
}

func newOptimizeCmd(u *ui) *cobra.Command {
	o := &optimizeCmd{ui: u}
	c := &cobra.Command{
		Use:   "optimize (-c config.yaml | -m model.pt --input-shape 1x3x224x224) [-o DIR]",
		Short: "Optimize a TorchScript model (freeze, fuse, INT8), validate, benchmark and save it",
		Long: `optimize loads the model, tries each optimization on this machine, keeps what is faster and
still answers like the original, and writes <name>.torchspeed.pt, report.json and report.md
into the output folder.

Values come from flags, then TORCHSPEED_* variables (TORCHSPEED_QUANTIZE_MODE=static), then
the config file (-c), then defaults; without a file, -m and --input-shape are enough.`,
		Example: `  torchspeed optimize -m resnet18.pt --input-shape 1x3x224x224 -o out
  torchspeed optimize -m resnet18.pt --input-shape 1x3x224x224 --quantize static --calibration data/
  torchspeed optimize -c resnet18.yaml --threads 2
  torchspeed optimize -c resnet18.yaml --search full --budget 10m`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return o.run(c) },
	}
	f := c.Flags()
	f.StringVarP(&o.configPath, "config", "c", "", "YAML config (see configs/; torchspeed config init writes one)")
	f.StringP("model", "m", "", "TorchScript model (model.path)")
	f.String("name", "", "artifact name, a file name without folders (model.name; default: the model's file name)")
	f.StringArrayVar(&o.shapes, "input-shape", nil, "shape of an input, e.g. 1x3x224x224 (repeat for several inputs; model.inputs)")
	f.StringArrayVar(&o.dtypes, "dtype", nil, "dtype of each --input-shape input (float32, int64, ...; default float32)")
	f.StringP("output", "o", "", "output folder (output.dir; default out)")
	f.Int("threads", 0, "intra-op threads, 1 to the CPUs available; 0 = measure (runtime.threads)")
	f.String("mode", "", "runtime preset: latency or throughput (runtime.mode)")
	f.String("quantize", "", "INT8: none, static, dynamic or auto (quantize.mode)")
	f.String("engine", "", "quantized engine: auto, x86, fbgemm, onednn or qnnpack (quantize.engine)")
	f.String("calibration", "", "calibration data for --quantize static: .npy, .npz or an image folder (calibration.path)")
	f.Int("runs", 0, "final benchmark rounds (bench.runs)")
	f.Duration("duration", 0, "run the final benchmark for this long instead of a count of rounds, e.g. 30s; --time is the same flag (bench.duration)")
	f.String("allocator", "", "default, jemalloc or tcmalloc (runtime.allocator)")
	f.String("measure-runtime", "", "time OpenMP wait policies and allocators against libtorch's defaults, each in its own process, and keep a winner: auto, true or false (runtime.measure; auto: when --runs >= 100)")
	f.String("search", "", "quick: screen the runtime settings in one short round and measure only the contenders; full: measure every one (optimize.search; default quick)")
	f.Duration("budget", 0, "bound optimize's wall time, e.g. 5m: each measuring step fits what is left, and what no longer fits is reported as not measured (optimize.budget; 0: none)")
	f.Bool("overwrite", false, "replace an existing artifact (output.overwrite)")
	f.StringArray("op-library", nil, "shared library of custom operators the model calls, loaded before it (repeat; model.op_libraries)")
	f.BoolVar(&o.asJSON, "json", false, "print report.json to stdout instead of the table")
	f.SetNormalizeFunc(outAlias)
	completeEnums(c, map[string][]string{"search": {"quick", "full"}, "measure-runtime": {"auto", "true", "false"}, "quantize": quantModes, "engine": engines, "allocator": allocators, "mode": modes, "dtype": dtypes})
	return c
}

// outAlias keeps --out, the old spelling of --output, working without listing it, and takes
// --time for --duration as bench does.
func outAlias(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	switch name {
	case "out":
		name = "output"
	case "time":
		name = "duration"
	}
	return pflag.NormalizedName(name)
}

func (o *optimizeCmd) run(c *cobra.Command) error {
	cfg, err := o.config(c)
	if err != nil {
		return err
	}
	probe, s, applied, warnings, err := setUpRuntime(runenv.Options{
		Threads: cfg.Runtime.Threads, InteropThreads: cfg.Runtime.InteropThreads,
		Allocator: cfg.Runtime.Allocator, Mode: runenv.Mode(cfg.Runtime.Mode), NUMANodes: numaNodes(cfg.Runtime.NUMANode),
	}, nil)
	if err != nil {
		return err
	}
	stderr := c.ErrOrStderr()
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	opts := pipeline.Options{Threads: s.Threads, Settings: settingsMap(s, applied), Machine: probe}
	if cfg.Optimize.OptimizeForInference != config.Off {
		opts.MKLDNNBroken = checkMKLDNN(context.Background(), func(w string) { fmt.Fprintln(stderr, "warning:", w) })
	}
	// The runtime settings are measured in `bench --serve` processes of this binary.
	if exe, err := os.Executable(); err == nil {
		opts.Serve = []string{exe, "bench", "--serve"}
	}
	if cfg.Runtime.Threads == 0 && s.Threads > 1 {
		opts.AutoThreads = bench.ThreadCandidates(s.Threads)
	}
	if !o.ui.quiet && !cfg.Output.Quiet {
		opts.Log = o.ui.log(stderr)
		opts.Progress = o.ui.progressFunc(stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts.Stop = &pipeline.Stop{}
	finished := make(chan struct{})
	defer close(finished)
	go stopAfterGrace(ctx, finished, opts.Stop, stderr)
	rep, err := pipeline.Run(ctx, cfg, opts)
	if err != nil && rep == nil {
		if errors.Is(err, context.Canceled) {
			return exitcode.New(exitcode.Interrupt, err)
		}
		return err
	}
	w := c.OutOrStdout()
	if o.asJSON {
		if jerr := rep.WriteJSON(w); jerr != nil {
			return jerr
		}
	} else if terr := rep.WriteTable(w); terr != nil {
		return terr
	} else {
		fmt.Fprintln(w, tookLine(rep.WallMs, rep.Search))
	}
	return err
}

// tookLine is optimize's last line: its wall time with the CPU time it and its child processes
// (the serve processes of the runtime settings) used, and the load average, since on a machine
// other work loads the wall time stretches while the CPU time carries to a quiet one.
func tookLine(wallMs float64, search string) string {
	line := fmt.Sprintf("optimize took %.1f s (%s search)", wallMs/1000, search)
	var self, kids syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) == nil && syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids) == nil {
		cpu := func(u syscall.Rusage) float64 {
			return float64(u.Utime.Nano()+u.Stime.Nano()) / 1e9
		}
		line += fmt.Sprintf(", %.1f s of CPU (%.1f s its own, %.1f s its child processes)", cpu(self)+cpu(kids), cpu(self), cpu(kids))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			line += fmt.Sprintf("; load average %s %s %s", f[0], f[1], f[2])
		}
	}
	return line
}

// interruptGrace is how long optimize waits, after SIGINT or SIGTERM, for the pipeline to stop
// at its next check before ending the process: a model call in flight cannot be interrupted.
const interruptGrace = time.Second

// stopAfterGrace ends the process with exit 130 when ctx is canceled (a signal) and the run has
// not finished interruptGrace later: stop waits for a commit in progress and removes what the
// run staged, so nothing half-written is left.
func stopAfterGrace(ctx context.Context, finished <-chan struct{}, stop *pipeline.Stop, stderr io.Writer) {
	select {
	case <-finished:
		return
	case <-ctx.Done():
	}
	select {
	case <-finished:
		return
	case <-time.After(interruptGrace):
	}
	stop.Now()
	fmt.Fprintln(stderr, "optimize: interrupted during a model call: stopped; no output is left half-written")
	os.Exit(exitcode.Interrupt)
}

// config merges flags, TORCHSPEED_* variables, the file and the defaults; --input-shape
// replaces model.inputs, so a model and its shapes are a whole job without a file.
func (o *optimizeCmd) config(c *cobra.Command) (*config.Config, error) {
	cfg, err := loadConfig("optimize", o.configPath, c.Flags(), optimizeKeys, false)
	if err != nil {
		return nil, err
	}
	if len(o.dtypes) > len(o.shapes) {
		return nil, exitcode.Usagef("optimize: %d --dtype values for %d --input-shape inputs; give one per input", len(o.dtypes), len(o.shapes))
	}
	if len(o.shapes) > 0 {
		cfg.Model.Inputs = nil
		for i, s := range o.shapes {
			shape, err := config.ParseShape(s)
			if err != nil {
				return nil, exitcode.Usagef("optimize: --input-shape %q: %v", s, err)
			}
			in := config.Input{Name: fmt.Sprintf("input%d", i), Shape: shape, DType: "float32"}
			if i < len(o.dtypes) {
				in.DType = o.dtypes[i]
			}
			cfg.Model.Inputs = append(cfg.Model.Inputs, in)
		}
	}
	if cfg.Bench.Duration > 0 {
		if cfg.Given("bench.runs") && cfg.Bench.Runs > 0 {
			return nil, exitcode.Usagef("optimize: bench.runs (--runs) %d and bench.duration (--duration) %v both given; choose one", cfg.Bench.Runs, cfg.Bench.Duration)
		}
		cfg.Bench.Runs = 0 // a duration replaces the default count
	}
	if err := cfg.Validate(); err != nil {
		if len(o.shapes) > 0 {
			err = fmt.Errorf("%w (model.inputs from --input-shape)", err)
		}
		hint := ""
		if o.configPath == "" && cfg.Model.Path == "" {
			hint = "; give -m model.pt --input-shape 1x3x224x224, or -c config.yaml"
		}
		return nil, exitcode.Usagef("optimize: %v%s", err, hint)
	}
	if err := safefile.CheckInputFile(cfg.Model.Path); err != nil {
		return nil, exitcode.Usagef("optimize: model.path: %v", err)
	}
	if err := cfg.CheckOutput(); err != nil {
		return nil, exitcode.Usagef("optimize: %v", err)
	}
	if err := pipeline.Preflight(cfg); err != nil {
		return nil, fmt.Errorf("optimize: %w", err)
	}
	return cfg, nil
}
