package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/callargs"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// callResults are what run's calls gave: the last call's outputs summarized, the first call's
// time, and (for --save) every call's outputs by name.
type callResults struct {
	first time.Duration
	last  []runOutput
	text  []textOutput // the last call's str outputs (and lists of str)
	names []string     // in the order the first call gave them
	saved map[string]*npy.Array
	calls int
}

// runCalls makes calls calls of the plan's method on a session of m: a stateful model gets its
// own copy, reset first (its reset method, or the state it was saved with).
func (r *runCmd) runCalls(m *torchspeed.Model, plan *callargs.Plan, calls int) (*callResults, error) {
	s, err := m.NewSession()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res := &callResults{saved: map[string]*npy.Array{}}
	for i := 0; i < calls; i++ {
		start := time.Now()
		v, err := s.RunMethod(plan.Method, plan.Args(i)...)
		if i == 0 {
			res.first = time.Since(start)
		}
		if err != nil {
			if calls > 1 {
				return nil, fmt.Errorf("run: call %d of %d: %w", i+1, calls, err)
			}
			return nil, fmt.Errorf("run: %w", err)
		}
		outs, text, err := v.OutputsAndText()
		v.Close()
		if err != nil {
			return nil, fmt.Errorf("run: call %d: %w", i+1, err)
		}
		if i == calls-1 {
			for _, t := range text {
				res.text = append(res.text, newTextOutput(t))
			}
		}
		err = res.add(outs, i, i == calls-1, r.save != "", r.topk)
		torch.CloseOutputs(outs)
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

// add records one call's outputs: summaries for the last call, data when saving.
func (res *callResults) add(outs []torch.Output, call int, last, keep bool, topk int) error {
	if last {
		for _, o := range outs {
			ro, err := summarizeOutput(o, topk)
			if err != nil {
				return err
			}
			res.last = append(res.last, ro)
		}
	}
	if !keep {
		return nil
	}
	if call > 0 && len(outs) != len(res.names) {
		return fmt.Errorf("run: call %d gave %d outputs, the first gave %d: --save needs the same outputs on every call", call+1, len(outs), len(res.names))
	}
	for k, o := range outs {
		key := saveKey(o.Name)
		data, err := torch.DataAny(o.Tensor)
		if err != nil {
			return fmt.Errorf("run: output %s: %w", o.Name, err)
		}
		shape := o.Tensor.Shape()
		a := res.saved[key]
		if call == 0 {
			res.names = append(res.names, key)
			res.saved[key] = &npy.Array{Shape: shape, DType: o.Tensor.DType().String(), Data: data}
			continue
		}
		if a == nil || res.names[k] != key {
			return fmt.Errorf("run: call %d: output %s is not among the first call's (%s)", call+1, o.Name, strings.Join(res.names, ", "))
		}
		if npy.ShapeString(shape) != npy.ShapeString(a.Shape) {
			return fmt.Errorf("run: call %d: output %s has shape %v, the first call's %v: --save stacks outputs of one shape", call+1, o.Name, shape, a.Shape)
		}
		if a.Data, err = appendData(a.Data, data); err != nil {
			return fmt.Errorf("run: output %s: %w", o.Name, err)
		}
	}
	res.calls = call + 1
	return nil
}

// saveKey names an output in the .npz: the model's dict keys as they are, positions as
// output_0, output_1 (output_1_0 for nested ones).
func saveKey(name string) string {
	if strings.Trim(name, "0123456789.") == "" {
		return "output_" + strings.ReplaceAll(name, ".", "_")
	}
	return name
}

func appendData(acc, d any) (any, error) {
	switch a := acc.(type) {
	case []float32:
		return append(a, d.([]float32)...), nil
	case []float64:
		return append(a, d.([]float64)...), nil
	case []int64:
		return append(a, d.([]int64)...), nil
	case []int32:
		return append(a, d.([]int32)...), nil
	case []int16:
		return append(a, d.([]int16)...), nil
	case []int8:
		return append(a, d.([]int8)...), nil
	case []uint8:
		return append(a, d.([]uint8)...), nil
	case []bool:
		return append(a, d.([]bool)...), nil
	}
	return nil, fmt.Errorf("outputs of %T cannot be saved", acc)
}

// save writes the outputs to path (atomically), stacked along a new first dimension per call
// when stacked.
func (res *callResults) save(path string, stacked bool) error {
	arrays := make([]*npy.Array, len(res.names))
	for i, n := range res.names {
		a := *res.saved[n]
		if stacked {
			a.Shape = append([]int64{int64(res.calls)}, a.Shape...)
		}
		arrays[i] = &a
	}
	return safefile.Write(path, func(w io.Writer) error { return npy.EncodeNPZ(w, res.names, arrays) })
}

// textOutput is a str output, or a list of str, as run prints it: dtype "str", the list's
// length as its shape ([] for a lone str).
type textOutput struct {
	Name   string   `json:"name"`
	Shape  []int64  `json:"shape"`
	DType  string   `json:"dtype"`
	Values []string `json:"values"`
}

func newTextOutput(t torch.TextOutput) textOutput {
	o := textOutput{Name: t.Name, Shape: []int64{}, DType: "str", Values: t.Values}
	if t.List {
		o.Shape = []int64{int64(len(t.Values))}
	}
	if o.Values == nil {
		o.Values = []string{}
	}
	return o
}
