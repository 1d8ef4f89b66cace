package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/pipeline"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

type optimizeCmd struct {
	configPath string
	asJSON     bool
}

// Flags whose names are not dotted keys map to config keys here.
var optimizeAliases = map[string]string{
	"model":     "model.path",
	"out":       "output.dir",
	"threads":   "runtime.threads",
	"quantize":  "quantize.mode",
	"engine":    "quantize.engine",
	"runs":      "bench.runs",
	"quiet":     "output.quiet",
	"overwrite": "output.overwrite",
	"allocator": "runtime.allocator",
}

func newOptimizeCmd() *cobra.Command {
	o := &optimizeCmd{}
	c := &cobra.Command{
		Use:   "optimize -c config.yaml",
		Short: "Optimize a TorchScript model: freeze, fold, oneDNN fusions, channels-last, INT8; validate, bench, save",
		Args:  cobra.NoArgs,
		RunE:  func(c *cobra.Command, _ []string) error { return o.run(c) },
	}
	f := c.Flags()
	f.StringVarP(&o.configPath, "config", "c", "", "YAML config (see configs/; `torchspeed config init` writes one)")
	f.StringP("model", "m", "", "TorchScript model (model.path)")
	f.StringP("out", "o", "", "output folder (output.dir)")
	f.Int("threads", 0, "intra-op threads, 0 = measure (runtime.threads)")
	f.String("quantize", "", "none, static, dynamic or auto (quantize.mode)")
	f.String("engine", "", "quantized engine: auto, x86, fbgemm, onednn, qnnpack (quantize.engine)")
	f.Int("runs", 0, "final benchmark rounds (bench.runs)")
	f.String("allocator", "", "default, jemalloc or tcmalloc (runtime.allocator)")
	f.Bool("quiet", false, "no progress output (output.quiet)")
	f.Bool("overwrite", false, "replace an existing artifact (output.overwrite)")
	f.BoolVar(&o.asJSON, "json", false, "print report.json to stdout instead of the table")
	return c
}

func (o *optimizeCmd) run(c *cobra.Command) error {
	cfg, err := config.Load(o.configPath, c.Flags(), optimizeAliases)
	if err != nil {
		return usageError{err}
	}
	probe, s, applied, warnings, err := setUpRuntime(runenv.Options{
		Threads: cfg.Runtime.Threads, InteropThreads: cfg.Runtime.InteropThreads,
		Allocator: cfg.Runtime.Allocator, Mode: runenv.Mode(cfg.Runtime.Mode), NUMANodes: numaNodes(cfg.Runtime.NUMANode),
	})
	if err != nil {
		return err
	}
	log := c.ErrOrStderr()
	quiet := cfg.Output.Quiet || !isTerminal(os.Stderr) && os.Getenv("TORCHSPEED_PROGRESS") == ""
	for _, w := range warnings {
		fmt.Fprintln(log, "warning:", w)
	}
	opts := pipeline.Options{Threads: s.Threads, Settings: settingsMap(s, applied), Machine: probe}
	if cfg.Optimize.OptimizeForInference != config.Off {
		opts.MKLDNNBroken = checkMKLDNN(context.Background(), func(w string) { fmt.Fprintln(log, "warning:", w) })
	}
	if cfg.Runtime.Threads == 0 && s.Threads > 1 {
		opts.AutoThreads = bench.ThreadCandidates(s.Threads)
	}
	if !quiet {
		opts.Log = log
		if isTerminal(os.Stderr) {
			opts.Progress = progressBars(log)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := pipeline.Run(ctx, cfg, opts)
	if err != nil && rep == nil {
		if errors.Is(err, context.Canceled) {
			return exitErr{code: exitInterrupt, err: err}
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
	}
	return err
}

type exitErr struct {
	code int
	err  error
}

func (e exitErr) Error() string { return e.err.Error() }
func (e exitErr) Unwrap() error { return e.err }
func (e exitErr) ExitCode() int { return e.code }

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// progressBars draws one bar per long stage on a terminal.
func progressBars(w io.Writer) func(stage string, done, total int) {
	bars := map[string]*progressbar.ProgressBar{}
	return func(stage string, done, total int) {
		b, ok := bars[stage]
		if !ok {
			b = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(stage),
				progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
			bars[stage] = b
		}
		_ = b.Set(done)
		if done >= total {
			_ = b.Finish()
		}
	}
}
