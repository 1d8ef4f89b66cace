package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unsafe"
)

// Call runs a method of the module (forward, reset_states, an exported method) with TorchScript
// values on the shared inference thread (see Do) and returns its result (None for a
// method returning nothing). Missing trailing arguments take the schema's defaults. Forward with
// tensors stays the fast path for tensor-only models.
//
// A module whose methods mutate attributes (State is not empty) must not run two calls at
// once: serialize them or give each stream its own Clone.
//
// While the process runs at one intra-op thread it runs on the caller's thread instead, one
// call at a time, as Forward does: the hand-off to the shared thread and back cost more than a
// small stateful model's call (docs/architecture.md).
func (m *Module) Call(method string, args ...*Value) (*Value, error) {
	if sharedSingle.Load() {
		defer yieldIfDue()()
		singleMu.Lock()
		defer singleMu.Unlock()
		return m.callKw(method, args, nil, true)
	}
	var (
		out *Value
		err error
	)
	Do(func() { out, err = m.CallOnThisThread(method, args...) })
	return out, err
}

// CallOneThread is Call on the calling goroutine's OS thread with a one-thread OpenMP team (see
// ForwardOneThread): any goroutine may call it, and calls on different goroutines run side by
// side, so a stateful module must not be called from two of them at once.
func (m *Module) CallOneThread(method string, args ...*Value) (*Value, error) {
	defer yieldIfDue()()
	return m.callKw(method, args, nil, true)
}

// CallOnThisThread is Call on the calling goroutine's OS thread. Call it only from a goroutine
// locked with runtime.LockOSThread, or each call may start another OpenMP pool.
func (m *Module) CallOnThisThread(method string, args ...*Value) (*Value, error) {
	return m.callKw(method, args, nil, false)
}

// CallNamed is Call with keyword arguments too (any argument by name, e.g. one after an
// argument left to its default).
func (m *Module) CallNamed(method string, args []*Value, kwargs map[string]*Value) (*Value, error) {
	var (
		out *Value
		err error
	)
	Do(func() { out, err = m.callKw(method, args, kwargs, false) })
	return out, err
}

// callKw runs method on this thread; single (positional arguments only) with a one-thread
// OpenMP team.
func (m *Module) callKw(method string, args []*Value, kwargs map[string]*Value, single bool) (*Value, error) {
	if err := m.acquire(); err != nil {
		return nil, err
	}
	defer m.g.release()
	arr, release, err := cValues(args, "argument")
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", method, m.name, err)
	}
	defer release()
	names := make([]string, 0, len(kwargs))
	for k := range kwargs {
		names = append(names, k)
	}
	sort.Strings(names)
	kvals := make([]*Value, len(names))
	cnames := make([]*C.char, len(names))
	for i, k := range names {
		kvals[i] = kwargs[k]
		cnames[i] = C.CString(k)
	}
	defer func() {
		for _, p := range cnames {
			C.free(unsafe.Pointer(p))
		}
	}()
	karr, krelease, err := cValues(kvals, "keyword argument")
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", method, m.name, err)
	}
	defer krelease()
	var knames **C.char
	if len(cnames) > 0 {
		knames = &cnames[0]
	}
	cm := C.CString(method)
	defer C.free(unsafe.Pointer(cm))
	var out *C.ts_value
	var st *C.ts_status
	switch {
	case len(names) == 0 && single:
		st = C.ts_module_call_single(m.c, cm, arr, C.size_t(len(args)), &out)
	case len(names) == 0:
		st = C.ts_module_call(m.c, cm, arr, C.size_t(len(args)), &out)
	default:
		st = C.ts_module_call_kw(m.c, cm, arr, C.size_t(len(args)), knames, karr, C.size_t(len(names)), &out)
	}
	if err := statusErr(st); err != nil {
		return nil, fmt.Errorf("%s %q with arguments %s: %w", method, m.name, describeValues(args, names, kvals), summarize(err))
	}
	return wrapValue(out), nil
}

func describeValues(args []*Value, names []string, kw []*Value) string {
	parts := make([]string, 0, len(args)+len(kw))
	for _, a := range args {
		parts = append(parts, a.String())
	}
	for i, k := range names {
		parts = append(parts, k+"="+kw[i].String())
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// Methods lists the module's own methods: forward and every exported one.
func (m *Module) Methods() ([]string, error) {
	s, err := m.stringOp(func(c *C.ts_module, p **C.char) *C.ts_status { return C.ts_module_methods(c, p) })
	if err != nil {
		return nil, fmt.Errorf("methods of %q: %w", m.Name(), err)
	}
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "\n"), nil
}

// TypeInfo is a TorchScript type: its spelling, a normalized kind (tensor, int, float, bool,
// str, none, optional, list, tuple, dict, number, other) and, for optional, list, tuple and
// dict, the contained types (a dict's key, then its value).
type TypeInfo struct {
	Type     string     `json:"type"`
	Kind     string     `json:"kind"`
	Elements []TypeInfo `json:"elements,omitempty"`
}

// Argument is one argument of a method's schema (self is left out).
type Argument struct {
	Name string `json:"name"`
	TypeInfo
	// HasDefault says whether the schema gives a default; Default is it as JSON (null for None;
	// a default with no JSON form, e.g. a tensor, is a JSON string describing it).
	HasDefault bool            `json:"has_default,omitempty"`
	Default    json.RawMessage `json:"default,omitempty"`
	KwargOnly  bool            `json:"kwarg_only,omitempty"`
}

// MethodSchema is a method's parsed schema.
type MethodSchema struct {
	Name      string     `json:"name"`
	Text      string     `json:"schema"` // as TorchScript prints it
	Arguments []Argument `json:"arguments"`
	Returns   []TypeInfo `json:"returns"`
}

// Required is the number of leading arguments without a default.
func (s *MethodSchema) Required() int {
	n := 0
	for _, a := range s.Arguments {
		if !a.HasDefault && !a.KwargOnly {
			n++
		}
	}
	return n
}

// Argument returns the named argument.
func (s *MethodSchema) Argument(name string) (Argument, bool) {
	for _, a := range s.Arguments {
		if a.Name == name {
			return a, true
		}
	}
	return Argument{}, false
}

// MethodSchema reads one method's schema.
func (m *Module) MethodSchema(method string) (*MethodSchema, error) {
	cm := C.CString(method)
	defer C.free(unsafe.Pointer(cm))
	s, err := m.stringOp(func(c *C.ts_module, p **C.char) *C.ts_status { return C.ts_module_method_schema(c, cm, p) })
	if err != nil {
		return nil, fmt.Errorf("schema of %q: %w", m.Name(), err)
	}
	var ms MethodSchema
	if err := json.Unmarshal([]byte(s), &ms); err != nil {
		return nil, fmt.Errorf("schema of %s in %q: %w", method, m.name, err)
	}
	return &ms, nil
}

// State lists the attributes (dotted paths from the module) that a call of method may assign:
// every prim::SetAttr reachable from it, through other methods and submodules. A non-empty list
// means the module keeps state between calls.
func (m *Module) State(method string) ([]string, error) {
	cm := C.CString(method)
	defer C.free(unsafe.Pointer(cm))
	s, err := m.stringOp(func(c *C.ts_module, p **C.char) *C.ts_status { return C.ts_module_state(c, cm, p) })
	if err != nil {
		return nil, fmt.Errorf("state of %q: %w", m.Name(), err)
	}
	var paths []string
	if err := json.Unmarshal([]byte(s), &paths); err != nil {
		return nil, fmt.Errorf("state of %s in %q: %w", method, m.name, err)
	}
	return paths, nil
}
