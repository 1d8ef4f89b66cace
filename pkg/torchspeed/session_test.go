package torchspeed

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/fixtures/streamref"
	"github.com/torchspeed/torchspeed/pkg/version"
)

const streamTol = 1e-5

// runStream replays the reference through run from whatever state it is in and returns the
// first mismatch.
func runStream(r *streamref.Ref, run func(args ...*torch.Value) (*torch.Value, error)) error {
	return r.Replay(run, streamTol)
}

func loadPlain(t *testing.T, name string) (*Model, fixtures.Fixture) {
	t.Helper()
	f := fixtures.Load(t).Get(t, name)
	m, err := Load(f.ModelPath(), LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, f
}

func TestStateDetection(t *testing.T) {
	for _, name := range []string{"streaming", "typed_args", "two_methods"} {
		t.Run(name, func(t *testing.T) {
			m, f := loadPlain(t, name)
			if m.Stateful() != (len(f.State) > 0) || !slices.Equal(m.StateAttributes(), f.State) && len(f.State) > 0 {
				t.Errorf("stateful %v %v, fixture says %v", m.Stateful(), m.StateAttributes(), f.State)
			}
			if m.ResetMethod() != f.ResetMethod {
				t.Errorf("reset method %q, fixture says %q", m.ResetMethod(), f.ResetMethod)
			}
		})
	}
}

// streamRepeats is how many times the concurrent-sessions test runs its 16 streams
// (TORCHSPEED_STREAM_REPEATS overrides the default 20).
func streamRepeats(t *testing.T) int {
	if s := os.Getenv("TORCHSPEED_STREAM_REPEATS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TORCHSPEED_STREAM_REPEATS=%q: want a positive integer", s)
		}
		return n
	}
	return 20
}

// 16 goroutines, each with its own Session on the stateful fixture, each stream equal to
// PyTorch's serial reference; repeated. Every other session runs on a thread of its own, so
// sessions really run at once; the rest queue on the shared inference thread.
func TestConcurrentSessionsStreaming(t *testing.T) {
	m, f := loadPlain(t, "streaming")
	r := streamref.Load(t, f, "forward")
	const streams = 16
	repeats := streamRepeats(t)
	for rep := 0; rep < repeats; rep++ {
		var wg sync.WaitGroup
		errs := make([]error, streams)
		for g := 0; g < streams; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The shared workers, a thread of the session's own, the caller's locked
				// thread (bench's streams), or forwards on any caller's thread (serve's).
				opts := SessionOptions{OwnThread: g%4 == 1, CallerThread: g%4 == 2, OneThreadHere: g%4 == 3}
				if opts.CallerThread {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
				}
				s, err := m.NewSession(opts)
				if err != nil {
					errs[g] = err
					return
				}
				defer s.Close()
				errs[g] = runStream(r, s.Run)
			}()
		}
		wg.Wait()
		for g, err := range errs {
			if err != nil {
				t.Fatalf("repeat %d, stream %d: %v", rep, g, err)
			}
		}
	}
	t.Logf("%d repeats x %d concurrent sessions x %d calls: every stream equal to PyTorch's within %.0g", repeats, streams, r.Calls(), streamTol)
}

// Sessions reset: a second pass on one session after Reset repeats the stream; a session
// made while another stream is midway starts fresh.
func TestSessionReset(t *testing.T) {
	m, f := loadPlain(t, "streaming")
	r := streamref.Load(t, f, "forward")
	a, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	out, err := a.Run(r.Args(0)...)
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	b, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := runStream(r, b.Run); err != nil {
		t.Fatalf("fresh session: %v", err)
	}
	if err := a.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := runStream(r, a.Run); err != nil {
		t.Fatalf("after Reset: %v", err)
	}
	a.Close()
	if _, err := a.Run(r.Args(0)...); err == nil {
		t.Error("Run on a closed session worked")
	}
}

// Run on a shared stateful model from many goroutines is serialized: no crash, no error, and a
// single stream afterwards from Reset is still exact.
func TestStatefulModelSerializesCalls(t *testing.T) {
	m, f := loadPlain(t, "streaming")
	r := streamref.Load(t, f, "forward")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				out, err := m.Run(r.Args(i)...)
				if err != nil {
					errs <- err
					return
				}
				out.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := m.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := runStream(r, m.Run); err != nil {
		t.Fatal(err)
	}
}

// Stateless models share one module: a session makes no copy, and typed and multi-method
// streams run through Model and Session alike.
func TestStatelessSessionsShare(t *testing.T) {
	m, f := loadPlain(t, "typed_args")
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.own || s.mod != m.m {
		t.Error("a session of a stateless model copied the module")
	}
	if err := runStream(streamref.Load(t, f, "forward"), s.Run); err != nil {
		t.Fatal(err)
	}
	m2, f2 := loadPlain(t, "two_methods")
	r := streamref.Load(t, f2, "embed")
	if err := runStream(r, func(a ...*torch.Value) (*torch.Value, error) { return m2.RunMethod("embed", a...) }); err != nil {
		t.Fatal(err)
	}
}

// The stateful fixture frozen with reset_states preserved, saved as an artifact from a reset
// state with a manifest naming the reset method, the freeze load pass and sr as a constant:
// a fresh load gives PyTorch's stream through sessions, and Predict passes sr itself.
func TestStatefulArtifactRoundTrip(t *testing.T) {
	f := fixtures.Load(t).Get(t, "streaming")
	r := streamref.Load(t, f, "forward")
	orig, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if err := orig.Eval(); err != nil {
		t.Fatal(err)
	}
	frozen, err := orig.Freeze("reset_states")
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	// Dirty the state, then reset before saving, as optimize must.
	out, err := frozen.Call("forward", r.Args(0)...)
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	if out, err = frozen.Call("reset_states"); err != nil {
		t.Fatal(err)
	}
	out.Close()
	man := &Manifest{Format: version.ManifestFormat, Torchspeed: "test", Libtorch: torch.Version(), Precision: "fp32",
		LoadPasses: []string{PassFreeze}, Stateful: true, StateAttributes: f.State, ResetMethod: "reset_states",
		Inputs: []InputSpec{{Name: "x", Shape: []int64{1, 256}, DType: "float32", Type: "Tensor"},
			{Name: "sr", Type: "int", Value: json.RawMessage("16000"), BatchDim: new(-1)}}}
	raw, err := man.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "streaming.torchspeed.pt")
	if err := frozen.Save(p, map[string][]byte{ManifestFile: raw}); err != nil {
		t.Fatal(err)
	}
	m, err := Load(p, LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Stateful() || m.ResetMethod() != "reset_states" {
		t.Fatalf("loaded artifact: stateful %v, reset %q", m.Stateful(), m.ResetMethod())
	}
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := runStream(r, s.Run); err != nil {
		t.Fatalf("session on the reloaded artifact: %v", err)
	}
	// Predict with the tensor alone: sr comes from the manifest.
	x, err := r.Args(0)[0].ToTensor()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	outs, err := s.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(outs)
	single := torch.TensorValue(outs[0].Tensor)
	defer single.Close()
	if d, err := r.Diff(0, single); err != nil || d > streamTol {
		t.Fatalf("Predict with the constant sr: diff %.3g (%v)", d, err)
	}
	if _, err := s.Predict(x, x); err == nil {
		t.Error("Predict with an extra tensor worked")
	}
}

func TestConstantValue(t *testing.T) {
	tests := []struct {
		typ, raw string
		want     string // Value.String(), or "error"
	}{
		{"int", "16000", "int 16000"},
		{"float", "0.5", "float 0.5"},
		{"bool", "true", "bool true"},
		{"str", `"max"`, `str "max"`},
		{"Optional[int]", "null", "None"},
		{"Optional[int]", "3", "int 3"},
		{"List[int]", "[1, 2]", "List[int]"},
		{"int", `"x"`, "error"},
		{"Tensor", "1", "error"},
	}
	for _, tc := range tests {
		v, err := ConstantValue(InputSpec{Name: "a", Type: tc.typ, Value: json.RawMessage(tc.raw)})
		if tc.want == "error" {
			if err == nil {
				v.Close()
				t.Errorf("%s %s: no error", tc.typ, tc.raw)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %s: %v", tc.typ, tc.raw, err)
			continue
		}
		if got := v.String(); got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.typ, tc.raw, got, tc.want)
		}
		v.Close()
	}
}

// A model shaped like Silero VAD v4: an nn.LSTM whose weights are views of one flat buffer and
// whose (h, c) live in attributes. A deep copy of it fails ("The expanded size of the tensor
// (256) must match ..."); sessions copy only the state, so every concurrent stream, and the
// shared model itself, reproduces PyTorch's single-copy stream.
func TestSessionsLSTMFlatWeights(t *testing.T) {
	m, f := loadPlain(t, "vad_lstm")
	if !slices.Equal(m.StateAttributes(), f.State) || m.ResetMethod() != f.ResetMethod {
		t.Fatalf("state %v reset %q, fixture says %v %q", m.StateAttributes(), m.ResetMethod(), f.State, f.ResetMethod)
	}
	r := streamref.Load(t, f, "forward")
	const streams = 3
	errs := make([]error, streams)
	var wg sync.WaitGroup
	for g := 0; g < streams; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := SessionOptions{CallerThread: g == 1, OwnThread: g == 2}
			if opts.CallerThread {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			s, err := m.NewSession(opts)
			if err != nil {
				errs[g] = err
				return
			}
			defer s.Close()
			if errs[g] = runStream(r, s.Run); errs[g] != nil {
				return
			}
			// A second pass after Reset repeats the stream: the session owns its state.
			if errs[g] = s.Reset(); errs[g] == nil {
				errs[g] = runStream(r, s.Run)
			}
		}()
	}
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			t.Errorf("session %d: %v", g, err)
		}
	}
	// The sessions left the shared module's state alone.
	if err := m.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := runStream(r, m.Run); err != nil {
		t.Errorf("shared model: %v", err)
	}
}
