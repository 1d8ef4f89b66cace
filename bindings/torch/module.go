package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
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

var zipMagic = []byte("PK\x03\x04")

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

// Load reads a TorchScript archive saved by torch.jit.save (traced or scripted) or by Save. It
// holds the engine lock (see LoadWithEngine) while libtorch reads the file.
func Load(path string) (*Module, error) {
	if err := checkShim(); err != nil {
		return nil, err
	}
	engineMu.Lock()
	defer engineMu.Unlock()
	return loadLocked(path)
}

func loadLocked(path string) (*Module, error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("load model %q: file not found: check the path", path)
	case err != nil:
		return nil, fmt.Errorf("load model %q: %w", path, err)
	case st.IsDir():
		return nil, fmt.Errorf("load model %q: is a directory, not a TorchScript file", path)
	case st.Size() == 0:
		return nil, fmt.Errorf("load model %q: file is empty (0 bytes): export the model with torch.jit.save", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load model %q: %w", path, err)
	}
	head := make([]byte, 4)
	_, _ = io.ReadFull(f, head)
	if !bytes.Equal(head, zipMagic) {
		f.Close()
		return nil, fmt.Errorf("load model %q: not a TorchScript archive (zip header missing): export the model with torch.jit.save (torch.save'd state_dicts and ONNX files are not TorchScript)", path)
	}
	err = checkArchive(f, st.Size(), path)
	f.Close()
	if err != nil {
		return nil, err
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var out *C.ts_module
	if err := statusErr(C.ts_module_load(cs, &out)); err != nil {
		return nil, explainLoadError(path, err)
	}
	return wrapModule(out, path), nil
}

// LoadWithEngine selects the quantized engine (when engine is not "") and loads path, holding
// the engine lock across both: an INT8 model's weights are packed while it loads, for the
// engine set at that moment, so another goroutine must not switch it in between.
func LoadWithEngine(path, engine string) (*Module, error) {
	if err := checkShim(); err != nil {
		return nil, err
	}
	engineMu.Lock()
	defer engineMu.Unlock()
	if engine != "" {
		if err := setQEngineLocked(engine); err != nil {
			return nil, fmt.Errorf("load model %q: made for quantized engine %s: %w", path, Clip(engine), err)
		}
	}
	return loadLocked(path)
}

// LoadBytes reads a TorchScript archive from memory. name labels it in messages.
func LoadBytes(b []byte, name string) (*Module, error) {
	if err := checkShim(); err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("load model %q: buffer is empty: export the model with torch.jit.save", name)
	}
	if !bytes.HasPrefix(b, zipMagic) {
		return nil, fmt.Errorf("load model %q: not a TorchScript archive (zip header missing): export the model with torch.jit.save", name)
	}
	if err := checkArchive(bytes.NewReader(b), int64(len(b)), name); err != nil {
		return nil, err
	}
	var out *C.ts_module
	err := statusErr(C.ts_module_load_bytes(unsafe.Pointer(&b[0]), C.size_t(len(b)), &out))
	runtime.KeepAlive(b)
	if err != nil {
		return nil, explainLoadError(name, err)
	}
	return wrapModule(out, name), nil
}

func explainLoadError(name string, err error) error {
	if errors.Is(err, Corrupt) {
		return fmt.Errorf("load model %q: truncated or corrupt archive: copy or export it again (%w)", name, err)
	}
	return fmt.Errorf("load model %q: %w", name, err)
}

// MaxFileFormatVersion is the newest TorchScript file format version (an archive's version
// record) this libtorch reads.
func MaxFileFormatVersion() int64 { return int64(C.ts_max_file_format_version()) }

func loadErr(name string, code Code, format string, args ...any) error {
	return &Error{Op: fmt.Sprintf("load model %q", name), Code: code, Msg: fmt.Sprintf(format, args...)}
}

// checkArchive reads an archive's zip directory and version record before libtorch sees it, so
// that the common failures get messages that say what to do: libtorch reports a newer format
// and a foreign zip alike as a missing record.
func checkArchive(r io.ReaderAt, size int64, name string) error {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return loadErr(name, Corrupt, "truncated or corrupt archive (%v): copy or export it again", err)
	}
	var version *zip.File
	hasData, hasCode := false, false
	for _, f := range zr.File {
		_, rec, ok := strings.Cut(f.Name, "/")
		if !ok {
			continue
		}
		switch {
		case rec == "version" || rec == ".data/version":
			if version == nil || rec == ".data/version" {
				version = f
			}
		case rec == "data.pkl":
			hasData = true
		case strings.HasPrefix(rec, "code/"):
			hasCode = true
		}
	}
	if version == nil || !hasData || !hasCode {
		return loadErr(name, Corrupt, "a zip archive but not a TorchScript module (no version, data.pkl or code/ records): export it with torch.jit.script/trace + torch.jit.save")
	}
	if version.UncompressedSize64 > 64 {
		return loadErr(name, Corrupt, "its version record is %d bytes, not a version number: copy or export it again", version.UncompressedSize64)
	}
	rc, err := version.Open()
	if err != nil {
		return loadErr(name, Corrupt, "cannot read its version record: %v", err)
	}
	raw, err := io.ReadAll(io.LimitReader(rc, 65))
	rc.Close()
	if err != nil {
		return loadErr(name, Corrupt, "cannot read its version record: %v: copy or export it again", err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return loadErr(name, Corrupt, "its version record %q is not a number: copy or export it again", Clip(string(raw)))
	}
	if maxv := MaxFileFormatVersion(); v > maxv {
		return loadErr(name, Unsupported, "written by a newer PyTorch (file format version %d; this libtorch %s reads up to %d): save it with an older PyTorch or run torchspeed with a newer libtorch", v, Version(), maxv)
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

// derive wraps a new module made from m by one of the shim's transforms.
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

// Clone returns a deep copy sharing no parameters.
func (m *Module) Clone() (*Module, error) {
	return m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status { return C.ts_module_clone(c, o) })
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

// Forward runs the module on the shared inference thread (see Do; NewThread for more).
func (m *Module) Forward(inputs ...*Tensor) ([]Output, error) {
	var (
		outs []Output
		err  error
	)
	Do(func() { outs, err = m.ForwardOnThisThread(inputs...) })
	return outs, err
}

// ForwardOnThisThread runs the module on the calling goroutine's OS thread. Call it only from a
// goroutine locked with runtime.LockOSThread, or each call may start another OpenMP pool.
func (m *Module) ForwardOnThisThread(inputs ...*Tensor) ([]Output, error) {
	return m.call("forward", inputs)
}

// RunMethod runs a method other than forward on the shared inference thread.
func (m *Module) RunMethod(method string, inputs ...*Tensor) ([]Output, error) {
	var (
		outs []Output
		err  error
	)
	Do(func() { outs, err = m.call(method, inputs) })
	return outs, err
}

// RunMethodOnThisThread is RunMethod on the calling goroutine's OS thread (see
// ForwardOnThisThread).
func (m *Module) RunMethodOnThisThread(method string, inputs ...*Tensor) ([]Output, error) {
	return m.call(method, inputs)
}

func (m *Module) call(method string, inputs []*Tensor) ([]Output, error) {
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
	if method == "forward" {
		st = C.ts_module_forward(m.c, arr, C.size_t(len(inputs)), &res)
	} else {
		cm := C.CString(method)
		defer C.free(unsafe.Pointer(cm))
		st = C.ts_module_run_method(m.c, cm, arr, C.size_t(len(inputs)), &res)
	}
	if err := statusErr(st); err != nil {
		return nil, fmt.Errorf("%s %q with inputs %s: %w", method, m.Name(), describeInputs(inputs), summarize(err))
	}
	defer C.ts_outputs_free(res)
	n := int(C.ts_outputs_size(res))
	outs := make([]Output, 0, n)
	for i := 0; i < n; i++ {
		var t *C.ts_tensor
		if err := statusErr(C.ts_outputs_get(res, C.size_t(i), &t)); err != nil {
			CloseOutputs(outs)
			return nil, err
		}
		outs = append(outs, Output{Name: C.GoString(C.ts_outputs_name(res, C.size_t(i))), Tensor: wrapTensor(t)})
	}
	return outs, nil
}

// cInputs borrows inputs for one C call: it holds each tensor's guard (so Close waits) and
// returns the C array of handles, pinned. release must run after the call.
func cInputs(inputs []*Tensor) (arr **C.ts_tensor, release func(), err error) {
	cin := make([]*C.ts_tensor, len(inputs))
	held := 0
	pin := &runtime.Pinner{}
	release = func() {
		pin.Unpin()
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
		pin.Pin(&cin[0])
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

// ExtraFiles returns the extra files the archive carried (extra/NAME), by name.
func (m *Module) ExtraFiles() (map[string][]byte, error) {
	names, err := m.stringOp(func(c *C.ts_module, p **C.char) *C.ts_status { return C.ts_module_extra_names(c, p) })
	if err != nil {
		return nil, err
	}
	if err := m.acquire(); err != nil {
		return nil, err
	}
	defer m.g.release()
	out := map[string][]byte{}
	for _, name := range strings.Split(names, "\n") {
		if name == "" {
			continue
		}
		cs := C.CString(name)
		var p *C.char
		var n C.size_t
		err := statusErr(C.ts_module_extra_file(m.c, cs, &p, &n))
		C.free(unsafe.Pointer(cs))
		if err != nil {
			return nil, err
		}
		out[name] = C.GoBytes(unsafe.Pointer(p), C.int(n))
		C.ts_free(unsafe.Pointer(p))
	}
	return out, nil
}

// Save writes the module with extra files (name -> contents) atomically: to a temporary file
// in the same folder, then renamed over path. A failed save leaves nothing behind.
func (m *Module) Save(path string, extra map[string][]byte) error {
	if err := m.acquire(); err != nil {
		return err
	}
	defer m.g.release()
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("save model %q: cannot write to folder %q: %w", path, dir, err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmpName)
		}
	}()
	names := make([]string, 0, len(extra))
	for k := range extra {
		names = append(names, k)
	}
	sort.Strings(names)
	cnames := make([]*C.char, len(names))
	ccont := make([]*C.char, len(names))
	lens := make([]C.size_t, len(names))
	for i, k := range names {
		cnames[i] = C.CString(k)
		ccont[i] = (*C.char)(C.CBytes(extra[k]))
		lens[i] = C.size_t(len(extra[k]))
	}
	defer func() {
		for i := range names {
			C.free(unsafe.Pointer(cnames[i]))
			C.free(unsafe.Pointer(ccont[i]))
		}
	}()
	pin := runtime.Pinner{}
	defer pin.Unpin()
	var pn, pc **C.char
	var pl *C.size_t
	if len(names) > 0 {
		pin.Pin(&cnames[0])
		pin.Pin(&ccont[0])
		pin.Pin(&lens[0])
		pn, pc, pl = &cnames[0], &ccont[0], &lens[0]
	}
	cpath := C.CString(tmpName)
	defer C.free(unsafe.Pointer(cpath))
	if err := statusErr(C.ts_module_save(m.c, cpath, pn, pc, pl, C.size_t(len(names)))); err != nil {
		return fmt.Errorf("save model %q: %w", path, err)
	}
	if err := syncFile(tmpName); err != nil {
		return fmt.Errorf("save model %q: %w", path, err)
	}
	// CreateTemp makes 0600 files; an artifact is as readable as any file the user writes.
	if err := os.Chmod(tmpName, 0o644); err != nil {
		return fmt.Errorf("save model %q: %w", path, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("save model %q: %w", path, err)
	}
	ok = true
	return nil
}

// syncFile flushes a written file so that a rename never exposes a half-written artifact, and
// catches a full disk that the writer did not report.
func syncFile(name string) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
