package benchrun

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/fixtures/streamref"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/tserr"
	"github.com/torchspeed/torchspeed/pkg/version"
)

func TestMain(m *testing.M) {
	if err := torch.SetNumThreads(1); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// data copies a tensor's elements, failing the test on error.
func data(t *testing.T, x *torch.Tensor) any {
	t.Helper()
	d, err := torch.DataAny(x)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestMakeInputs(t *testing.T) {
	specs := []InputSpec{
		{Shape: []int64{2, 3}, DType: torch.Float32},
		{Shape: []int64{4}, DType: torch.Int64},
		{Shape: []int64{2, 2}, DType: torch.Int32},
		{Shape: []int64{5}, DType: torch.Bool},
		{Shape: []int64{3}, DType: torch.Float64},
		{Shape: []int64{6}, DType: torch.Uint8},
	}
	gen := func(batch int, seed uint64) []*torch.Tensor {
		t.Helper()
		ts, err := MakeInputs(specs, batch, seed)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { CloseTensors(ts) })
		return ts
	}
	a, same, other := gen(0, 1), gen(0, 1), gen(0, 2)
	if len(a) != len(specs) {
		t.Fatalf("%d inputs for %d specs", len(a), len(specs))
	}
	for i, s := range specs {
		if got := a[i].Shape(); !reflect.DeepEqual(got, s.Shape) || a[i].DType() != s.DType {
			t.Errorf("input %d: %s%v, want %s%v", i, a[i].DType(), got, s.DType, s.Shape)
		}
		if !reflect.DeepEqual(data(t, a[i]), data(t, same[i])) {
			t.Errorf("input %d differs between two calls with seed 1", i)
		}
	}
	if reflect.DeepEqual(data(t, a[0]), data(t, other[0])) {
		t.Error("seeds 1 and 2 gave the same float input")
	}
	for _, v := range data(t, a[1]).([]int64) {
		if v < 0 || v >= 100 {
			t.Errorf("int64 token id %d outside [0, 100)", v)
		}
	}
	for _, v := range data(t, a[2]).([]int32) {
		if v < 0 || v >= 100 {
			t.Errorf("int32 token id %d outside [0, 100)", v)
		}
	}

	// A batch replaces dimension 0 of every input, and leaves the specs alone.
	b := gen(7, 1)
	for i, s := range specs {
		want := append([]int64{7}, s.Shape[1:]...)
		if got := b[i].Shape(); !reflect.DeepEqual(got, want) {
			t.Errorf("batch 7, input %d: shape %v, want %v", i, got, want)
		}
	}
	if !reflect.DeepEqual(specs[0].Shape, []int64{2, 3}) {
		t.Errorf("MakeInputs changed the spec's shape to %v", specs[0].Shape)
	}

	// A scalar input is fine without a batch.
	sc, err := MakeInputs([]InputSpec{{Shape: []int64{}, DType: torch.Float32}}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseTensors(sc)
	if n := sc[0].Numel(); n != 1 || len(sc[0].Shape()) != 0 {
		t.Errorf("scalar input: numel %d, shape %v", n, sc[0].Shape())
	}
}

func TestMakeInputsErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		specs []InputSpec
		batch int
		want  string
	}{
		{"batch of a scalar", []InputSpec{{Shape: []int64{1, 2}}, {Shape: []int64{}}}, 4,
			"bench: --sweep-batch needs inputs with a batch dimension; a scalar input has none"},
		{"unsupported dtype", []InputSpec{{Shape: []int64{1, 2}}, {Shape: []int64{2}, DType: torch.Float16}}, 0,
			"bench: input [2]: random inputs of dtype " + torch.Float16.String() + " are not supported"},
		{"unsupported dtype, batched", []InputSpec{{Shape: []int64{2}, DType: torch.Float16}}, 3,
			"bench: input [3]: random inputs of dtype " + torch.Float16.String() + " are not supported"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts, err := MakeInputs(c.specs, c.batch, 1)
			if err == nil {
				CloseTensors(ts)
				t.Fatal("MakeInputs succeeded")
			}
			if !errors.Is(err, tserr.ErrBadInput) || err.Error() != c.want {
				t.Errorf("error %q, want bad input %q", err, c.want)
			}
			if ts != nil {
				t.Errorf("%d tensors returned with the error", len(ts))
			}
		})
	}
}

func TestRandomTensor(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x, err := RandomTensor(rng, []int64{1000}, torch.Float32, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	var sum, sq float64
	for _, v := range data(t, x).([]float32) {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	// Standard normal: mean 0 (standard error 0.03), variance 1.
	if mean, variance := sum/1000, sq/1000-(sum/1000)*(sum/1000); mean < -0.15 || mean > 0.15 || variance < 0.8 || variance > 1.2 {
		t.Errorf("float32 inputs: mean %.3f, variance %.3f; want a standard normal", mean, variance)
	}
	u, err := RandomTensor(rng, []int64{2, 3}, torch.Uint8, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if len(data(t, u).([]uint8)) != 6 {
		t.Error("uint8 input of shape 2x3 does not have 6 elements")
	}
	// A range bounds integer inputs (token ids below a vocabulary size), uint8 too.
	for _, dt := range []torch.DType{torch.Int64, torch.Int32, torch.Uint8} {
		r, err := RandomTensor(rng, []int64{500}, dt, []int64{7, 10})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		switch d := data(t, r).(type) {
		case []int64:
			for _, v := range d {
				seen[v] = true
			}
		case []int32:
			for _, v := range d {
				seen[int64(v)] = true
			}
		case []uint8:
			for _, v := range d {
				seen[int64(v)] = true
			}
		}
		r.Close()
		if len(seen) != 3 || !seen[7] || !seen[8] || !seen[9] {
			t.Errorf("%s in [7, 10): drew %v", dt, seen)
		}
	}
	if _, err := RandomTensor(rng, []int64{2}, torch.Int64, []int64{5, 5}); err == nil {
		t.Error("empty range [5, 5) accepted")
	}
	if _, err := RandomTensor(rng, []int64{2}, torch.QInt8, nil); err == nil || !strings.Contains(err.Error(), "are not supported") {
		t.Errorf("qint8: %v, want not supported", err)
	}
}

// digitsInputs is the digits fixture's input spec.
var digitsInputs = []InputSpec{{Shape: []int64{1, 1, 8, 8}, DType: torch.Float32}}

// loadDigits loads the digits fixture (a plain TorchScript file) as bench does.
func loadDigits(t *testing.T) *Loaded {
	t.Helper()
	path := fixtures.Load(t).Get(t, "digits").ModelPath()
	var progress bytes.Buffer
	l, err := LoadModel(ModelSpec{Path: path, Name: "digits.pt"}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Model.Close() })
	if progress.Len() > 0 {
		t.Errorf("a plain model wrote to progress: %q", progress.String())
	}
	return l
}

func TestLoadModelPlain(t *testing.T) {
	l := loadDigits(t)
	if l.Spec.Name != "digits.pt" || l.LoadTime <= 0 || l.IsArtifact() {
		t.Errorf("loaded %+v, load time %v, artifact %v", l.Spec, l.LoadTime, l.IsArtifact())
	}
	inputs, err := MakeInputs(digitsInputs, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseTensors(inputs)
	tg := l.Target(inputs)
	if tg.Name() != "digits.pt" || tg.channelsLast {
		t.Errorf("target %q, channels-last %v", tg.Name(), tg.channelsLast)
	}
	var r *bench.Result
	torch.Do(func() { r, err = bench.Run(tg, bench.Options{Runs: 5, Warmup: 1}) })
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Samples) != 5 {
		t.Errorf("%d samples, want 5", len(r.Samples))
	}
	// A target on inputs the model cannot take fails with libtorch's error.
	bad, err := MakeInputs([]InputSpec{{Shape: []int64{1, 3, 5}, DType: torch.Float32}}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseTensors(bad)
	torch.Do(func() { err = l.Target(bad).Run() })
	if err == nil {
		t.Error("forward on a 1x3x5 input succeeded")
	}
}

func TestLoadModelArtifact(t *testing.T) {
	m, err := torch.Load(fixtures.Load(t).Get(t, "digits").ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// Made with another libtorch: loading warns.
	man := &torchspeed.Manifest{
		Format: version.ManifestFormat, Torchspeed: "test", Libtorch: "0.9.0", Precision: "fp32",
		Inputs:       []torchspeed.InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}},
		ChannelsLast: true, Runtime: torchspeed.Runtime{Threads: 1},
	}
	raw, err := man.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(t.TempDir(), "digits.torchspeed.pt")
	if err := m.Save(art, map[string][]byte{torchspeed.ManifestFile: raw}); err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	l, err := LoadModel(ModelSpec{Path: art, Name: "digits.torchspeed.pt"}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Model.Close()
	if !l.IsArtifact() {
		t.Error("an artifact is not one")
	}
	if want := "bench: digits.torchspeed.pt: artifact " + strconv.Quote(art) + " was made and measured with libtorch 0.9.0"; !strings.Contains(progress.String(), want) {
		t.Errorf("progress %q, want a line starting %q", progress.String(), want)
	}
	inputs, err := MakeInputs(digitsInputs, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseTensors(inputs)
	tg := l.Target(inputs)
	if !tg.channelsLast {
		t.Error("the target of a channels-last artifact does not convert its inputs")
	}
	torch.Do(func() { err = tg.Run() })
	if err != nil {
		t.Fatal(err)
	}
}

func TestLoadModelMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.pt")
	l, err := LoadModel(ModelSpec{Path: path, Name: "nope.pt"}, io.Discard)
	if err == nil {
		l.Model.Close()
		t.Fatal("loaded a missing file")
	}
	if want := "bench: load " + strconv.Quote(path) + ": "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start %q", err, want)
	}
}

func TestRunStreams(t *testing.T) {
	l := loadDigits(t)
	o := bench.Options{Runs: 4, Warmup: 1}
	for _, c := range []struct{ batch, wantBatch int }{{0, 1}, {3, 3}} {
		r, err := RunStreams(l, digitsInputs, c.batch, 1, 2, o, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Name != "digits.pt" || r.Streams != 2 || r.Threads != 1 || r.Batch != c.wantBatch {
			t.Errorf("batch %d: %q, %d streams x %d threads, batch %d; want digits.pt, 2 x 1, batch %d",
				c.batch, r.Name, r.Streams, r.Threads, r.Batch, c.wantBatch)
		}
	}
	// A stream that cannot make its inputs fails the run with a usage error.
	_, err := RunStreams(l, []InputSpec{{Shape: []int64{}, DType: torch.Float32}}, 2, 1, 2, o, 1)
	if !errors.Is(err, tserr.ErrBadInput) || !strings.Contains(err.Error(), "make target: bench: --sweep-batch needs inputs with a batch dimension") {
		t.Errorf("scalar input swept: %v", err)
	}
}

func TestServeRounds(t *testing.T) {
	l := loadDigits(t)
	in := strings.NewReader("run 3\nrun x\n\n  run 2  \nquit\nrun 1\n")
	var out bytes.Buffer
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gcs := ms.NumForcedGC
	if err := ServeRounds(in, &out, l, digitsInputs, 1, 2, map[string]string{"threads": "1", "runtime": "default"}); err != nil {
		t.Fatal(err)
	}
	// One collection before the warm-up, none in the rounds: the inferences right after one
	// are slow, and every round would time them.
	runtime.ReadMemStats(&ms)
	if n := ms.NumForcedGC - gcs; n != 1 {
		t.Errorf("%d forced collections, want 1 (before the warm-up)", n)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{
		`ready {"runtime":"default","threads":"1"}`,
		"ns 3",
		`error "run x": want "run K" with K >= 1, or "quit"`,
		`error "": want "run K" with K >= 1, or "quit"`,
		"ns 2",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d (quit ends it):\n%s", len(lines), len(want), out.String())
	}
	for i, w := range want {
		if n, ok := strings.CutPrefix(w, "ns "); ok {
			f := strings.Fields(lines[i])
			k, _ := strconv.Atoi(n)
			if len(f) != k+1 || f[0] != "ns" {
				t.Errorf("line %d: %q, want ns and %d latencies", i, lines[i], k)
				continue
			}
			for _, v := range f[1:] {
				if ns, err := strconv.ParseInt(v, 10, 64); err != nil || ns <= 0 {
					t.Errorf("line %d: latency %q", i, v)
				}
			}
			continue
		}
		if lines[i] != w {
			t.Errorf("line %d: %q, want %q", i, lines[i], w)
		}
	}

	// The end of the input stops it too.
	out.Reset()
	if err := ServeRounds(strings.NewReader("run 1\n"), &out, l, digitsInputs, 1, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "ready null\nns ") || strings.Count(out.String(), "\n") != 2 {
		t.Errorf("output %q", out.String())
	}

	// Inputs it cannot make fail it before "ready".
	out.Reset()
	err := ServeRounds(strings.NewReader("run 1\n"), &out, l, []InputSpec{{Shape: []int64{2}, DType: torch.Float16}}, 1, 0, nil)
	if !errors.Is(err, tserr.ErrBadInput) || out.Len() > 0 {
		t.Errorf("error %v, output %q; want a usage error and no output", err, out.String())
	}
}

// Two streams of the Silero-shaped LSTM model (flattened weights, (h, c) in attributes), each
// on its own session, through the API bench --streams uses.
func TestRunSessionStreamsLSTMFlatWeights(t *testing.T) {
	f := fixtures.Load(t).Get(t, "vad_lstm")
	l, err := LoadModel(ModelSpec{Path: f.ModelPath(), Name: "vad_lstm.pt"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Model.Close()
	ref := streamref.Load(t, f, "forward")
	r, err := RunSessionStreams(l, "forward", ref, 1, 2, bench.Options{Runs: 30, Warmup: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.Streams != 2 || r.Inferences != 60 {
		t.Errorf("%d streams, %d inferences; want 2 streams of 30", r.Streams, r.Inferences)
	}
}
