package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

// OpWork is the multiply-add work one kind of ATen op did in a forward.
type OpWork struct {
	FLOPs float64 `json:"flops"`
	Calls int64   `json:"calls"`
}

// OpFLOPs runs forward once on an inference worker thread and counts the floating-point work
// of its matrix-shaped ops from their input shapes: every convolution (counted at
// aten::_convolution, which conv1d/2d/3d and transposed convs all reach) and every matrix product
// (mm, addmm, bmm, baddbmm, mv, dot, ..., which linear and matmul reach). A multiply-add counts
// as 2 FLOP. byOp is keyed by ATen op name. Quantized and prepacked ops are not counted: count
// the FP32 model, whose multiply-adds an INT8 version of it does as 8-bit operations.
func (m *Module) OpFLOPs(inputs ...*Tensor) (total float64, byOp map[string]float64, err error) {
	work, err := m.OpWork(inputs...)
	if err != nil {
		return 0, nil, err
	}
	byOp = make(map[string]float64, len(work))
	for op, w := range work {
		byOp[op] = w.FLOPs
		total += w.FLOPs
	}
	return total, byOp, nil
}

// OpWork is OpFLOPs with call counts, keyed by ATen op name.
func (m *Module) OpWork(inputs ...*Tensor) (map[string]OpWork, error) {
	var (
		js  string
		err error
	)
	Do(func() { js, err = m.opFLOPsJSON(inputs) })
	if err != nil {
		return nil, err
	}
	work := map[string]OpWork{}
	if err := json.Unmarshal([]byte(js), &work); err != nil {
		return nil, fmt.Errorf("count FLOPs of %q: shim returned malformed JSON: %w", m.Name(), err)
	}
	return work, nil
}

func (m *Module) opFLOPsJSON(inputs []*Tensor) (string, error) {
	if err := m.acquire(); err != nil {
		return "", err
	}
	defer m.g.release()
	if m.nin >= 0 && int64(len(inputs)) > m.nin {
		return "", fmt.Errorf("count FLOPs of %q: model takes %d input(s), got %d: check the inputs in your config", m.Name(), m.nin, len(inputs))
	}
	arr, release, err := cInputs(inputs)
	if err != nil {
		return "", fmt.Errorf("count FLOPs of %q: %w", m.Name(), err)
	}
	defer release()
	var p *C.char
	if err := statusErr(C.ts_module_op_flops(m.c, arr, C.size_t(len(inputs)), &p)); err != nil {
		return "", fmt.Errorf("count FLOPs of %q with inputs %s: %w", m.Name(), describeInputs(inputs), summarize(err))
	}
	return takeString(p), nil
}

// DefineOps is Define with the names saved TorchScript code uses: `ops.<namespace>.<op>` reaches
// any registered operator (ops.quantized.linear, ops.quantized.conv2d_unpack, ...), which
// Define's resolver cannot name; `torch.<op>` is an aten op. Dtypes are integer codes
// (torch.quint8 is 13, torch.qint8 12).
//
// It changes the module: it waits for calls in flight.
func (m *Module) DefineOps(source string) error {
	if err := m.acquireWrite(); err != nil {
		return err
	}
	defer m.g.releaseWrite()
	cs := C.CString(source)
	defer C.free(unsafe.Pointer(cs))
	return statusErr(C.ts_module_define_ops(m.c, cs))
}

// OpTime is one top-level dispatched op of a forward: its name (aten::conv2d,
// torchspeed::fast_linear, quantized::conv2d), its tensor inputs' shapes, the dotted path of the
// submodule whose code ran it ("layer1.0.conv1"; empty at the top level or when a graph rewrite
// lost it) and how long it took.
type OpTime struct {
	Op     string `json:"op"`
	NS     int64  `json:"ns"`
	Shapes string `json:"shapes"`
	Scope  string `json:"scope"`
}

// OpTiming is one profiled forward: its total time and its top-level ops in the order they
// ran. Ops that do not go through the dispatcher (list and tuple construction, constants) are
// not listed; their time is in TotalNS only.
type OpTiming struct {
	TotalNS int64    `json:"total_ns"`
	Ops     []OpTime `json:"ops"`
}

// OpProfile runs forward once on the inference worker thread and times each top-level op it
// dispatches (an op's callees are inside its time). Callbacks on every op make the forward
// slower than an unprofiled one: compare ops with each other, and models profiled alike.
func (m *Module) OpProfile(inputs ...*Tensor) (OpTiming, error) {
	var err error
	var t OpTiming
	Do(func() { t, err = m.OpProfileOnThisThread(inputs...) })
	return t, err
}

// OpProfileOnThisThread is OpProfile on the calling goroutine's OS thread: for a profiling loop
// that runs, as timing loops do, on one goroutine locked with runtime.LockOSThread.
func (m *Module) OpProfileOnThisThread(inputs ...*Tensor) (OpTiming, error) {
	js, err := m.opProfileJSON(inputs)
	if err != nil {
		return OpTiming{}, err
	}
	var t OpTiming
	if err := json.Unmarshal([]byte(js), &t); err != nil {
		return OpTiming{}, fmt.Errorf("profile ops of %q: shim returned malformed JSON: %w", m.Name(), err)
	}
	return t, nil
}

func (m *Module) opProfileJSON(inputs []*Tensor) (string, error) {
	if err := m.acquire(); err != nil {
		return "", err
	}
	defer m.g.release()
	if m.nin >= 0 && int64(len(inputs)) > m.nin {
		return "", fmt.Errorf("profile ops of %q: model takes %d input(s), got %d: check the inputs in your config", m.Name(), m.nin, len(inputs))
	}
	arr, release, err := cInputs(inputs)
	if err != nil {
		return "", fmt.Errorf("profile ops of %q: %w", m.Name(), err)
	}
	defer release()
	var p *C.char
	if err := statusErr(C.ts_module_op_profile(m.c, arr, C.size_t(len(inputs)), &p)); err != nil {
		return "", fmt.Errorf("profile ops of %q with inputs %s: %w", m.Name(), describeInputs(inputs), summarize(err))
	}
	return takeString(p), nil
}

// OpProfileBegin starts recording the ops dispatched on the calling goroutine's OS thread, for
// calls OpProfile cannot make: a method with typed arguments (Module.CallSingle, a session's
// RunMethod on its caller's thread), a stream's state carried between calls. Call it, the calls
// and OpProfileEnd on one goroutine locked with runtime.LockOSThread (inside Do, or a timing loop's
// thread). One profile at a time per thread.
func OpProfileBegin() error {
	return statusErr(C.ts_op_profile_begin())
}

// OpProfileEnd stops the profile OpProfileBegin started on this thread and returns it: the ops in
// the order they ran, TotalNS the time between the two calls.
func OpProfileEnd() (OpTiming, error) {
	var p *C.char
	if err := statusErr(C.ts_op_profile_end(&p)); err != nil {
		return OpTiming{}, fmt.Errorf("end op profile: %w", err)
	}
	var t OpTiming
	if err := json.Unmarshal([]byte(takeString(p)), &t); err != nil {
		return OpTiming{}, fmt.Errorf("end op profile: shim returned malformed JSON: %w", err)
	}
	return t, nil
}
