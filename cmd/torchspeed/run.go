package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

type runCmd struct {
	ui      *ui
	model   string
	config  string
	reset   string   // model.reset_method
	opLibs  []string // model.op_libraries
	args    callInputs
	calls   int
	save    string
	topk    int
	threads int
	asJSON  bool
}

// runOutput summarizes one output. Min, max and mean leave NaNs out (nans counts them); in JSON a
// value that is NaN or infinite (an output of only NaNs, an overflow) is null.
type runOutput struct {
	Name  string    `json:"name"`
	Shape []int64   `json:"shape"`
	DType string    `json:"dtype"`
	TopK  []topItem `json:"topk,omitempty"`
	Min   jsonFloat `json:"min"`
	Max   jsonFloat `json:"max"`
	Mean  jsonFloat `json:"mean"`
	NaNs  int       `json:"nans"`
}

type topItem struct {
	Index int       `json:"index"`
	Value jsonFloat `json:"value"`
}

// jsonFloat is a number that JSON cannot always hold: NaN and the infinities are null there.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

func newRunCmd(u *ui) *cobra.Command {
	r := &runCmd{ui: u}
	c := &cobra.Command{
		Use:   "run -m MODEL [--input [NAME=]VALUE]... [--input-shape S]... [--save OUT.npz]",
		Short: "Run a model or artifact on real or random inputs; print (and save) its outputs",
		Long: `run loads a model (an artifact made by optimize with its load-time passes and settings) and
calls its method (forward, or --method) with the arguments the method's schema declares:

  --input [NAME=]VALUE   x.npy, x.npz (all members: a Dict[str, Tensor]), x.npz:MEMBER,
                         seq:CHUNKS.npy (call i takes slice i along dimension 0, in order),
                         a.npy,b.npy (a List or Tuple of tensors), int:N, float:X,
                         bool:true|false, str:TEXT, none
  --input-shape SHAPE    a random tensor of that shape (--dtype)

Values without NAME= fill the arguments in order; arguments left out take the schema's
default. A sequence runs once per call (--calls N for fewer, or to repeat fixed inputs);
--save writes the outputs as .npz, stacked per call for a sequence. A model that keeps state
between calls (attributes its method assigns) is reset first. -c takes model.path,
model.method and model.inputs from a config. An artifact's manifest gives its inputs when
none are given.`,
		Example: `  torchspeed run -m out/resnet18.torchspeed.pt
  torchspeed run -m resnet18.pt --input-shape 1x3x224x224 --topk 3
  torchspeed run -m vad.pt --input x=seq:chunks.npy --input sr=int:16000 --save out.npz
  torchspeed run -m encoder.pt --method embed --input x.npy --input normalize=bool:true --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return r.run(c) },
	}
	f := c.Flags()
	f.StringVarP(&r.model, "model", "m", "", "TorchScript file or torchspeed artifact (.pt)")
	f.StringVarP(&r.config, "config", "c", "", "YAML config: model.path, model.method and model.inputs (flags override it)")
	r.args.addFlags(c)
	f.IntVar(&r.calls, "calls", 0, "calls to make (default: a sequence's length, else 1)")
	f.StringVar(&r.save, "save", "", "write the outputs to this .npz (keys output_0, output_1, ... or the model's dict keys; stacked per call for a sequence)")
	f.IntVar(&r.topk, "topk", 5, "how many of the largest values of each output row to print")
	f.IntVar(&r.threads, "threads", 0, "intra-op threads, 1 to the CPUs available (0: the artifact's, else libtorch's default)")
	f.BoolVar(&r.asJSON, "json", false, "print JSON")
	f.StringArrayVar(&r.opLibs, "op-library", nil, "shared library of custom operators the model calls, loaded before it (repeat; model.op_libraries)")
	return c
}

func (r *runCmd) run(c *cobra.Command) error {
	if r.config != "" {
		cfg, err := loadConfig("run", r.config, c.Flags(), nil, false)
		if err != nil {
			return err
		}
		if r.model == "" {
			r.model = cfg.Model.Path
		}
		r.args.fromConfig(cfg)
		r.reset = cfg.Model.ResetMethod
		if len(r.opLibs) == 0 {
			r.opLibs = cfg.Model.OpLibraries
		}
	}
	if r.model == "" {
		return exitcode.Usagef("run: --model is required")
	}
	if r.calls < 0 {
		return exitcode.Usagef("run: --calls %d: must be 1 or more", r.calls)
	}
	if err := config.CheckThreads("run: --threads", r.threads, "the artifact's, else libtorch's default"); err != nil {
		return exitcode.New(exitcode.Usage, err)
	}
	if err := safefile.CheckInputFile(r.model); err != nil {
		return exitcode.Usagef("run: model: %v", err)
	}
	if r.save != "" {
		read := append(named("the model", r.model), named("the config", r.config)...)
		if err := checkNotInput("run", named("--save", r.save), append(read, valueFiles(r.args.inputs, r.args.config)...)); err != nil {
			return err
		}
		if !strings.HasSuffix(r.save, ".npz") {
			return exitcode.Usagef("run: --save %q: give a .npz file", r.save)
		}
		if err := safefile.CheckWritableDir(filepath.Dir(r.save)); err != nil {
			return exitcode.Usagef("run: --save: %v", err)
		}
	}
	if err := torchspeed.LoadOpLibraries(r.opLibs); err != nil {
		return exitcode.New(exitcode.Usage, fmt.Errorf("run: --op-library (model.op_libraries): %w", err))
	}
	m, err := torchspeed.Load(r.model, torchspeed.LoadOptions{KeepThreads: true, Method: r.args.method, ResetMethod: r.reset})
	if errors.Is(err, torchspeed.ErrNoMethod) {
		return exitcode.New(exitcode.Usage, fmt.Errorf("run: --method or model.reset_method: %w", err))
	} else if err != nil {
		return err
	}
	defer m.Close()
	printLoadWarnings(c.ErrOrStderr(), "run", m)
	log := r.ui.logOrDiscard(c.ErrOrStderr())
	if err := r.setThreads(m, c.ErrOrStderr()); err != nil {
		return err
	}
	plan, err := r.args.plan("run", m, log)
	if err != nil {
		return err
	}
	defer plan.Close()
	calls := r.calls
	switch {
	case calls == 0:
		calls = max(plan.Calls(), 1)
	case plan.Calls() > 0 && calls > plan.Calls():
		return exitcode.Usagef("run: --calls %d: the sequences hold %d calls", calls, plan.Calls())
	}
	res, err := r.runCalls(m, plan, calls)
	if err != nil {
		return err
	}
	if r.save != "" {
		if err := res.save(r.save, plan.Calls() > 0 || calls > 1); err != nil {
			return fmt.Errorf("run: --save: %w", err)
		}
		fmt.Fprintf(log, "run: wrote %s (%d call(s))\n", r.save, calls)
		if len(res.text) > 0 {
			fmt.Fprintf(c.ErrOrStderr(), "run: note: .npz holds tensors only: the str output(s) %s are printed, not saved\n", textNames(res.text))
		}
	}
	return r.print(c.OutOrStdout(), m, plan.Method, calls, res)
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

func (r *runCmd) print(w io.Writer, m *torchspeed.Model, method string, calls int, res *callResults) error {
	ms := float64(res.first.Microseconds()) / 1000
	if r.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		outputs := make([]any, 0, len(res.last)+len(res.text))
		for _, o := range res.last {
			outputs = append(outputs, o)
		}
		for _, o := range res.text {
			outputs = append(outputs, o)
		}
		out := map[string]any{"model": r.model, "method": method, "calls": calls, "first_run_ms": ms,
			"stateful": m.Stateful(), "outputs": outputs}
		if m.Stateful() {
			out["state_attributes"], out["reset_method"] = m.StateAttributes(), m.ResetMethod()
		}
		return enc.Encode(out)
	}
	fmt.Fprintf(w, "%s: %d output(s), first run %.2f ms\n", r.model, len(res.last)+len(res.text), ms)
	if method != "forward" || calls > 1 {
		fmt.Fprintf(w, "  %s: %d call(s); outputs of the last call:\n", method, calls)
	}
	if m.Stateful() {
		reset := "no reset method: each run starts from the state it was saved with"
		if m.ResetMethod() != "" {
			reset = "reset with " + m.ResetMethod() + " before the first call"
		}
		fmt.Fprintf(w, "  stateful: yes (attributes %s); %s\n", strings.Join(m.StateAttributes(), ", "), reset)
	} else {
		fmt.Fprintln(w, "  stateful: no")
	}
	for _, o := range res.last {
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
	for _, o := range res.text {
		quoted := make([]string, len(o.Values))
		for i, v := range o.Values {
			quoted[i] = strconv.Quote(v)
		}
		if len(o.Shape) == 0 {
			fmt.Fprintf(w, "  %-8s str  %s\n", o.Name, strings.Join(quoted, ""))
			continue
		}
		fmt.Fprintf(w, "  %-8s str%v  [%s]\n", o.Name, o.Shape, strings.Join(quoted, ", "))
	}
	return nil
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
	lo, hi, sum, n := math.Inf(1), math.Inf(-1), 0.0, 0
	for _, v := range vals {
		f := float64(v)
		if f != f {
			ro.NaNs++
			continue
		}
		lo, hi = min(lo, f), max(hi, f)
		sum += f
		n++
	}
	if n == 0 {
		lo, hi = math.NaN(), math.NaN()
	}
	ro.Min, ro.Max, ro.Mean = jsonFloat(lo), jsonFloat(hi), jsonFloat(sum/float64(n))
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
			ro.TopK = append(ro.TopK, topItem{Index: i, Value: jsonFloat(row[i])})
		}
	}
	return ro, nil
}

func textNames(ts []textOutput) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

// printLoadWarnings prints what torchspeed.Load found wrong with an artifact (libtorch version
// drift, no digest, passes this shim cannot apply, another CPU) on stderr, even with --quiet:
// they change what the results mean. A plain TorchScript file's only warning is that it is one.
func printLoadWarnings(w io.Writer, cmd string, m *torchspeed.Model) {
	if m.Manifest == nil || m.Manifest.Format == 0 {
		return
	}
	for _, s := range m.Warnings {
		fmt.Fprintf(w, "%s: warning: %s\n", cmd, s)
	}
}
