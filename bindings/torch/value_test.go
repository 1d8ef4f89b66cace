package torch_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/fixtures/streamref"
)

const streamTol = 1e-5

// replay runs a reference stream through m from a reset state and fails on the first call
// that differs from PyTorch by more than tol.
func replay(t *testing.T, m *torch.Module, r *streamref.Ref, tol float64) {
	t.Helper()
	if r.Stream.ResetMethod != "" {
		out, err := m.Call(r.Stream.ResetMethod)
		if err != nil {
			t.Fatalf("reset: %v", err)
		}
		out.Close()
	}
	worst := 0.0
	for i := 0; i < r.Calls(); i++ {
		out, err := m.Call(r.Stream.Method, r.Args(i)...)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		d, err := r.Diff(i, out)
		out.Close()
		if err != nil {
			t.Fatal(err)
		}
		if d > tol {
			t.Fatalf("%s.%s call %d: max abs diff %.3g from PyTorch > %.0g", r.Fixture.Name, r.Stream.Method, i, d, tol)
		}
		worst = max(worst, d)
	}
	t.Logf("%s.%s: %d calls, max abs diff %.3g", r.Fixture.Name, r.Stream.Method, r.Calls(), worst)
}

// Every typed fixture's every stream, through Call, equals PyTorch's from a reset state.
func TestCallStreamsMatchPyTorch(t *testing.T) {
	man := fixtures.Load(t)
	if len(man.Typed) < 3 {
		t.Fatalf("only %d typed fixtures in %s: rebuild with `make fixtures`", len(man.Typed), man.Dir)
	}
	for _, f := range man.Typed {
		for _, s := range f.Streams {
			t.Run(f.Name+"."+s.Method, func(t *testing.T) {
				m := loadFixture(t, f)
				replay(t, m, streamref.Load(t, f, s.Method), streamTol)
			})
		}
	}
}

// A stateful module run twice from a reset gives the same stream; without the reset it does
// not (so the state is real and the reset matters).
func TestStreamingStateAndReset(t *testing.T) {
	f := fixtures.Load(t).Get(t, "streaming")
	m := loadFixture(t, f)
	r := streamref.Load(t, f, "forward")
	replay(t, m, r, streamTol)
	replay(t, m, r, streamTol)
	out, err := m.Call("forward", r.Args(0)...) // state left by the last call of the stream
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if d, err := r.Diff(0, out); err != nil || d < 1e-4 {
		t.Fatalf("call 0 on a used state: diff %.3g (%v); want a real difference from the reset-state output", d, err)
	}
}

func TestMethodsSchemaAndState(t *testing.T) {
	man := fixtures.Load(t)
	for _, f := range man.Typed {
		t.Run(f.Name, func(t *testing.T) {
			m := loadFixture(t, f)
			methods, err := m.Methods()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(methods)
			if !slices.Equal(methods, f.Methods) {
				t.Errorf("methods %v, fixture says %v", methods, f.Methods)
			}
			state, err := m.State("forward")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(state, f.State) && !(len(state) == 0 && len(f.State) == 0) {
				t.Errorf("state of forward %v, fixture says %v", state, f.State)
			}
			for _, s := range f.Streams {
				sc, err := m.MethodSchema(s.Method)
				if err != nil {
					t.Fatal(err)
				}
				if len(sc.Arguments) != len(s.Args) {
					t.Fatalf("%s: schema has %d arguments, stream %d: %s", s.Method, len(sc.Arguments), len(s.Args), sc.Text)
				}
				for i, a := range s.Args {
					if sc.Arguments[i].Name != a.Name || sc.Arguments[i].Type != a.Type {
						t.Errorf("%s argument %d: schema %s %s, stream %s %s", s.Method, i, sc.Arguments[i].Name, sc.Arguments[i].Type, a.Name, a.Type)
					}
					if a.Default && !sc.Arguments[i].HasDefault {
						t.Errorf("%s argument %s: stream leaves it to its default, schema has none", s.Method, a.Name)
					}
				}
			}
		})
	}
}

func TestTypedArgsSchema(t *testing.T) {
	m := loadFixture(t, fixtures.Load(t).Get(t, "typed_args"))
	sc, err := m.MethodSchema("forward")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, typ, kind, def string }{
		{"x", "Tensor", "tensor", ""},
		{"mask", "Optional[Tensor]", "optional", ""},
		{"extras", "List[Tensor]", "list", ""},
		{"pair", "Tuple[Tensor, Tensor]", "tuple", ""},
		{"scale", "float", "float", ""},
		{"normalize", "bool", "bool", ""},
		{"pool", "str", "str", `"mean"`},
		{"top_k", "int", "int", "2"},
	}
	for i, w := range want {
		a := sc.Arguments[i]
		if a.Name != w.name || a.Type != w.typ || a.Kind != w.kind || string(a.Default) != w.def || a.HasDefault != (w.def != "") {
			t.Errorf("argument %d: %+v (default %s), want %+v", i, a, a.Default, w)
		}
	}
	if sc.Required() != 6 {
		t.Errorf("required %d, want 6", sc.Required())
	}
	if len(sc.Arguments[3].Elements) != 2 || sc.Arguments[3].Elements[1].Kind != "tensor" {
		t.Errorf("pair elements %+v", sc.Arguments[3].Elements)
	}
	if len(sc.Returns) != 1 || sc.Returns[0].Type != "Dict[str, Tensor]" || sc.Returns[0].Kind != "dict" {
		t.Errorf("returns %+v", sc.Returns)
	}
	if _, err := m.MethodSchema("nope"); err == nil || !strings.Contains(err.Error(), `no method "nope"`) {
		t.Errorf("schema of a missing method: %v", err)
	}
}

// Freezing with reset_states preserved keeps the method, the state and the stream; freezing
// without it loses the method (why ts_module_freeze takes the names).
func TestFrozenStreamingKeepsResetStates(t *testing.T) {
	f := fixtures.Load(t).Get(t, "streaming")
	m := loadFixture(t, f)
	r := streamref.Load(t, f, "forward")
	frozen, err := m.Freeze("reset_states")
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	methods, _ := frozen.Methods()
	if !slices.Contains(methods, "reset_states") {
		t.Fatalf("frozen with reset_states preserved has methods %v", methods)
	}
	if st, err := frozen.State("forward"); err != nil || len(st) == 0 {
		t.Fatalf("frozen state %v (%v): want the mutated attributes kept", st, err)
	}
	replay(t, frozen, r, streamTol)
	clone, err := frozen.Clone()
	if err != nil {
		t.Fatal(err)
	}
	defer clone.Close()
	replay(t, clone, r, streamTol)

	// optimize_for_inference freezes an unfrozen module without preserving anything, but keeps
	// the methods of one already frozen with them: the order optimize and Load must use.
	if mkldnnBroken == "" {
		opt, err := frozen.OptimizeForInference()
		if err != nil {
			t.Fatal(err)
		}
		defer opt.Close()
		if methods, _ := opt.Methods(); !slices.Contains(methods, "reset_states") {
			t.Fatalf("optimize_for_inference of the frozen module lost reset_states: %v", methods)
		}
		replay(t, opt, r, streamTol)
	}

	plain, err := m.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if methods, _ := plain.Methods(); slices.Contains(methods, "reset_states") {
		t.Logf("note: freeze kept reset_states without being asked (methods %v)", methods)
	}
}

// A clone has its own state: interleaving calls on the original and on a clone leaves each
// stream equal to PyTorch's.
func TestCloneHasOwnState(t *testing.T) {
	f := fixtures.Load(t).Get(t, "streaming")
	m := loadFixture(t, f)
	r := streamref.Load(t, f, "forward")
	c, err := m.Clone()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, mod := range []*torch.Module{m, c} {
		out, err := mod.Call("reset_states")
		if err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	for i := 0; i < r.Calls(); i++ {
		for k, mod := range []*torch.Module{m, c} {
			out, err := mod.Call("forward", r.Args(i)...)
			if err != nil {
				t.Fatal(err)
			}
			d, err := r.Diff(i, out)
			out.Close()
			if err != nil || d > streamTol {
				t.Fatalf("module %d call %d: diff %.3g (%v)", k, i, d, err)
			}
		}
	}
}

func TestCallBadArguments(t *testing.T) {
	f := fixtures.Load(t).Get(t, "streaming")
	m := loadFixture(t, f)
	r := streamref.Load(t, f, "forward")
	x := r.Args(0)[0]
	closed := torch.IntValue(1)
	closed.Close()
	tests := []struct {
		name   string
		method string
		args   []*torch.Value
		want   []string
	}{
		{"wrong scalar type", "forward", []*torch.Value{x, torch.FloatValue(16000)}, []string{"sr", "int", "float"}},
		{"tensor for int", "forward", []*torch.Value{x, x}, []string{"sr", "int", "Tensor"}},
		{"missing argument", "forward", []*torch.Value{x}, []string{"sr"}},
		{"too many", "forward", []*torch.Value{x, torch.IntValue(16000), torch.IntValue(1)}, []string{"forward"}},
		{"unknown method", "predict", []*torch.Value{x}, []string{`no method "predict"`, "forward", "reset_states"}},
		{"model ValueError rate", "forward", []*torch.Value{x, torch.IntValue(44100)}, []string{f.Errors[0].Message}},
		{"nil argument", "forward", []*torch.Value{x, nil}, []string{"argument 1 is nil"}},
		{"closed argument", "forward", []*torch.Value{x, closed}, []string{"argument 1", "closed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := m.Call(tc.method, tc.args...)
			if err == nil {
				out.Close()
				t.Fatalf("no error; want one containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	// The model's own message comes through first, not buried in the interpreter's traceback.
	_, err := m.Call("forward", x, torch.IntValue(44100))
	var te *torch.Error
	if !errors.As(err, &te) || !strings.HasPrefix(te.Msg, "builtins.ValueError: "+f.Errors[0].Message) {
		t.Errorf("ValueError: %#v; want Msg starting with the model's message %q", te, f.Errors[0].Message)
	}
}

func TestValues(t *testing.T) {
	check := func(v *torch.Value, kind torch.ValueKind, typ string) {
		t.Helper()
		if err := v.Err(); err != nil {
			t.Fatal(err)
		}
		if v.Kind() != kind {
			t.Errorf("%v: kind %v, want %v", v, v.Kind(), kind)
		}
		if got, err := v.Type(); err != nil || got != typ {
			t.Errorf("%v: type %q (%v), want %q", v, got, err, typ)
		}
	}
	i, f, b, s, n := torch.IntValue(-7), torch.FloatValue(0.25), torch.BoolValue(true), torch.StrValue("a\x00b"), torch.NoneValue()
	defer torch.CloseValues(i, f, b, s, n)
	check(i, torch.KindInt, "int")
	check(f, torch.KindFloat, "float")
	check(b, torch.KindBool, "bool")
	check(s, torch.KindStr, "str")
	check(n, torch.KindNone, "NoneType")
	if got, _ := i.ToInt(); got != -7 {
		t.Errorf("int %d", got)
	}
	if got, _ := f.ToFloat(); got != 0.25 {
		t.Errorf("float %g", got)
	}
	if got, _ := s.ToStr(); got != "a\x00b" {
		t.Errorf("str %q", got)
	}
	if _, err := s.ToInt(); err == nil || !strings.Contains(err.Error(), "str, not int") {
		t.Errorf("ToInt of a str: %v", err)
	}
	if _, err := i.ToFloat(); err == nil {
		t.Error("ToFloat of an int converted silently")
	}

	ints := torch.ListValue(i, torch.IntValue(3))
	mixed := torch.ListValue(i, s)
	empty := torch.ListValue()
	tup := torch.TupleValue(i, f, s)
	x, err := torch.NewTensor([]float32{1, 2, 3, 4}, []int64{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	xv := torch.TensorValue(x)
	d := torch.DictValue([]string{"z", "a"}, []*torch.Value{xv, xv})
	nested := torch.TupleValue(xv, d, i)
	defer torch.CloseValues(ints, mixed, empty, tup, xv, d, nested)
	check(ints, torch.KindList, "List[int]")
	check(mixed, torch.KindList, "List[Any]")
	check(tup, torch.KindTuple, "Tuple[int, float, str]")
	check(d, torch.KindDict, "Dict[str, Tensor]")
	if n, _ := empty.Len(); n != 0 {
		t.Errorf("empty list has %d items", n)
	}
	if k, _ := d.Key(0); k != "z" {
		t.Errorf("dict key 0 %q, want insertion order", k)
	}
	it, err := tup.Item(1)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := it.ToFloat(); got != 0.25 {
		t.Errorf("tuple item 1 = %v", it)
	}
	it.Close()
	if _, err := tup.Item(3); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("item 3 of 3: %v", err)
	}
	outs, err := nested.Outputs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range outs {
		names = append(names, o.Name)
	}
	torch.CloseOutputs(outs)
	if want := []string{"0", "1.z", "1.a", "2"}; !slices.Equal(names, want) {
		t.Errorf("flattened names %v, want %v", names, want)
	}
	if dup := torch.DictValue([]string{"a", "a"}, []*torch.Value{i, i}); dup.Err() == nil || !strings.Contains(dup.Err().Error(), "given twice") {
		t.Errorf("duplicate key: %v", dup.Err())
	}
	if bad := torch.ListValue(i, nil); bad.Err() == nil {
		t.Error("list with a nil item made")
	}
	i2 := torch.IntValue(1)
	i2.Close()
	i2.Close()
	if _, err := i2.ToInt(); !errors.Is(err, torch.ErrClosed) {
		t.Errorf("closed value: %v", err)
	}
}

// MethodSchema's JSON defaults decode as the schema's values.
func TestStreamingResetSchema(t *testing.T) {
	m := loadFixture(t, fixtures.Load(t).Get(t, "streaming"))
	sc, err := m.MethodSchema("reset_states")
	if err != nil {
		t.Fatal(err)
	}
	var def int
	if len(sc.Arguments) != 1 || json.Unmarshal(sc.Arguments[0].Default, &def) != nil || def != 1 {
		t.Fatalf("reset_states arguments %+v", sc.Arguments)
	}
	if len(sc.Returns) != 1 || sc.Returns[0].Kind != "none" {
		t.Errorf("reset_states returns %+v", sc.Returns)
	}
}

// No plain fixture keeps state: traced and scripted models in eval mode (scripted BatchNorm's
// training-only buffer update included, see two_methods) are not reported stateful.
func TestPlainFixturesStateless(t *testing.T) {
	for _, f := range fixtures.Load(t).Fixtures {
		t.Run(f.Name, func(t *testing.T) {
			m := loadFixture(t, f)
			st, err := m.State("forward")
			if err != nil {
				t.Fatal(err)
			}
			if len(st) != 0 {
				t.Errorf("state %v for a stateless model", st)
			}
		})
	}
}

func TestThread(t *testing.T) {
	th := torch.NewThread()
	ran := false
	if err := th.Do(func() { ran = true }); err != nil || !ran {
		t.Fatalf("Do: ran %v, %v", ran, err)
	}
	th.Close()
	th.Close()
	if err := th.Do(func() { t.Error("ran after Close") }); !errors.Is(err, torch.ErrThreadClosed) {
		t.Errorf("Do after Close: %v", err)
	}
	var none *torch.Thread
	none.Close()
}

// CloneState copies the state attributes and shares the weights: the copy of the
// Silero-shaped LSTM model (weights that are views of one buffer, which a deep copy mangles)
// runs its stream interleaved with the original's, each on its own state. A path that names
// no attribute is NotFound.
func TestCloneStateLSTMFlatWeights(t *testing.T) {
	f := fixtures.Load(t).Get(t, "vad_lstm")
	m := loadFixture(t, f)
	r := streamref.Load(t, f, "forward")
	state, err := m.State("forward")
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.CloneState(state...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, mod := range []*torch.Module{m, c} {
		out, err := mod.Call("reset_states")
		if err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	for i := 0; i < r.Calls(); i++ {
		for k, mod := range []*torch.Module{m, c} {
			out, err := mod.Call("forward", r.Args(i)...)
			if err != nil {
				t.Fatalf("module %d call %d: %v", k, i, err)
			}
			d, err := r.Diff(i, out)
			out.Close()
			if err != nil || d > streamTol {
				t.Fatalf("module %d call %d: diff %.3g (%v)", k, i, d, err)
			}
		}
	}
	for _, bad := range []string{"_nope", "lstm._h", "_h.x"} {
		if c, err := m.CloneState(bad); !errors.Is(err, torch.NotFound) || !strings.Contains(err.Error(), bad) {
			t.Errorf("CloneState(%q): %v, want NotFound naming it", bad, err)
			if c != nil {
				c.Close()
			}
		}
	}
}

// A method returning List[str] comes back as text from OutputsAndText; Outputs refuses it.
func TestOutputsAndTextStrList(t *testing.T) {
	f := fixtures.Load(t).Get(t, "classes")
	m := loadFixture(t, f)
	out, err := m.Call("get_classes")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := out.Outputs(); err == nil || !strings.Contains(err.Error(), "no tensor form") {
		t.Errorf("Outputs: %v, want no tensor form", err)
	}
	outs, text, err := out.OutputsAndText()
	if err != nil || len(outs) != 0 || len(text) != 1 || !text[0].List || !slices.Equal(text[0].Values, f.Classes) {
		t.Errorf("OutputsAndText: %v %+v %v, want one list %v", outs, text, err, f.Classes)
	}
	tup := torch.TupleValue(torch.StrValue("a"), torch.ListValue(torch.StrValue("b"), torch.StrValue("c")), torch.IntValue(3))
	defer tup.Close()
	outs, text, err = tup.OutputsAndText()
	defer torch.CloseOutputs(outs)
	if err != nil || len(outs) != 1 || outs[0].Name != "2" || len(text) != 2 || text[0].Name != "0" || text[0].List ||
		text[1].Name != "1" || !slices.Equal(text[1].Values, []string{"b", "c"}) {
		t.Errorf("tuple (str, List[str], int): %v %+v %v", outs, text, err)
	}
}

// LoadLibrary: a missing file is NotFound, a file that is not a library an invalid argument,
// and the custom_op fixture's model loads after its library.
func TestLoadLibrary(t *testing.T) {
	f := fixtures.Load(t).Get(t, "custom_op")
	for _, c := range []struct {
		path string
		code torch.Code
		want string
	}{
		{f.Path("libmissing.so"), torch.NotFound, "file not found"},
		{f.ModelPath(), torch.InvalidArgument, "not loadable as a shared library"},
	} {
		if err := torch.LoadLibrary(c.path); !errors.Is(err, c.code) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("LoadLibrary(%s): %v, want %v saying %q", c.path, err, c.code, c.want)
		}
	}
	if err := torch.LoadLibrary(""); err == nil {
		t.Error("LoadLibrary(\"\") worked")
	}
	if err := torch.LoadLibrary(f.Path(f.OpLibrary)); err != nil {
		t.Fatal(err)
	}
	m := loadFixture(t, f)
	replay(t, m, streamref.Load(t, f, "forward"), streamTol)
}

// CallOneThread runs on whichever goroutine calls it, side by side with other such calls: four
// goroutines, each replaying a real stateful model's stream (Silero VAD v5) on its own clone,
// every call equal to PyTorch's, with -race watching the Go side.
func TestCallOneThreadConcurrentStreams(t *testing.T) {
	f := fixtures.Load(t).Get(t, "silero_v5")
	m := loadFixture(t, f)
	s := f.Streams[0]
	r := streamref.Load(t, f, s.Method)
	const goroutines = 4
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		c, err := m.Clone()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer c.Close()
			errs <- replayOneThread(c, r)
		}()
	}
	for g := 0; g < goroutines; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func replayOneThread(m *torch.Module, r *streamref.Ref) error {
	if r.Stream.ResetMethod != "" {
		out, err := m.CallOneThread(r.Stream.ResetMethod)
		if err != nil {
			return err
		}
		out.Close()
	}
	return r.Replay(func(args ...*torch.Value) (*torch.Value, error) { return m.CallOneThread(r.Stream.Method, args...) }, streamTol)
}
