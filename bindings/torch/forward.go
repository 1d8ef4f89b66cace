package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"unsafe"
)

// Output is one tensor of a flattened forward result. Name is "0" for a single tensor, the
// index for tuple and list elements, the key for dict entries, joined by "." when nested.
type Output struct {
	Name   string
	Tensor *Tensor
}

// CloseOutputs closes every tensor of outs.
func CloseOutputs(outs []Output) {
	for _, o := range outs {
		o.Tensor.Close()
	}
}

// Forward runs the module on the shared inference thread (see Do; NewThread for more). While
// the process runs at one intra-op thread (SetNumThreads(1)), it runs the module on the calling
// goroutine's OS thread instead, one call at a time as the shared thread would: one thread needs
// no OpenMP pool to keep, and the hand-off to the shared thread and back cost more than the
// model itself on sub-millisecond models (docs/architecture.md). Either way the caller yields to
// Go's scheduler now and then (see yieldIfDue).
func (m *Module) Forward(inputs ...*Tensor) ([]Output, error) {
	if sharedSingle.Load() {
		defer yieldIfDue()()
		singleMu.Lock()
		defer singleMu.Unlock()
		return m.call("forward", inputs, nil, true)
	}
	return worker().Forward(m, inputs...)
}

// ForwardOnThisThread runs the module on the calling goroutine's OS thread. Call it only from a
// goroutine locked with runtime.LockOSThread, or each call may start another OpenMP pool.
func (m *Module) ForwardOnThisThread(inputs ...*Tensor) ([]Output, error) {
	return m.call("forward", inputs, nil, false)
}

// ForwardOneThread runs the module on the calling goroutine's OS thread with a one-thread
// OpenMP team, whatever that thread's own count: no pool is started or kept, so any goroutine
// may call it, locked to its thread or not, and calls on different goroutines run side by side
// (unlike Forward's, which the process takes one at a time). For a server at one intra-op
// thread, where handing a small model's forward to an inference thread and back cost more than
// the forward (docs/architecture.md).
func (m *Module) ForwardOneThread(inputs ...*Tensor) ([]Output, error) {
	defer yieldIfDue()()
	return m.call("forward", inputs, nil, true)
}

// RunMethod runs a method other than forward on the shared inference thread.
func (m *Module) RunMethod(method string, inputs ...*Tensor) ([]Output, error) {
	var (
		outs []Output
		err  error
	)
	Do(func() { outs, err = m.call(method, inputs, nil, false) })
	return outs, err
}

// RunMethodOnThisThread is RunMethod on the calling goroutine's OS thread (see
// ForwardOnThisThread).
func (m *Module) RunMethodOnThisThread(method string, inputs ...*Tensor) ([]Output, error) {
	return m.call(method, inputs, nil, false)
}

// call runs method with inputs on this thread, or (forward only) on the serving thread of w, or
// (forward only, single) on this thread with a one-thread OpenMP team.
func (m *Module) call(method string, inputs []*Tensor, w *C.ts_worker, single bool) ([]Output, error) {
	if err := m.acquire(); err != nil {
		return nil, err
	}
	defer m.g.release()
	if m.nin >= 0 && method == "forward" && int64(len(inputs)) > m.nin {
		return nil, fmt.Errorf("forward %q: model takes %d input(s), got %d: check the inputs in your config", m.Name(), m.nin, len(inputs))
	}
	arr, release, err := cInputs(inputs)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", method, m.Name(), err)
	}
	defer release()
	for i, t := range inputs {
		if C.ts_tensor_numel(t.c) == 0 && C.ts_tensor_ndim(t.c) > 0 {
			return nil, fmt.Errorf("forward %q: input %d has no elements (shape %v): give at least one sample", m.Name(), i, t.shapeLocked())
		}
	}
	var res *C.ts_outputs
	var st *C.ts_status
	switch {
	case method == "forward" && w != nil:
		st = C.ts_worker_forward(w, m.c, arr, C.size_t(len(inputs)), &res)
	case method == "forward" && single:
		st = C.ts_module_forward_single(m.c, arr, C.size_t(len(inputs)), &res)
	case method == "forward":
		st = C.ts_module_forward(m.c, arr, C.size_t(len(inputs)), &res)
	default:
		cm := C.CString(method)
		defer C.free(unsafe.Pointer(cm))
		st = C.ts_module_run_method(m.c, cm, arr, C.size_t(len(inputs)), &res)
	}
	if err := statusErr(st); err != nil {
		return nil, fmt.Errorf("%s %q with inputs %s: %w", method, m.Name(), describeInputs(inputs), summarize(err))
	}
	defer C.ts_outputs_free(res)
	return takeOutputs(res)
}

// takeOutputs wraps every tensor of res (which stays the caller's to free) in one C call.
func takeOutputs(res *C.ts_outputs) ([]Output, error) {
	n := int(C.ts_outputs_size(res))
	if n == 0 {
		return []Output{}, nil
	}
	hs := make([]*C.ts_tensor, n)
	names := make([]*C.char, n)
	if err := statusErr(C.ts_outputs_take_all(res, &hs[0], &names[0], C.size_t(n))); err != nil {
		return nil, err
	}
	outs := make([]Output, n)
	for i := range outs {
		outs[i] = Output{Name: outputName(names[i]), Tensor: wrapTensor(hs[i])}
	}
	return outs, nil
}

// outputName copies a C output name; a lone tensor's "0", the common case, costs no allocation.
func outputName(p *C.char) string {
	if b := (*[2]byte)(unsafe.Pointer(p)); b[0] == '0' && b[1] == 0 {
		return "0"
	}
	return C.GoString(p)
}

// cInputs borrows inputs for one C call: it holds each tensor's guard (so Close waits) and
// returns the C array of handles. release must run after the call. The array holds only C
// pointers, so cgo may pass it without pinning.
func cInputs(inputs []*Tensor) (arr **C.ts_tensor, release func(), err error) {
	cin := make([]*C.ts_tensor, len(inputs))
	held := 0
	release = func() {
		for _, t := range inputs[:held] {
			t.g.release()
		}
	}
	for i, t := range inputs {
		if t == nil {
			release()
			return nil, nil, fmt.Errorf("input %d is nil", i)
		}
		if err := t.acquire(); err != nil {
			release()
			return nil, nil, fmt.Errorf("input %d: %w", i, err)
		}
		held++
		cin[i] = t.c
	}
	if len(cin) > 0 {
		arr = &cin[0]
	}
	return arr, release, nil
}

// describeInputs runs while cInputs holds every input's guard: it reads them through the
// *Locked helpers, never through methods that take the guard again.
func describeInputs(inputs []*Tensor) string {
	parts := make([]string, len(inputs))
	for i, t := range inputs {
		parts[i] = t.stringLocked()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

var pyErrLine = regexp.MustCompile(`(?m)^[A-Za-z_.]*(Error|Exception): .*$`)

// summarize shortens a TorchScript interpreter error to the model's own message, keeping the
// whole text in Detail.
func summarize(err error) error {
	var te *Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "Traceback of TorchScript") {
		return err
	}
	locs := pyErrLine.FindAllStringIndex(te.Msg, -1)
	if len(locs) == 0 {
		return err
	}
	last := locs[len(locs)-1]
	return &Error{Op: te.Op, Code: te.Code, Msg: strings.TrimSpace(te.Msg[last[0]:]), Detail: te.Msg, Errno: te.Errno}
}

// TimeForward runs forward runs times in a plain C++ loop on an inference worker thread and
// returns each run's wall time in nanoseconds: the baseline for the bindings' overhead.
func (m *Module) TimeForward(runs int, inputs ...*Tensor) ([]int64, error) {
	if runs < 0 {
		return nil, fmt.Errorf("time forward: runs must be >= 0, got %d", runs)
	}
	ns := make([]int64, runs)
	var err error
	Do(func() {
		if err = m.acquire(); err != nil {
			return
		}
		defer m.g.release()
		arr, release, ierr := cInputs(inputs)
		if err = ierr; err != nil {
			return
		}
		defer release()
		pin := runtime.Pinner{}
		defer pin.Unpin()
		var nsp *C.int64_t
		if runs > 0 {
			pin.Pin(&ns[0])
			nsp = (*C.int64_t)(unsafe.Pointer(&ns[0]))
		}
		err = statusErr(C.ts_module_time_forward(m.c, arr, C.size_t(len(inputs)), C.int64_t(runs), nsp))
	})
	if err != nil {
		return nil, fmt.Errorf("time forward %q: %w", m.Name(), summarize(err))
	}
	return ns, nil
}
