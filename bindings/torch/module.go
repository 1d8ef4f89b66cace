package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

// Module is a TorchScript module. Its methods are safe to call from many goroutines; Close waits
// for calls in flight.
type Module struct {
	g    guard
	c    *C.ts_module
	name string // the file or label it was loaded from, for messages
	nin  int64  // forward's input count, not counting self
}

func wrapModule(c *C.ts_module, name string) *Module {
	m := &Module{c: c, name: name, nin: -1}
	var n C.int64_t
	// A module without forward (an observer-only or helper module) has no input count: the
	// status says so and is freed; nin stays -1.
	if statusErr(C.ts_module_num_inputs(c, &n)) == nil {
		m.nin = int64(n)
	}
	runtime.SetFinalizer(m, (*Module).Close)
	return m
}

// acquire takes the read side of m's guard; it refuses nil and zero-value modules.
func (m *Module) acquire() error {
	if m == nil {
		return ErrNilHandle
	}
	if err := m.g.acquire(); err != nil {
		return err
	}
	if m.c == nil {
		m.g.release()
		return ErrNilHandle
	}
	return nil
}

// acquireWrite takes the write side, for calls that change the module in place.
func (m *Module) acquireWrite() error {
	if m == nil {
		return ErrNilHandle
	}
	if err := m.g.acquireWrite(); err != nil {
		return err
	}
	if m.c == nil {
		m.g.releaseWrite()
		return ErrNilHandle
	}
	return nil
}

// Name is the path or label the module was loaded from.
func (m *Module) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

// SetName changes the label used in messages. Call it before sharing the module.
func (m *Module) SetName(name string) {
	if m != nil {
		m.name = name
	}
}

// Close frees the module. It is idempotent and waits for calls in flight.
func (m *Module) Close() error {
	if m == nil {
		return nil
	}
	m.g.close(func() {
		C.ts_module_free(m.c)
		m.c = nil
		runtime.SetFinalizer(m, nil)
	})
	return nil
}

// derive wraps a new module made from m by one of the shim's transforms. Off the inference
// threads the shim runs them with a one-thread OpenMP team (they leave no OpenMP pool on the
// caller's thread); on an inference thread (inside Do) they use its pool.
func (m *Module) derive(op func(*C.ts_module, **C.ts_module) *C.ts_status) (*Module, error) {
	if err := m.acquire(); err != nil {
		return nil, err
	}
	defer m.g.release()
	var out *C.ts_module
	if err := statusErr(op(m.c, &out)); err != nil {
		return nil, fmt.Errorf("model %q: %w", m.Name(), err)
	}
	return wrapModule(out, m.Name()), nil
}

// Clone returns a deep copy sharing no parameters. libtorch's deepcopy matches tensors by
// storage, so weights that are views of one buffer (an LSTM's flattened weights) come back
// wrong: CloneState copies a stream's state without that flaw.
func (m *Module) Clone() (*Module, error) {
	return m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status { return C.ts_module_clone(c, o) })
}

// CloneState returns a copy of the module that shares its weights and code with m and owns
// copies of the named attributes (dotted paths, as State lists them): a stream's own state.
// Unlike Clone it copies no weights, and it keeps weights that are views of one storage (an
// LSTM's flattened weights) intact, which a deep copy mangles.
func (m *Module) CloneState(attrs ...string) (*Module, error) {
	arr, release := cStrings(attrs)
	defer release()
	return m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_clone_state(c, arr, C.size_t(len(attrs)), o)
	})
}

// Eval switches the module (and its submodules) to inference mode, in place. It waits for
// calls in flight.
func (m *Module) Eval() error {
	if err := m.acquireWrite(); err != nil {
		return err
	}
	defer m.g.releaseWrite()
	return statusErr(C.ts_module_eval(m.c))
}

// Freeze returns torch::jit::freeze of the module (which must be in eval mode), keeping the
// named attributes (e.g. methods other than forward) as attributes.
func (m *Module) Freeze(preserved ...string) (*Module, error) {
	arr, release := cStrings(preserved)
	defer release()
	return m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_freeze(c, arr, C.size_t(len(preserved)), o)
	})
}

// cStrings copies names to C strings in a pinned array for one call; release frees them.
func cStrings(names []string) (arr **C.char, release func()) {
	cs := make([]*C.char, len(names))
	for i, p := range names {
		cs[i] = C.CString(p)
	}
	pin := &runtime.Pinner{}
	if len(cs) > 0 {
		pin.Pin(&cs[0])
		arr = &cs[0]
	}
	return arr, func() {
		pin.Unpin()
		for _, p := range cs {
			C.free(unsafe.Pointer(p))
		}
	}
}

// FoldConvBN folds BatchNorm into the preceding convolutions of an unfrozen module.
func (m *Module) FoldConvBN() (*Module, error) {
	return m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status { return C.ts_module_fold_conv_bn(c, o) })
}

// OptimizeForInference returns torch::jit::optimize_for_inference of the module: oneDNN
// fusions and weight prepacking. On libtorch 1.13 its result cannot be saved and loaded back;
// save the frozen module and re-apply this pass after loading.
func (m *Module) OptimizeForInference() (*Module, error) {
	return m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_optimize_for_inference(c, o)
	})
}

// ChannelsLast converts 4-D and 5-D parameters and buffers to channels-last in place and returns
// how many it changed. Do it before Freeze.
func (m *Module) ChannelsLast() (int, error) {
	if err := m.acquireWrite(); err != nil {
		return 0, err
	}
	defer m.g.releaseWrite()
	var n C.int64_t
	if err := statusErr(C.ts_module_channels_last(m.c, &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Define adds a TorchScript method to the module (torch::jit::Module::define). It waits for
// calls in flight.
func (m *Module) Define(source string) error {
	if err := m.acquireWrite(); err != nil {
		return err
	}
	defer m.g.releaseWrite()
	cs := C.CString(source)
	defer C.free(unsafe.Pointer(cs))
	return statusErr(C.ts_module_define(m.c, cs))
}

func (m *Module) stringOp(op func(*C.ts_module, **C.char) *C.ts_status) (string, error) {
	if err := m.acquire(); err != nil {
		return "", err
	}
	defer m.g.release()
	var p *C.char
	if err := statusErr(op(m.c, &p)); err != nil {
		return "", err
	}
	return takeString(p), nil
}

// Schema is forward's schema, e.g. "forward(__torch__.M self, Tensor x) -> Tensor".
func (m *Module) Schema() (string, error) {
	return m.stringOp(func(c *C.ts_module, p **C.char) *C.ts_status { return C.ts_module_schema(c, p) })
}

// NumInputs is the number of arguments forward takes, not counting self (-1 if unknown).
func (m *Module) NumInputs() int {
	if m == nil {
		return -1
	}
	return int(m.nin)
}

// Graph is forward's inlined graph as text.
func (m *Module) Graph() (string, error) {
	return m.stringOp(func(c *C.ts_module, p **C.char) *C.ts_status { return C.ts_module_graph(c, p) })
}

// NodeCounts counts forward's graph nodes by kind (e.g. "aten::conv2d"), sub-blocks included.
func (m *Module) NodeCounts() (map[string]int, error) {
	s, err := m.stringOp(func(c *C.ts_module, p **C.char) *C.ts_status { return C.ts_module_node_counts(c, p) })
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	if err := json.Unmarshal([]byte(s), &counts); err != nil {
		return nil, fmt.Errorf("node counts: %w", err)
	}
	return counts, nil
}

// Submodule is one entry of Submodules.
type Submodule struct {
	Path string // dotted path, e.g. "layer1.0.conv1"
	Type string // qualified type, e.g. "__torch__.torch.nn.modules.conv.Conv2d"
}

// Submodules lists every submodule, depth first.
func (m *Module) Submodules() ([]Submodule, error) {
	s, err := m.stringOp(func(c *C.ts_module, p **C.char) *C.ts_status { return C.ts_module_submodules(c, p) })
	if err != nil {
		return nil, err
	}
	var out []Submodule
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if path, typ, ok := strings.Cut(line, "\t"); ok {
			out = append(out, Submodule{Path: path, Type: typ})
		}
	}
	return out, nil
}
