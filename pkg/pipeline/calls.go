package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/calib"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/tserr"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// Models as their authors ship them take more than tensors (forward(x, sr: int)), export other
// methods, and keep state in attributes between calls. The pipeline holds every candidate to
// the original call by call, so a stateful model is reset before every pass (each candidate
// check, each validation and calibration pass, each timing, the save), and both sides replay
// the same ordered inputs: an exact pass then compares exactly.

// resetMethods are the reset methods looked for, in order, when model.reset_method is empty.
var resetMethods = []string{"reset_states", "reset"}

// caller is how the pipeline calls the model: the configured method, with the call's tensors
// in the tensor arguments' places and the config's constants in the others.
type caller struct {
	method string
	// typed: an argument is not a plain tensor, or the method is not forward; calls then go
	// through Module.Call. Otherwise through the plain tensor path (Forward).
	typed bool
	slots []slot
	// tensors are the tensors of one call, in order (see tensorInputs).
	tensors []config.Input
	// state lists the attributes the method assigns (empty: stateless); reset restores them.
	state []string
	reset string
	// preserve are the methods freezing must keep (the reset method included).
	preserve []string
	// dropped are the public methods the artifact will lack because model.preserve_methods
	// leaves them out.
	dropped []string
}

// publicMethods are the methods other than forward whose names do not start with "_": the
// ones a model exports for its users (TorchScript's own __getstate__ and the like start with
// one).
func publicMethods(methods []string) []string {
	var out []string
	for _, m := range methods {
		if m != "forward" && !strings.HasPrefix(m, "_") {
			out = append(out, m)
		}
	}
	return out
}

// slot is one argument: a constant value, or the call's tensors at indexes idx (one for a
// tensor, several for the items of a List or Tuple).
type slot struct {
	kind  slotKind
	idx   []int
	value *torch.Value
}

type slotKind int

const (
	slotConst slotKind = iota
	slotTensor
	slotList
	slotTuple
)

// newCaller reads the method, its state and the reset method from the loaded original, and
// builds the constants. Its errors are usage errors naming the key to fix.
func newCaller(cfg *config.Config, m *torch.Module) (*caller, error) {
	k := &caller{method: cfg.Model.Method}
	if k.method == "" {
		k.method = "forward"
	}
	usage := func(format string, a ...any) error {
		return tserr.BadInput(fmt.Errorf("model %q: "+format, append([]any{cfg.Model.Path}, a...)...))
	}
	methods, err := m.Methods()
	if err != nil {
		return nil, err
	}
	if !slices.Contains(methods, k.method) {
		return nil, usage("has no method %q (model.method; it has %s)", k.method, strings.Join(methods, ", "))
	}
	for _, p := range cfg.Model.PreserveMethods {
		if !slices.Contains(methods, p) {
			return nil, usage("has no method %q to preserve (model.preserve_methods; it has %s)", p, strings.Join(methods, ", "))
		}
	}
	// The config passes its inputs by position (names are labels: configs written before
	// typed inputs named tensors freely): too many is an error, and so is a missing argument
	// without a default.
	if schema, err := m.MethodSchema(k.method); err == nil {
		args := schema.Arguments
		if n := len(cfg.Model.Inputs); n > len(args) {
			return nil, usage("%s takes %d argument(s) (%s), model.inputs lists %d: fix model.inputs", k.method, len(args), schema.Text, n)
		}
		for _, a := range args[len(cfg.Model.Inputs):] {
			if !a.HasDefault {
				return nil, usage("argument %s of %s has no default and is not in model.inputs (%s): add it (a tensor with shape and dtype or data, a constant with type and value)", a.Name, k.method, schema.Text)
			}
		}
	}
	k.typed = k.method != "forward"
	for _, in := range cfg.Model.Inputs {
		if in.IsTensor() {
			k.slots = append(k.slots, slot{kind: slotTensor, idx: []int{len(k.tensors)}})
			k.tensors = append(k.tensors, in)
			continue
		}
		k.typed = true
		if s, ok, err := k.tensorSlot(in); err != nil {
			return nil, usage("model.inputs %s: %v", in.Name, err)
		} else if ok {
			k.slots = append(k.slots, s)
			continue
		}
		raw, err := json.Marshal(in.Value)
		if err != nil {
			return nil, usage("model.inputs %s: value %v: %v", in.Name, in.Value, err)
		}
		v, err := torchspeed.ConstantValue(torchspeed.InputSpec{Name: in.Name, Type: in.Type, Value: raw})
		if err != nil {
			return nil, usage("model.inputs %s: %v", in.Name, err)
		}
		k.slots = append(k.slots, slot{kind: slotConst, value: v})
	}
	if k.state, err = m.State(k.method); err != nil {
		return nil, err
	}
	want := resetMethods
	if r := cfg.Model.ResetMethod; r != "" {
		if !slices.Contains(methods, r) {
			return nil, usage("has no method %q (model.reset_method; it has %s)", r, strings.Join(methods, ", "))
		}
		want = []string{r}
	}
	for _, r := range want {
		if slices.Contains(methods, r) {
			k.reset = r
			break
		}
	}
	if len(k.state) > 0 && k.reset == "" {
		return nil, usage("%s keeps state between calls (it assigns %s) and has no reset method (reset_states or reset): name the method that resets it with model.reset_method",
			k.method, strings.Join(k.state, ", "))
	}
	// Freezing keeps forward only; apps call the other methods a model exports (get_classes,
	// embed), so an artifact keeps every public one unless the config lists the ones to keep.
	if cfg.Model.PreserveMethods == nil {
		k.preserve = publicMethods(methods)
	} else {
		k.preserve = slices.Clone(cfg.Model.PreserveMethods)
		for _, p := range publicMethods(methods) {
			if !slices.Contains(k.preserve, p) && p != k.method && p != k.reset {
				k.dropped = append(k.dropped, p)
			}
		}
	}
	if k.method != "forward" && !slices.Contains(k.preserve, k.method) {
		k.preserve = append(k.preserve, k.method)
	}
	if k.reset != "" && !slices.Contains(k.preserve, k.reset) {
		k.preserve = append(k.preserve, k.reset)
	}
	return k, nil
}

// tensorSlot places an argument whose type holds tensors and that names data: an
// Optional[Tensor] (one file; without data it is None, a constant), a List[Tensor] or a Tuple of
// tensors (a comma-separated file per item, as --input takes them), whose items become the
// call's tensors NAME[0], NAME[1], ... ok is false for arguments that are constants.
func (k *caller) tensorSlot(in config.Input) (s slot, ok bool, err error) {
	if !strings.Contains(in.Type, "Tensor") || in.Data == "" {
		return slot{}, false, nil
	}
	if in.Value != nil {
		return slot{}, false, fmt.Errorf("a %s takes data, not a value", in.Type)
	}
	switch {
	case strings.HasPrefix(in.Type, "Optional[Tensor"):
		t := in
		t.Type = ""
		k.tensors = append(k.tensors, t)
		return slot{kind: slotTensor, idx: []int{len(k.tensors) - 1}}, true, nil
	case strings.HasPrefix(in.Type, "List[Tensor"), strings.HasPrefix(in.Type, "Tuple["):
		s.kind = slotList
		if strings.HasPrefix(in.Type, "Tuple[") {
			s.kind = slotTuple
		}
		src, err := config.ParseSource(in.Data)
		if err != nil {
			return slot{}, false, err
		}
		items := src.Items
		if src.Kind == config.SourceFile {
			items = []config.Source{src}
		}
		for i, item := range items {
			s.idx = append(s.idx, len(k.tensors))
			k.tensors = append(k.tensors, config.Input{Name: fmt.Sprintf("%s[%d]", in.Name, i), Data: item.String(), BatchDim: in.BatchDim})
		}
		return s, true, nil
	}
	return slot{}, false, fmt.Errorf("type %s: optimize passes tensors, Optional[Tensor], List[Tensor] and Tuple of tensors from data", in.Type)
}

func (k *caller) close() {
	for _, s := range k.slots {
		if s.value != nil {
			s.value.Close()
		}
	}
}

// stateful reports whether the method keeps state between calls.
func (k *caller) stateful() bool { return k != nil && len(k.state) > 0 }

// start resets a stateful model's state before a pass; stateless models have nothing to reset.
func (k *caller) start(m *torch.Module) error {
	if !k.stateful() {
		return nil
	}
	res, err := m.Call(k.reset)
	if err != nil {
		return fmt.Errorf("reset the model's state (%s): %w", k.reset, err)
	}
	return res.Close()
}

// call runs the method on m with one call's tensors, on the shared inference thread.
func (k *caller) call(m *torch.Module, tensors []*torch.Tensor) ([]torch.Output, error) {
	return k.callOn(m, tensors, false)
}

// callOn is call, on the calling goroutine's thread with a one-thread team when one is set
// (as Predict runs an artifact of one thread), else on the shared inference thread.
func (k *caller) callOn(m *torch.Module, tensors []*torch.Tensor, one bool) ([]torch.Output, error) {
	if k == nil || !k.typed {
		if one {
			return m.ForwardOneThread(tensors...)
		}
		return m.Forward(tensors...)
	}
	if len(tensors) != len(k.tensors) {
		return nil, fmt.Errorf("%s: %d tensor(s) for the call, the config gives %d", k.method, len(tensors), len(k.tensors))
	}
	args := make([]*torch.Value, len(k.slots))
	var made []*torch.Value
	defer func() { torch.CloseValues(made...) }()
	for i, s := range k.slots {
		if s.kind == slotConst {
			args[i] = s.value
			continue
		}
		items := make([]*torch.Value, len(s.idx))
		for j, x := range s.idx {
			items[j] = torch.TensorValue(tensors[x])
		}
		made = append(made, items...)
		switch s.kind {
		case slotTensor:
			args[i] = items[0]
			continue
		case slotList:
			args[i] = torch.ListValue(items...)
		case slotTuple:
			args[i] = torch.TupleValue(items...)
		}
		made = append(made, args[i])
	}
	call := m.Call
	if one {
		call = m.CallOneThread
	}
	res, err := call(k.method, args...)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	return res.Outputs()
}

// callBatches serves validation and calibration batches through the caller: typed
// arguments, the configured method, and a reset before every pass (validate.Runner).
type callBatches struct {
	validate.Batches
	k *caller
}

func (b callBatches) Start(m *torch.Module) error { return b.k.start(m) }

func (b callBatches) Run(m *torch.Module, batch validate.Batch) ([]torch.Output, error) {
	return b.k.call(m, batch.Inputs)
}

// batches wraps a data set for validate and quant: through the caller when the model is not
// called as forward(tensors) or keeps state; a sequence's batches (one call each) lose the
// leading axis the data set adds.
func (r *run) batches(ds *calib.Dataset, seq bool) validate.Batches {
	var b validate.Batches = validate.FromDataset(ds)
	if seq {
		b = seqBatches{ds}
	}
	if r.call.typed || r.call.stateful() {
		b = callBatches{Batches: b, k: r.call}
	}
	return b
}

// seqBatches serves a sequence data set one call per batch, each sample the input's whole
// shape.
type seqBatches struct{ d *calib.Dataset }

func (s seqBatches) Len() int { return s.d.NumBatches() }

func (s seqBatches) Batch(i int) (validate.Batch, error) {
	cb, err := s.d.Batch(i)
	if err != nil {
		return validate.Batch{}, err
	}
	b := validate.Batch{Owned: true}
	for k, a := range cb.Inputs {
		t, err := torch.NewTensorAny(a.Data, a.Shape[1:])
		if err != nil {
			b.Close()
			return validate.Batch{}, fmt.Errorf("call %d (from %s), input %d: %w", i, s.d.SampleName(cb.Start), k, err)
		}
		b.Inputs = append(b.Inputs, t)
	}
	return b, nil
}

// tensorInputs are the tensors of one call, in order: the tensor arguments, a present
// Optional[Tensor], the items of List and Tuple arguments (NAME[i]).
func (r *run) tensorInputs() []config.Input { return r.call.tensors }

// inputData reads the tensor inputs' data files (model.inputs[].data): per input, nil (random
// by shape), one array used on every call, or a sequence of calls (seq:, slice i along the
// first axis is call i). It returns the arrays and the number of calls in the sequence (0
// when no input has one).
func (r *run) inputData() (arrays []*npy.Array, seq []bool, calls int, err error) {
	for k, in := range r.tensorInputs() {
		if in.Data == "" {
			arrays, seq = append(arrays, nil), append(seq, false)
			continue
		}
		src, err := config.ParseSource(in.Data)
		if err == nil && src.Kind != config.SourceFile {
			err = fmt.Errorf("a tensor's data is a file (%s)", config.SourceSyntax)
		}
		var a *npy.Array
		if err == nil {
			a, err = readData(src)
		}
		isSeq := src.Seq
		if err != nil {
			return nil, nil, 0, tserr.BadInput(fmt.Errorf("model.inputs %s: data %q: %w", in.Name, in.Data, err))
		}
		shape := a.Shape
		if isSeq {
			if len(shape) == 0 || shape[0] == 0 {
				return nil, nil, 0, tserr.BadInput(fmt.Errorf("model.inputs %s: data %q holds %v: a sequence needs its calls along the first axis", in.Name, in.Data, a.Shape))
			}
			if calls > 0 && int(shape[0]) != calls {
				return nil, nil, 0, tserr.BadInput(fmt.Errorf("model.inputs %s: data %q holds %d calls, another input's sequence %d: give sequences of one length", in.Name, in.Data, shape[0], calls))
			}
			calls = int(shape[0])
			shape = shape[1:]
		}
		if len(in.Shape) > 0 && npy.ShapeString(shape) != npy.ShapeString(in.Shape) {
			what := "holds"
			if isSeq {
				what = "holds calls of"
			}
			return nil, nil, 0, tserr.BadInput(fmt.Errorf("model.inputs %s: data %q %s shape %v, the input's shape is %v: fix the data or model.inputs shape", in.Name, in.Data, what, shape, in.Shape))
		}
		if a.DType != in.DType && in.DType != "" {
			return nil, nil, 0, tserr.BadInput(fmt.Errorf("model.inputs %s: data %q holds %s, the input is %s: fix the data or model.inputs dtype", in.Name, in.Data, a.DType, in.DType))
		}
		// List and Tuple items (and an Optional given without them) take shape and dtype from
		// their data.
		if t := &r.call.tensors[k]; len(t.Shape) == 0 || t.DType == "" {
			t.Shape, t.DType = shape, a.DType
		}
		arrays, seq = append(arrays, a), append(seq, isSeq)
	}
	return arrays, seq, calls, nil
}

// readData reads a tensor's data file: a .npy, or FILE.npz:MEMBER.
func readData(src config.Source) (*npy.Array, error) {
	if !strings.HasSuffix(src.Path, ".npz") {
		return npy.ReadFile(src.Path)
	}
	arrs, names, err := npy.ReadNPZ(src.Path)
	if err != nil {
		return nil, err
	}
	a, ok := arrs[src.Member]
	if !ok {
		return nil, fmt.Errorf("no member %q (it has %s): name one as FILE.npz:MEMBER", src.Member, strings.Join(names, ", "))
	}
	return a, nil
}

// callOf is call i's array of one input: the whole array, or slice i of a sequence.
func callOf(a *npy.Array, seq bool, i int) *npy.Array {
	if !seq {
		return a
	}
	per := int(a.Numel() / a.Shape[0])
	out := &npy.Array{Shape: a.Shape[1:], DType: a.DType}
	switch d := a.Data.(type) {
	case []float32:
		out.Data = d[i*per : (i+1)*per]
	case []float64:
		out.Data = d[i*per : (i+1)*per]
	case []int64:
		out.Data = d[i*per : (i+1)*per]
	case []int32:
		out.Data = d[i*per : (i+1)*per]
	case []uint8:
		out.Data = d[i*per : (i+1)*per]
	case []bool:
		out.Data = d[i*per : (i+1)*per]
	default:
		out.Data = a.Data
	}
	return out
}

// streamBatches serves the checks (the configured input data's calls, in order) as
// validation batches, run through the caller.
func (r *run) streamBatches() validate.Batches {
	return callBatches{Batches: tensorSets(r.checks), k: r.call}
}

func (r *run) streamDesc() string {
	var files []string
	for _, in := range r.tensorInputs() {
		if in.Data != "" {
			files = append(files, in.Name+"="+in.Data)
		}
	}
	return fmt.Sprintf("%d calls of model.inputs data (%s), in order from a reset state", len(r.checks), strings.Join(files, ", "))
}

// tensorSets serves input sets the run owns as batches (not closed by their users).
type tensorSets [][]*torch.Tensor

func (s tensorSets) Len() int { return len(s) }

func (s tensorSets) Batch(i int) (validate.Batch, error) {
	if i < 0 || i >= len(s) {
		return validate.Batch{}, fmt.Errorf("call %d out of range (%d calls)", i, len(s))
	}
	return validate.Batch{Inputs: s[i]}, nil
}

// latency times models for the quantizer's fallback choice: the plain C++ loop for forward
// with tensors, else interleaved rounds through the caller (pkg/bench), each model from a
// reset state.
func (r *run) latency(warmup, rounds int) quant.LatencyFunc {
	if !r.call.typed && !r.call.stateful() {
		return quant.InterleavedLatency(r.inputs, warmup, rounds)
	}
	return func(ctx context.Context, models []*torch.Module) ([]time.Duration, error) {
		var targets []bench.Target
		for i, m := range models {
			c := &candidate{mod: m, call: r.call}
			if err := c.start(); err != nil {
				return nil, err
			}
			targets = append(targets, &target{ctx: ctx, name: fmt.Sprint("model ", i), c: c, inputs: r.inputs})
		}
		cmp, err := bench.Compare(targets, bench.CompareOptions{Options: bench.Options{Runs: rounds, Warmup: warmup}, Order: bench.Shuffled, Seed: r.cfg.Bench.Seed})
		if err != nil {
			return nil, err
		}
		out := make([]time.Duration, len(models))
		for i, res := range cmp.Results {
			out[i] = res.Stats.P50
		}
		return out, nil
	}
}
