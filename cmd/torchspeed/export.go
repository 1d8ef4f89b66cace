package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"

	"github.com/torchspeed/torchspeed/pkg/export"
)

// exportFlags are the flags every export target takes.
type exportFlags struct {
	model     string
	out       string
	name      string
	overwrite bool
	measure   bool
	runs      int
	duration  time.Duration
	asJSON    bool
}

func (f *exportFlags) bind(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVarP(&f.model, "model", "m", "", "artifact written by torchspeed optimize (.torchspeed.pt)")
	fl.StringVarP(&f.out, "output", "o", "", "output folder")
	// --out was this flag's name before every command said --output; it still works.
	fl.StringVar(&f.out, "out", "", "output folder")
	_ = fl.MarkDeprecated("out", "use --output (-o)")
	fl.StringVar(&f.name, "name", "", "model name (default: the artifact's file name without .torchspeed.pt)")
	fl.BoolVar(&f.overwrite, "overwrite", false, "replace files an earlier export wrote")
	fl.BoolVar(&f.measure, "measure", true, "time the artifact as the server loads it, against torchspeed.Load")
	fl.IntVar(&f.runs, "runs", 100, "interleaved rounds for --measure")
	fl.DurationVar(&f.duration, "duration", 0, "time --measure for this long instead of --runs rounds, e.g. 30s (--time is the same flag)")
	fl.SetNormalizeFunc(timeAlias)
	fl.BoolVar(&f.asJSON, "json", false, "print JSON")
}

func (f *exportFlags) check(cmd string) error {
	if f.model == "" || f.out == "" {
		return exitcode.Usagef("export %s: --model (-m) and --output (-o) are required", cmd)
	}
	if f.runs < 1 {
		return exitcode.Usagef("export %s: --runs %d: give 1 or more", cmd, f.runs)
	}
	if f.duration < 0 {
		return exitcode.Usagef("export %s: --duration %v: give a positive duration, e.g. 30s", cmd, f.duration)
	}
	if err := safefile.CheckInputFile(f.model); err != nil {
		return exitcode.Usagef("export %s: --model: %v", cmd, err)
	}
	if f.name != "" {
		if err := export.CheckName(f.name); err != nil {
			return exitcode.Usagef("export %s: --name: %v", cmd, err)
		}
	}
	return nil
}

func newExportCmd(u *ui) *cobra.Command {
	c := &cobra.Command{
		Use:   "export",
		Short: "Write what production servers load: Triton, TorchServe or KServe files",
	}
	c.AddCommand(newExportTritonCmd(u), newExportTorchServeCmd(u), newExportKServeCmd(u))
	return c
}

// exported is what one target wrote: the file the server loads, the load-time passes whose
// graph it holds, the lines to print, the notes, and the JSON body (with the cost measured on
// the served file, nil when not measured).
type exported struct {
	served      string
	savedPasses []string
	lines       []string
	notes       []string
	json        func(cost *export.Cost) any
	cost        *export.Cost // measured while writing (Triton's parameters depend on it)
}

// exportTarget is one server export: its subcommand and server name, what its instance count
// flag is called, and how it writes its files.
type exportTarget struct {
	cmd, server, loads string // "triton", "Triton", "plain torch::jit::load"
	measuring          string // what else the measurement times, for the log line
	countFlag          string // --instances or --workers
	write              func(a *export.Artifact, sweep *bench.SweepResult) (exported, error)
}

// run checks the flags, reads the optional sweep report, inspects the artifact, writes the
// target's files, measures what plain loading costs and prints the result.
func (t exportTarget) run(c *cobra.Command, u *ui, f *exportFlags, count int, sweepPath string) error {
	if err := f.check(t.cmd); err != nil {
		return err
	}
	if count < 0 {
		return exitcode.Usagef("export %s: --%s %d: give 1 or more (0: not measured)", t.cmd, t.countFlag, count)
	}
	var sweep *bench.SweepResult
	if sweepPath != "" {
		var err error
		if sweep, err = export.ReadBatchSweep(sweepPath, f.model); err != nil {
			return exitcode.New(exitcode.Usage, err)
		}
	}
	a, err := export.Inspect(f.model)
	if err != nil {
		return err
	}
	for _, w := range a.Warnings {
		fmt.Fprintf(c.ErrOrStderr(), "export %s: warning: %s\n", t.cmd, w)
	}
	if f.measure {
		fmt.Fprintf(u.logOrDiscard(c.ErrOrStderr()), "export: timing the artifact as %s loads it (%s%s) against torchspeed.Load ...\n", t.server, t.loads, t.measuring)
	}
	e, err := t.write(a, sweep)
	if err != nil {
		return err
	}
	cost := e.cost
	if f.measure && cost == nil {
		if cost, err = export.MeasureCost(a, e.served, e.savedPasses, export.CostOptions{Runs: f.runs, Duration: f.duration, Server: t.server}); err != nil {
			return err
		}
	}
	w := c.OutOrStdout()
	if f.asJSON {
		return printExportJSON(w, e.json(cost))
	}
	for _, l := range e.lines {
		fmt.Fprintln(w, l)
	}
	if cost != nil && cost.Params != nil {
		fmt.Fprintln(w, cost.Params.Table())
	}
	printExportNotes(w, e.notes, cost)
	return nil
}

type exportTritonOutput struct {
	*export.TritonExport
	Cost *export.Cost `json:"cost"`
}

func newExportTritonCmd(u *ui) *cobra.Command {
	var f exportFlags
	var o export.TritonOptions
	var sweep string
	measureParams := true
	t := exportTarget{cmd: "triton", server: "Triton", loads: "plain torch::jit::load", countFlag: "instances",
		write: func(a *export.Artifact, s *bench.SweepResult) (exported, error) {
			o.Name, o.Overwrite, o.BatchSweep, o.Keep = f.name, f.overwrite, s, []string{sweep}
			if f.measure {
				o.Measure = &export.CostOptions{Runs: f.runs, Duration: f.duration, Params: measureParams}
			}
			e, err := export.WriteTriton(a, f.out, o)
			if err != nil {
				return exported{}, err
			}
			lines := []string{"wrote " + e.ModelPath, "wrote " + e.ConfigPath}
			if e.OpLibrary != "" {
				lines = append(lines, "wrote "+e.OpLibrary)
			}
			if e.EnvPath != "" {
				lines = append(lines, "wrote "+e.EnvPath)
			}
			return exported{served: e.ModelPath, savedPasses: e.SavedPasses, notes: e.Notes, cost: e.Cost, lines: lines,
				json: func(cost *export.Cost) any { return exportTritonOutput{TritonExport: e, Cost: cost} }}, nil
		}}
	c := &cobra.Command{
		Use:   "triton -m ARTIFACT -o REPO [--name NAME] [--max-batch N] [--instances N]",
		Short: "Write REPO/NAME/1/model.pt and REPO/NAME/config.pbtxt for Triton's PyTorch backend",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if c.Flags().Changed("measure-params") && measureParams && !f.measure {
				return exitcode.Usagef("export triton: --measure-params times the executor settings within the cost measurement: drop --measure=false")
			}
			if measureParams {
				t.measuring = ", and under each executor setting the backend offers"
			}
			return t.run(c, u, &f, o.Instances, sweep)
		},
	}
	f.bind(c)
	c.Flags().IntVar(&o.MaxBatch, "max-batch", 0, fmt.Sprintf("max_batch_size for a batchable model (0: %d; -1: no batching)", export.DefaultMaxBatch))
	c.Flags().StringVar(&sweep, "batch-sweep", "", "JSON report of torchspeed bench -m ARTIFACT --sweep-batch 1,2,4,8 --json;\nwrites dynamic_batching when it shows batching pays")
	c.Flags().IntVar(&o.Instances, "instances", 0, "KIND_CPU instance count, as measured with torchspeed bench --instances\n(0: not measured, write 1)")
	c.Flags().BoolVar(&o.StockOps, "stock-ops", false, "serve libtorch's operators only: leave out the load-time passes that call\ntorchspeed's (no libtorchspeed_ops.so to preload)")
	c.Flags().BoolVar(&measureParams, "measure-params", true, "with --measure, also time each executor setting the backend offers and write\nthe fastest significant one (false: the backend's defaults)")
	return c
}

type exportTorchServeOutput struct {
	*export.TorchServeExport
	Cost *export.Cost `json:"cost"`
}

func newExportTorchServeCmd(u *ui) *cobra.Command {
	var f exportFlags
	var o export.TorchServeOptions
	var sweep string
	t := exportTarget{cmd: "torchserve", server: "TorchServe", loads: "plain torch.jit.load", countFlag: "workers",
		write: func(a *export.Artifact, s *bench.SweepResult) (exported, error) {
			o.Name, o.Overwrite, o.BatchSweep, o.Keep = f.name, f.overwrite, s, []string{sweep}
			e, err := export.WriteTorchServe(a, f.out, o)
			if err != nil {
				return exported{}, err
			}
			var lines []string
			for _, p := range e.Files {
				lines = append(lines, "wrote "+p)
			}
			lines = append(lines, "then run:\n  "+e.ArchiverCommand)
			return exported{served: e.Files[0], savedPasses: e.SavedPasses, notes: e.Notes, lines: lines,
				json: func(cost *export.Cost) any { return exportTorchServeOutput{TorchServeExport: e, Cost: cost} }}, nil
		}}
	c := &cobra.Command{
		Use:   "torchserve -m ARTIFACT -o DIR [--name NAME] [--workers N]",
		Short: "Write what torch-model-archiver takes, and the command to run",
		Args:  cobra.NoArgs,
		RunE:  func(c *cobra.Command, _ []string) error { return t.run(c, u, &f, o.Workers, sweep) },
	}
	f.bind(c)
	c.Flags().StringVar(&sweep, "batch-sweep", "", "JSON report of torchspeed bench -m ARTIFACT --sweep-batch 1,2,4,8 --json;\nwrites batchSize and maxBatchDelay when it shows batching pays")
	c.Flags().BoolVar(&o.StockOps, "stock-ops", false, "serve libtorch's operators only: leave out the load-time passes that call\ntorchspeed's (no libtorchspeed_ops.so to load)")
	c.Flags().IntVar(&o.Workers, "workers", 0, "workers per model, as measured with torchspeed bench --instances\n(0: not measured, write 1)")
	return c
}

type exportKServeOutput struct {
	*export.KServeExport
}

func newExportKServeCmd(u *ui) *cobra.Command {
	var f exportFlags
	var o export.KServeOptions
	var sweep, memory string
	t := exportTarget{cmd: "kserve", server: "KServe", loads: "torchspeed serve", countFlag: "instances",
		write: func(a *export.Artifact, s *bench.SweepResult) (exported, error) {
			o.Name, o.Overwrite, o.BatchSweep, o.Keep = f.name, f.overwrite, s, []string{sweep}
			e, err := export.WriteKServe(a, f.out, o)
			if err != nil {
				return exported{}, err
			}
			var lines []string
			for _, p := range e.Files {
				lines = append(lines, "wrote "+p)
			}
			lines = append(lines, fmt.Sprintf("then: kubectl apply -f %s -f %s", e.Files[1], e.Files[2]))
			return exported{served: e.Files[0], notes: e.Notes, lines: lines,
				json: func(*export.Cost) any { return exportKServeOutput{e} }}, nil
		}}
	c := &cobra.Command{
		Use:   "kserve -m ART -o DIR [--instances N] [--image IMAGE] [--storage-uri URI]",
		Short: "Write a KServe ServingRuntime (torchspeed serve) and an InferenceService",
		Long: `kserve writes DIR/NAME.torchspeed.pt (the artifact, which torchspeed serve loads with its
load-time passes), DIR/servingruntime.yaml (torchspeed serve on the Open Inference Protocol v2:
REST on 8080, gRPC on 9000) and DIR/inferenceservice.yaml (CPU request and limit = the artifact's
threads x --instances, memory, and the runtime environment optimize measured).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if memory != "" {
				b, err := parseQuantity(memory)
				if err != nil {
					return exitcode.Usagef("export kserve: --memory %q: %v", memory, err)
				}
				o.MemoryBytes = b
			}
			// serve runs the artifact with torchspeed's loader: there is no plain-loading cost
			// to measure.
			f.measure = false
			return t.run(c, u, &f, o.Instances, sweep)
		},
	}
	f.bind(c)
	_ = c.Flags().MarkHidden("measure")
	_ = c.Flags().MarkHidden("runs")
	c.Flags().StringVar(&sweep, "batch-sweep", "", "JSON report of torchspeed bench -m ARTIFACT --sweep-batch 1,2,4,8 --json;\nadds --max-batch and --batch-delay when it shows batching pays")
	c.Flags().IntVar(&o.Instances, "instances", 0, "serve instances, as measured with torchspeed bench --instances (0: not measured, 1)")
	c.Flags().StringVar(&o.Image, "image", "", "container image with torchspeed (default "+export.DefaultKServeImage+", built by docker/Dockerfile)")
	c.Flags().StringVar(&o.StorageURI, "storage-uri", "", "where KServe fetches the folder with NAME.torchspeed.pt (s3://, gs://, pvc://, https://)")
	c.Flags().StringVar(&memory, "memory", "", "memory request and limit, a Kubernetes quantity such as 1Gi or 512Mi (default: measured)")
	return c
}

// parseQuantity reads a memory size as Kubernetes writes it: bytes, or a number with Ki, Mi,
// Gi, Ti (or k, M, G, T).
func parseQuantity(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"", 1}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n <= 0 || n > (1<<50)/u.mult {
			break
		}
		if n*u.mult < 64<<20 {
			return 0, fmt.Errorf("under 64Mi: libtorch alone needs more")
		}
		return n * u.mult, nil
	}
	return 0, fmt.Errorf("give a whole number of bytes or of Ki, Mi, Gi, Ti (e.g. 2Gi)")
}

func printExportNotes(w io.Writer, notes []string, cost *export.Cost) {
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if cost != nil {
		fmt.Fprintln(w, cost.Sentence)
	}
}

func printExportJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
