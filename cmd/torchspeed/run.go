package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

type runCmd struct {
	ui      *ui
	model   string
	shapes  []string
	dtypes  []string
	inputs  []string
	topk    int
	threads int
	seed    uint64
	asJSON  bool
}

type runOutput struct {
	Name  string    `json:"name"`
	Shape []int64   `json:"shape"`
	DType string    `json:"dtype"`
	TopK  []topItem `json:"topk,omitempty"`
	Min   float64   `json:"min"`
	Max   float64   `json:"max"`
	Mean  float64   `json:"mean"`
	NaNs  int       `json:"nans"`
}

type topItem struct {
	Index int     `json:"index"`
	Value float32 `json:"value"`
}

func newRunCmd(u *ui) *cobra.Command {
	r := &runCmd{ui: u}
	c := &cobra.Command{
		Use:   "run -m MODEL [--input-shape 1x3x224x224 | --input x.npy]...",
		Short: "Load a TorchScript model or artifact, run it once, print output shapes and top-k",
		Long: `run loads a model (an artifact made by optimize with its load-time passes and settings) and
runs it once on random inputs of the given shapes, or on inputs read from .npy files. An
artifact's manifest gives its inputs when none are given.`,
		Example: `  torchspeed run -m out/resnet18.torchspeed.pt
  torchspeed run -m resnet18.pt --input-shape 1x3x224x224 --topk 3
  torchspeed run -m model.pt --input x.npy --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return r.run(c) },
	}
	f := c.Flags()
	f.StringVarP(&r.model, "model", "m", "", "TorchScript file or torchspeed artifact (.pt)")
	f.StringArrayVar(&r.shapes, "input-shape", nil, "shape of a random input, e.g. 1x3x224x224 (repeat for several inputs; default: the artifact's)")
	f.StringArrayVar(&r.dtypes, "dtype", nil, "dtype of each --input-shape input (float32, int64, ...; default float32)")
	f.StringArrayVar(&r.inputs, "input", nil, ".npy file holding an input (repeat for several inputs)")
	f.IntVar(&r.topk, "topk", 5, "how many of the largest values of each output row to print")
	f.IntVar(&r.threads, "threads", 0, "intra-op threads, 1 to the CPUs available (0: the artifact's, else libtorch's default)")
	f.Uint64Var(&r.seed, "seed", 1, "seed for random inputs")
	f.BoolVar(&r.asJSON, "json", false, "print JSON")
	completeEnums(c, map[string][]string{"dtype": dtypes})
	return c
}

func (r *runCmd) run(c *cobra.Command) error {
	if r.model == "" {
		return exitcode.Usagef("run: --model is required")
	}
	if len(r.shapes) > 0 && len(r.inputs) > 0 {
		return exitcode.Usagef("run: give either --input-shape or --input, not both")
	}
	if err := config.CheckThreads("run: --threads", r.threads, "the artifact's, else libtorch's default"); err != nil {
		return exitcode.New(exitcode.Usage, err)
	}
	if _, err := os.Stat(r.model); err != nil {
		return exitcode.Usagef("run: model %q: %v", r.model, err)
	}
	m, err := torchspeed.Load(r.model, torchspeed.LoadOptions{KeepThreads: true})
	if err != nil {
		return err
	}
	defer m.Close()
	log := r.ui.logOrDiscard(c.ErrOrStderr())
	if err := r.setThreads(m, c.ErrOrStderr()); err != nil {
		return err
	}
	inputs, err := r.makeInputs(m.Manifest, log)
	if err != nil {
		return err
	}
	defer benchrun.CloseTensors(inputs)
	start := time.Now()
	outs, err := m.Predict(inputs...)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	defer torch.CloseOutputs(outs)
	var res []runOutput
	for _, o := range outs {
		ro, err := summarizeOutput(o, r.topk)
		if err != nil {
			return err
		}
		res = append(res, ro)
	}
	return r.print(c.OutOrStdout(), elapsed, res)
}

// setThreads applies --threads, else the artifact's count bounded by the CPUs here.
func (r *runCmd) setThreads(m *torchspeed.Model, warn io.Writer) error {
	n := r.threads
	if n == 0 && m.Manifest != nil && m.Manifest.Runtime.Threads != 0 {
		var warning string
		if n, warning = config.ClampThreads("the manifest of "+r.model, m.Manifest.Runtime.Threads); warning != "" {
			fmt.Fprintln(warn, "run: warning:", warning)
		}
	}
	if n > 0 {
		return torch.SetNumThreads(n)
	}
	return nil
}

func (r *runCmd) print(w io.Writer, elapsed time.Duration, res []runOutput) error {
	ms := float64(elapsed.Microseconds()) / 1000
	if r.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"model": r.model, "first_run_ms": ms, "outputs": res})
	}
	fmt.Fprintf(w, "%s: %d output(s), first run %.2f ms\n", r.model, len(res), ms)
	for _, o := range res {
		fmt.Fprintf(w, "  %-8s %s%v  min %.4g max %.4g mean %.4g", o.Name, o.DType, o.Shape, o.Min, o.Max, o.Mean)
		if o.NaNs > 0 {
			fmt.Fprintf(w, "  NaN: %d", o.NaNs)
		}
		fmt.Fprintln(w)
		if len(o.TopK) > 0 {
			parts := make([]string, len(o.TopK))
			for i, t := range o.TopK {
				parts[i] = fmt.Sprintf("%d:%.4g", t.Index, t.Value)
			}
			fmt.Fprintf(w, "           top-%d (row 0): %s\n", len(o.TopK), strings.Join(parts, "  "))
		}
	}
	return nil
}

// makeInputs reads --input files, or makes random inputs of --input-shape, else of the shapes
// the artifact's manifest lists; sizes are checked before anything is allocated.
func (r *runCmd) makeInputs(man *torchspeed.Manifest, log io.Writer) ([]*torch.Tensor, error) {
	var out []*torch.Tensor
	for _, path := range r.inputs {
		a, err := npy.ReadFile(path)
		if err != nil {
			benchrun.CloseTensors(out)
			return nil, exitcode.New(exitcode.Usage, fmt.Errorf("run: --input: %w", err))
		}
		t, err := torch.NewTensorAny(a.Data, a.Shape)
		if err != nil {
			benchrun.CloseTensors(out)
			return nil, exitcode.New(exitcode.Usage, fmt.Errorf("run: --input %s: %w", path, err))
		}
		out = append(out, t)
	}
	if len(r.inputs) > 0 {
		return out, nil
	}
	what, shapes, dts := "run: --input-shape", r.shapes, r.dtypes
	if len(shapes) == 0 && man != nil {
		for _, in := range man.Inputs {
			shapes = append(shapes, config.FormatShape(in.Shape))
			dts = append(dts, in.DType)
		}
		what = "run: the manifest of " + r.model
		if len(shapes) > 0 {
			fmt.Fprintf(log, "run: inputs %s from the artifact's manifest\n", strings.Join(shapes, ", "))
		}
	}
	if len(shapes) == 0 {
		return nil, exitcode.Usagef("run: give the model's inputs with --input-shape (random data) or --input (a .npy file); only artifacts made by torchspeed optimize list them")
	}
	specs, err := parseInputs(what, shapes, dts)
	if err != nil {
		return nil, err
	}
	ts, err := benchrun.MakeInputs(specs, 0, r.seed)
	return ts, inputUsage(err)
}

func summarizeOutput(o torch.Output, k int) (runOutput, error) {
	ro := runOutput{Name: o.Name, Shape: o.Tensor.Shape(), DType: o.Tensor.DType().String()}
	vals, err := o.Tensor.Float32s()
	if err != nil {
		return ro, fmt.Errorf("output %s: %w", o.Name, err)
	}
	if len(vals) == 0 {
		return ro, nil
	}
	ro.Min, ro.Max = float64(vals[0]), float64(vals[0])
	sum := 0.0
	for _, v := range vals {
		f := float64(v)
		if f != f {
			ro.NaNs++
			continue
		}
		ro.Min, ro.Max = min(ro.Min, f), max(ro.Max, f)
		sum += f
	}
	ro.Mean = sum / float64(len(vals))
	if k > 0 && len(ro.Shape) >= 1 {
		row := vals
		if last := ro.Shape[len(ro.Shape)-1]; last > 0 && int64(len(vals)) > last {
			row = vals[:last]
		}
		idx := make([]int, len(row))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return row[idx[a]] > row[idx[b]] })
		for _, i := range idx[:min(k, len(idx))] {
			ro.TopK = append(ro.TopK, topItem{Index: i, Value: row[i]})
		}
	}
	return ro, nil
}
