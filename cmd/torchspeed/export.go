package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/internal/exitcode"

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
	asJSON    bool
}

func (f *exportFlags) bind(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVarP(&f.model, "model", "m", "", "artifact written by `torchspeed optimize` (.torchspeed.pt)")
	fl.StringVarP(&f.out, "out", "o", "", "output folder")
	fl.StringVar(&f.name, "name", "", "model name (default: the artifact's file name without .torchspeed.pt)")
	fl.BoolVar(&f.overwrite, "overwrite", false, "replace files an earlier export wrote")
	fl.BoolVar(&f.measure, "measure", true, "time the artifact as the server loads it against torchspeed.Load")
	fl.IntVar(&f.runs, "runs", 100, "interleaved rounds for --measure")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON")
}

func (f *exportFlags) check(cmd string) error {
	if f.model == "" || f.out == "" {
		return exitcode.Usagef("export %s: --model (-m) and --out (-o) are required", cmd)
	}
	if f.runs < 1 {
		return exitcode.Usagef("export %s: --runs %d: give 1 or more", cmd, f.runs)
	}
	return nil
}

func newExportCmd(u *ui) *cobra.Command {
	c := &cobra.Command{
		Use:   "export",
		Short: "Write what production servers load: a Triton model repository or TorchServe files",
	}
	c.AddCommand(newExportTritonCmd(u), newExportTorchServeCmd(u))
	return c
}

type exportTritonOutput struct {
	*export.TritonExport
	Cost *export.Cost `json:"cost"`
}

func newExportTritonCmd(u *ui) *cobra.Command {
	var f exportFlags
	var o export.TritonOptions
	var sweep string
	c := &cobra.Command{
		Use:   "triton -m ARTIFACT -o REPO [--name NAME] [--max-batch N] [--instances N]",
		Short: "Write REPO/NAME/1/model.pt and REPO/NAME/config.pbtxt for Triton's PyTorch backend",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := f.check("triton"); err != nil {
				return err
			}
			if o.Instances < 0 {
				return exitcode.Usagef("export triton: --instances %d: give 1 or more (0: not measured)", o.Instances)
			}
			o.Name, o.Overwrite = f.name, f.overwrite
			if sweep != "" {
				var err error
				if o.BatchSweep, err = export.ReadBatchSweep(sweep, f.model); err != nil {
					return exitcode.New(exitcode.Usage, err)
				}
			}
			a, err := export.Inspect(f.model)
			if err != nil {
				return err
			}
			e, err := export.WriteTriton(a, f.out, o)
			if err != nil {
				return err
			}
			res := exportTritonOutput{TritonExport: e}
			if f.measure {
				fmt.Fprintln(u.logOrDiscard(c.ErrOrStderr()), "export: timing the artifact as Triton loads it (plain torch::jit::load) against torchspeed.Load ...")
				if res.Cost, err = export.MeasureCost(a, e.ModelPath, e.OptimizedSaved, export.CostOptions{Runs: f.runs, Server: "Triton"}); err != nil {
					return err
				}
			}
			if f.asJSON {
				return printExportJSON(c.OutOrStdout(), res)
			}
			w := c.OutOrStdout()
			fmt.Fprintf(w, "wrote %s\nwrote %s\n", e.ModelPath, e.ConfigPath)
			printExportNotes(w, e.Notes, res.Cost)
			return nil
		},
	}
	f.bind(c)
	c.Flags().IntVar(&o.MaxBatch, "max-batch", 0, fmt.Sprintf("max_batch_size for a batchable model (0: %d; -1: no batching)", export.DefaultMaxBatch))
	c.Flags().StringVar(&sweep, "batch-sweep", "", "JSON report of `torchspeed bench -m ARTIFACT --sweep-batch 1,2,4,8 [--latency-budget D] --json`: write dynamic_batching when it shows batching pays")
	c.Flags().IntVar(&o.Instances, "instances", 0, "KIND_CPU instance count measured with `torchspeed bench --instances` (0: not measured, write 1)")
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
	c := &cobra.Command{
		Use:   "torchserve -m ARTIFACT -o DIR [--name NAME] [--workers N]",
		Short: "Write what torch-model-archiver takes (model, model-config.yaml, config.properties) and the command to run",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := f.check("torchserve"); err != nil {
				return err
			}
			if o.Workers < 0 {
				return exitcode.Usagef("export torchserve: --workers %d: give 1 or more (0: not measured)", o.Workers)
			}
			o.Name, o.Overwrite = f.name, f.overwrite
			if sweep != "" {
				var err error
				if o.BatchSweep, err = export.ReadBatchSweep(sweep, f.model); err != nil {
					return exitcode.New(exitcode.Usage, err)
				}
			}
			a, err := export.Inspect(f.model)
			if err != nil {
				return err
			}
			e, err := export.WriteTorchServe(a, f.out, o)
			if err != nil {
				return err
			}
			res := exportTorchServeOutput{TorchServeExport: e}
			if f.measure {
				fmt.Fprintln(u.logOrDiscard(c.ErrOrStderr()), "export: timing the artifact as TorchServe loads it (plain torch.jit.load) against torchspeed.Load ...")
				if res.Cost, err = export.MeasureCost(a, e.Files[0], e.OptimizedSaved, export.CostOptions{Runs: f.runs, Server: "TorchServe"}); err != nil {
					return err
				}
			}
			if f.asJSON {
				return printExportJSON(c.OutOrStdout(), res)
			}
			w := c.OutOrStdout()
			for _, p := range e.Files {
				fmt.Fprintf(w, "wrote %s\n", p)
			}
			fmt.Fprintf(w, "then run:\n  %s\n", e.ArchiverCommand)
			printExportNotes(w, e.Notes, res.Cost)
			return nil
		},
	}
	f.bind(c)
	c.Flags().StringVar(&sweep, "batch-sweep", "", "JSON report of `torchspeed bench -m ARTIFACT --sweep-batch 1,2,4,8 [--latency-budget D] --json`: batchSize and maxBatchDelay when it shows batching pays")
	c.Flags().IntVar(&o.Workers, "workers", 0, "workers per model measured with `torchspeed bench --instances` (0: not measured, write 1)")
	return c
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
