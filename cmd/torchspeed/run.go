package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/npy"
)

type runCmd struct {
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

func newRunCmd() *cobra.Command {
	r := &runCmd{}
	c := &cobra.Command{
		Use:   "run -m MODEL (--input-shape 1x3x224x224 | --input x.npy)...",
		Short: "Load a TorchScript model, run it once, print output shapes and top-k",
		Args:  cobra.NoArgs,
		RunE:  func(c *cobra.Command, _ []string) error { return r.run(c) },
	}
	f := c.Flags()
	f.StringVarP(&r.model, "model", "m", "", "TorchScript file (.pt)")
	f.StringArrayVar(&r.shapes, "input-shape", nil, "shape of a random input, e.g. 1x3x224x224 (repeat for several inputs)")
	f.StringArrayVar(&r.dtypes, "dtype", nil, "dtype of each --input-shape input (float32, int64, ...; default float32)")
	f.StringArrayVar(&r.inputs, "input", nil, ".npy file holding an input (repeat for several inputs)")
	f.IntVar(&r.topk, "topk", 5, "how many of the largest values of each output row to print")
	f.IntVar(&r.threads, "threads", 0, "intra-op threads (0: libtorch's default)")
	f.Uint64Var(&r.seed, "seed", 1, "seed for random inputs")
	f.BoolVar(&r.asJSON, "json", false, "print JSON")
	return c
}

func (r *runCmd) run(c *cobra.Command) error {
	if r.model == "" {
		return usageErrorf("run: --model is required")
	}
	if len(r.shapes) > 0 && len(r.inputs) > 0 {
		return usageErrorf("run: give either --input-shape or --input, not both")
	}
	if len(r.shapes) == 0 && len(r.inputs) == 0 {
		return usageErrorf("run: give the model's inputs with --input-shape (random data) or --input (a .npy file)")
	}
	if r.threads > 0 {
		if err := torch.SetNumThreads(r.threads); err != nil {
			return usageError{err}
		}
	}
	inputs, err := r.makeInputs()
	if err != nil {
		return err
	}
	defer func() {
		for _, t := range inputs {
			t.Close()
		}
	}()
	m, err := torch.Load(r.model)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Eval(); err != nil {
		return err
	}
	start := time.Now()
	outs, err := m.Forward(inputs...)
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
	w := c.OutOrStdout()
	if r.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"model": r.model, "first_run_ms": float64(elapsed.Microseconds()) / 1000, "outputs": res})
	}
	fmt.Fprintf(w, "%s: %d output(s), first run %.2f ms\n", r.model, len(res), float64(elapsed.Microseconds())/1000)
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

func (r *runCmd) makeInputs() ([]*torch.Tensor, error) {
	var out []*torch.Tensor
	fail := func(err error) ([]*torch.Tensor, error) {
		for _, t := range out {
			t.Close()
		}
		return nil, err
	}
	for _, path := range r.inputs {
		a, err := npy.ReadFile(path)
		if err != nil {
			return fail(usageError{fmt.Errorf("--input: %w", err)})
		}
		t, err := torch.NewTensorAny(a.Data, a.Shape)
		if err != nil {
			return fail(usageError{fmt.Errorf("--input %s: %w", path, err)})
		}
		out = append(out, t)
	}
	rng := rand.New(rand.NewPCG(r.seed, r.seed^0x9e3779b97f4a7c15))
	for i, s := range r.shapes {
		shape, err := ParseShape(s)
		if err != nil {
			return fail(usageError{fmt.Errorf("--input-shape %q: %w", s, err)})
		}
		dt := torch.Float32
		if i < len(r.dtypes) {
			if dt, err = torch.ParseDType(r.dtypes[i]); err != nil {
				return fail(usageError{fmt.Errorf("--dtype: %w", err)})
			}
		}
		t, err := benchrun.RandomTensor(rng, shape, dt)
		if err != nil {
			return fail(usageError{fmt.Errorf("--input-shape %q: %w", s, err)})
		}
		out = append(out, t)
	}
	return out, nil
}

// ParseShape reads "1x3x224x224" (also "1,3,224,224").
func ParseShape(s string) ([]int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty shape: write it like 1x3x224x224")
	}
	var shape []int64
	for _, p := range strings.FieldsFunc(s, func(r rune) bool { return r == 'x' || r == ',' || r == 'X' }) {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a dimension: write the shape like 1x3x224x224", p)
		}
		shape = append(shape, v)
	}
	return shape, nil
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
