package torchspeed

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/torchspeed/torchspeed/bindings/torch"
)

// Models as their authors ship them take more than tensors (forward(x, sr: int)), keep state in
// attributes between calls (an RNN state, a context buffer) and export other methods. Two
// threads in one such module corrupt its state and, measured, the heap (SIGSEGV, double free),
// so a stateful Model serializes its own calls and hands each stream a Session with its own copy
// of the state: the attributes its method assigns, cloned, with the weights and code shared.
// Copying whole modules is not an option: libtorch's deepcopy matches tensors by storage, so it
// mangles weights that are views of one buffer (the flattened weights of an LSTM exported from
// a GPU, as in Silero VAD), and it would copy every weight per stream. Stateless models share
// one module and run concurrently.

// Reset method names tried, in order, when the manifest names none.
var defaultResetMethods = []string{"reset_states", "reset"}

// ErrNoMethod is wrapped by Load's error when the method or reset method named (by the
// manifest, or LoadOptions for a plain model) is not one of the module's.
var ErrNoMethod = errors.New("no such method")

// stateInfo is what Load learns about a model's state; it lives on Model.
type stateInfo struct {
	mu       sync.Mutex // serializes calls on the shared module of a stateful model
	method   string     // the method Predict and Run call
	attrs    []string   // attributes method assigns; empty: stateless
	reset    string     // the reset method, "" when the model has none
	pristine *torch.Module
}

// initState finds the method, the state it mutates and the reset method. Load calls it on the
// final module. A stateful model without a reset method keeps a pristine copy of its state, so
// a session can still start from the state the model was saved with.
func (m *Model) initState() error {
	man := m.Manifest
	st := &m.state
	st.method = "forward"
	if man != nil && man.Method != "" {
		st.method = man.Method
	}
	methods, err := m.m.Methods()
	if err != nil {
		return err
	}
	if !slices.Contains(methods, st.method) {
		return fmt.Errorf("model %q has no method %q (it has %s): %w", m.m.Name(), st.method, strings.Join(methods, ", "), ErrNoMethod)
	}
	if st.attrs, err = m.m.State(st.method); err != nil {
		return err
	}
	if man != nil && len(st.attrs) == 0 && man.Stateful {
		// Detection only sees prim::SetAttr; trust a manifest that measured more.
		st.attrs = man.StateAttributes
	}
	want := defaultResetMethods
	if man != nil && man.ResetMethod != "" {
		if !slices.Contains(methods, man.ResetMethod) {
			return fmt.Errorf("model %q: reset method %q is not among its methods (%s; freezing keeps it only when preserved): %w", m.m.Name(), man.ResetMethod, strings.Join(methods, ", "), ErrNoMethod)
		}
		want = []string{man.ResetMethod}
	}
	for _, r := range want {
		if slices.Contains(methods, r) {
			st.reset = r
			break
		}
	}
	if len(st.attrs) > 0 && st.reset == "" {
		if st.pristine, err = m.m.CloneState(st.attrs...); err != nil {
			return err
		}
	}
	return nil
}

// Stateful reports whether the model's method assigns attributes, i.e. keeps state between
// calls. Predict and Run on a stateful Model are serialized; use NewSession for streams.
func (m *Model) Stateful() bool { return m != nil && len(m.state.attrs) > 0 }

// StateAttributes are the attributes (dotted paths) the model's method assigns.
func (m *Model) StateAttributes() []string {
	if m == nil {
		return nil
	}
	return slices.Clone(m.state.attrs)
}

// ResetMethod is the method that resets the state ("" if the model has none).
func (m *Model) ResetMethod() string {
	if m == nil {
		return ""
	}
	return m.state.reset
}

// Method is the method Predict and Run call (forward unless the manifest names another).
func (m *Model) Method() string {
	if m == nil {
		return ""
	}
	return m.state.method
}

// ErrNoModel is returned by the methods of a nil or zero-value *Model, which Load did not make.
var ErrNoModel = errors.New("no model: use the *Model that Load returned")

// usable refuses a model Load did not make.
func (m *Model) usable() error {
	if m == nil || m.m == nil {
		return ErrNoModel
	}
	return nil
}

// lockIfStateful serializes calls on the shared module of a stateful model.
func (m *Model) lockIfStateful() func() {
	if !m.Stateful() {
		return func() {}
	}
	m.state.mu.Lock()
	return m.state.mu.Unlock
}

// Run calls the model's method (forward unless the manifest names another) with TorchScript
// values and returns its result. Safe from many goroutines; calls on a stateful model are
// serialized and share one state: give each stream a Session instead.
func (m *Model) Run(args ...*torch.Value) (*torch.Value, error) {
	if err := m.usable(); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	return m.RunMethod(m.state.method, args...)
}

// RunMethod calls any method of the model (e.g. an exported embed) with TorchScript values.
func (m *Model) RunMethod(method string, args ...*torch.Value) (*torch.Value, error) {
	if err := m.usable(); err != nil {
		return nil, fmt.Errorf("run %s: %w", method, err)
	}
	defer m.lockIfStateful()()
	return runOn(m, m.m, nil, method, args)
}

// Reset calls the reset method on the model's shared module (tests, and callers that run one
// stream on the shared model). A stateless model has nothing to reset.
func (m *Model) Reset() error {
	if err := m.usable(); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if !m.Stateful() {
		return nil
	}
	defer m.lockIfStateful()()
	if m.state.reset == "" {
		return fmt.Errorf("reset model %q: it keeps state (%s) but has no reset method: use NewSession for a fresh stream, or name one with reset_method", m.m.Name(), strings.Join(m.state.attrs, ", "))
	}
	out, err := runOn(m, m.m, nil, m.state.reset, nil)
	if err != nil {
		return fmt.Errorf("reset model %q: %w", m.m.Name(), err)
	}
	return out.Close()
}

// callerThread stands for the calling goroutine's thread (SessionOptions.CallerThread).
var callerThread = new(torch.Thread)

// oneThreadHere stands for the calling goroutine's thread at one intra-op thread
// (SessionOptions.OneThreadHere): forwards and other methods run there, with a one-thread team.
var oneThreadHere = new(torch.Thread)

// closeThread closes a session's own thread.
func closeThread(th *torch.Thread) {
	if th != callerThread && th != oneThreadHere {
		th.Close()
	}
}

// call runs method on mod on th (nil: the shared inference workers, or the caller's thread when
// the process runs at one intra-op thread, as Module.Call decides).
func call(mod *torch.Module, th *torch.Thread, method string, args []*torch.Value) (out *torch.Value, err error) {
	switch th {
	case nil:
		return mod.Call(method, args...)
	case oneThreadHere:
		return mod.CallOneThread(method, args...)
	case callerThread:
		return mod.CallOnThisThread(method, args...)
	}
	if derr := th.Do(func() { out, err = mod.CallOnThisThread(method, args...) }); derr != nil {
		return nil, derr
	}
	return out, err
}

// tensorCall runs method with tensors on th: forward through the fast tensor path, any other
// method through Call.
func tensorCall(mod *torch.Module, th *torch.Thread, method string, inputs []*torch.Tensor) (outs []torch.Output, err error) {
	if method == "forward" {
		// Forward hands the inputs to the thread in one C call, without a goroutine hand-off.
		switch th {
		case nil:
			return mod.Forward(inputs...)
		case callerThread:
			return mod.ForwardOnThisThread(inputs...)
		case oneThreadHere:
			return mod.ForwardOneThread(inputs...)
		}
		return th.Forward(mod, inputs...)
	}
	args := make([]*torch.Value, len(inputs))
	for i, t := range inputs {
		args[i] = torch.TensorValue(t)
	}
	defer torch.CloseValues(args...)
	res, err := call(mod, th, method, args)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	return res.Outputs()
}

// runOn calls method on mod (on th, or the shared workers when nil), converting top-level 4-D
// float tensors to channels-last when the artifact wants them, as Predict does.
func runOn(m *Model, mod *torch.Module, th *torch.Thread, method string, args []*torch.Value) (*torch.Value, error) {
	if m.Manifest == nil || !m.Manifest.ChannelsLast {
		return call(mod, th, method, args)
	}
	conv := make([]*torch.Value, len(args))
	var made []*torch.Value
	defer func() { torch.CloseValues(made...) }()
	for i, a := range args {
		conv[i] = a
		if a == nil || a.Kind() != torch.KindTensor {
			continue
		}
		t, err := a.ToTensor()
		if err != nil {
			return nil, fmt.Errorf("%s argument %d: %w", method, i, err)
		}
		cl, rel, err := ChannelsLastInputs([]*torch.Tensor{t})
		t.Close()
		if err != nil {
			return nil, err
		}
		conv[i] = torch.TensorValue(cl[0])
		rel()
		made = append(made, conv[i])
	}
	return call(mod, th, method, conv)
}

// typedPredict runs Predict's tensors through the typed path when the manifest declares
// arguments that are not tensors: tensors fill the tensor arguments in order, constants come
// from the manifest's values. ok is false when every argument is a plain tensor.
func (m *Model) typedPredict(mod *torch.Module, th *torch.Thread, inputs []*torch.Tensor) (outs []torch.Output, ok bool, err error) {
	if m.Manifest == nil || !hasTypedInputs(m.Manifest.Inputs) {
		return nil, false, nil
	}
	args := make([]*torch.Value, 0, len(m.Manifest.Inputs))
	defer func() { torch.CloseValues(args...) }()
	next := 0
	for _, spec := range m.Manifest.Inputs {
		if len(spec.Value) > 0 {
			v, err := ConstantValue(spec)
			if err != nil {
				return nil, true, err
			}
			args = append(args, v)
			continue
		}
		if next >= len(inputs) {
			return nil, true, fmt.Errorf("predict: the artifact takes tensors for %s, got %d tensor(s)", describeTensorSpecs(m.Manifest.Inputs), len(inputs))
		}
		args = append(args, torch.TensorValue(inputs[next]))
		next++
	}
	if next != len(inputs) {
		return nil, true, fmt.Errorf("predict: the artifact takes tensors for %s, got %d tensor(s)", describeTensorSpecs(m.Manifest.Inputs), len(inputs))
	}
	res, err := runOn(m, mod, th, m.state.method, args)
	if err != nil {
		return nil, true, err
	}
	defer res.Close()
	outs, err = res.Outputs()
	return outs, true, err
}

func hasTypedInputs(specs []InputSpec) bool {
	for _, s := range specs {
		if len(s.Value) > 0 || (s.Type != "" && s.Type != "Tensor") {
			return true
		}
	}
	return false
}

func describeTensorSpecs(specs []InputSpec) string {
	var names []string
	for _, s := range specs {
		if len(s.Value) == 0 {
			names = append(names, s.Name)
		}
	}
	return strings.Join(names, ", ")
}

// ConstantValue turns an argument spec's JSON value into a TorchScript value of its declared
// type: int, float, bool, str, None, or a list of those.
func ConstantValue(spec InputSpec) (*torch.Value, error) {
	v, err := constant(spec.Type, spec.Value)
	if err != nil {
		return nil, fmt.Errorf("argument %s: value %s is not a %s: %w", spec.Name, spec.Value, spec.Type, err)
	}
	return v, nil
}

func constant(typ string, raw json.RawMessage) (*torch.Value, error) {
	if string(raw) == "null" {
		return torch.NoneValue(), nil
	}
	if inner, ok := strings.CutPrefix(typ, "Optional["); ok {
		typ = strings.TrimSuffix(inner, "]")
	}
	var v *torch.Value
	switch typ {
	case "int":
		var i int64
		if err := json.Unmarshal(raw, &i); err != nil {
			return nil, err
		}
		v = torch.IntValue(i)
	case "float":
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, err
		}
		v = torch.FloatValue(f)
	case "bool":
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, err
		}
		v = torch.BoolValue(b)
	case "str":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		v = torch.StrValue(s)
	default:
		inner, ok := strings.CutPrefix(typ, "List[")
		if !ok {
			return nil, errors.New("constants are int, float, bool, str, None or lists of them")
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, err
		}
		vals := make([]*torch.Value, 0, len(items))
		defer func() { torch.CloseValues(vals...) }()
		for _, it := range items {
			iv, err := constant(strings.TrimSuffix(inner, "]"), it)
			if err != nil {
				return nil, err
			}
			vals = append(vals, iv)
		}
		v = torch.ListValue(vals...)
	}
	return v, v.Err()
}

// Session is one stream of calls on a model: for a stateful model it owns a copy of the module's
// state (sharing its weights), so sessions run concurrently without sharing state; for a stateless
// model it shares the model's module (no copy). Calls on one session are serialized. Sessions
// run on the shared inference thread (torch.Do), or on a thread of their own
// (SessionOptions.OwnThread) when streams must run side by side.
type Session struct {
	model  *Model
	mu     sync.Mutex
	mod    *torch.Module
	own    bool
	thread *torch.Thread
	closed bool
}

// SessionOptions adjust NewSession.
type SessionOptions struct {
	// OwnThread runs the session's calls on a locked OS thread of its own (with its own OpenMP
	// pool) rather than queueing on the shared inference workers.
	OwnThread bool
	// CallerThread runs the session's calls on the calling goroutine's OS thread, with no
	// hand-off: for callers that keep their goroutine locked to one thread (LockOSThread), as
	// bench's streams do, so that each stream uses its own thread's OpenMP pool. Ignored with
	// OwnThread.
	CallerThread bool
	// OneThreadHere runs the session's calls on the calling goroutine's OS thread with a
	// one-thread OpenMP team, whatever the process's count, with no hand-off and no pool: any
	// goroutine may call, locked or not (a server's request handlers). Methods other than
	// forward and calls with values other than tensors run there too. Ignored with OwnThread or
	// CallerThread.
	OneThreadHere bool
}

// NewSession starts a stream from a reset state.
func (m *Model) NewSession(opts ...SessionOptions) (*Session, error) {
	if err := m.usable(); err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	s := &Session{model: m, mod: m.m}
	switch {
	case len(opts) > 0 && opts[0].OwnThread:
		s.thread = torch.NewThread()
	case len(opts) > 0 && opts[0].CallerThread:
		s.thread = callerThread
	case len(opts) > 0 && opts[0].OneThreadHere:
		s.thread = oneThreadHere
	}
	if !m.Stateful() {
		return s, nil
	}
	src := m.state.pristine
	unlock := func() {}
	if src == nil {
		src = m.m
		unlock = m.lockIfStateful() // a clone reads the state another call may be writing
	}
	mod, err := src.CloneState(m.state.attrs...)
	unlock()
	if err != nil {
		closeThread(s.thread)
		return nil, fmt.Errorf("new session of %q: %w", m.m.Name(), err)
	}
	s.mod, s.own = mod, true
	if err := s.resetLocked(); err != nil {
		mod.Close()
		closeThread(s.thread)
		return nil, err
	}
	return s, nil
}

var errSessionClosed = errors.New("session is closed")

// ErrNoSession is returned by the methods of a nil or zero-value *Session, which NewSession did
// not make.
var ErrNoSession = errors.New("no session: use the *Session that Model.NewSession returned")

// lock takes the session's lock, refusing a session NewSession did not make.
func (s *Session) lock() error {
	if s == nil || s.model == nil || s.mod == nil {
		return ErrNoSession
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errSessionClosed
	}
	return nil
}

// Reset returns the session to a fresh stream: the model's reset method, or a new copy of the
// state it was loaded with when it has none.
func (s *Session) Reset() error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	return s.resetLocked()
}

func (s *Session) resetLocked() error {
	st := &s.model.state
	switch {
	case !s.own:
		return nil
	case st.reset != "":
		out, err := runOn(s.model, s.mod, s.thread, st.reset, nil)
		if err != nil {
			return fmt.Errorf("reset session of %q: %w", s.mod.Name(), err)
		}
		return out.Close()
	default:
		fresh, err := st.pristine.CloneState(st.attrs...)
		if err != nil {
			return fmt.Errorf("reset session of %q: %w", s.mod.Name(), err)
		}
		s.mod.Close()
		s.mod = fresh
		return nil
	}
}

// Run calls the model's method on this session's stream.
func (s *Session) Run(args ...*torch.Value) (*torch.Value, error) {
	if s == nil || s.model == nil {
		return nil, ErrNoSession
	}
	return s.RunMethod(s.model.state.method, args...)
}

// RunMethod calls any method on this session's module.
func (s *Session) RunMethod(method string, args ...*torch.Value) (*torch.Value, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return runOn(s.model, s.mod, s.thread, method, args)
}

// Predict is Model.Predict on this session's stream.
func (s *Session) Predict(inputs ...*torch.Tensor) ([]torch.Output, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return s.model.predictOn(s.mod, s.thread, inputs)
}

// Close frees the session's copy of the state. Idempotent.
func (s *Session) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	closeThread(s.thread)
	if s.own {
		return s.mod.Close()
	}
	return nil
}
