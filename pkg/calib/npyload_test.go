package calib

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/npy"
)

// seq returns n float32 values that identify their position: sample s, element e of a
// sample of sn elements is s*1000 + e.
func seq(n, sn int) []float32 {
	out := make([]float32, n*sn)
	for s := range n {
		for e := range sn {
			out[s*sn+e] = float32(s*1000 + e)
		}
	}
	return out
}

func writeNPY(t *testing.T, path string, a *npy.Array) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := npy.WriteFile(path, a); err != nil {
		t.Fatal(err)
	}
}

// collect reads every batch via Next and checks it against Batches and Batch.
func collect(t *testing.T, d *Dataset) []Batch {
	t.Helper()
	var out []Batch
	for {
		b, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	if len(out) != d.NumBatches() {
		t.Fatalf("Next gave %d batches, NumBatches %d", len(out), d.NumBatches())
	}
	i := 0
	for b := range d.Batches() {
		if !reflect.DeepEqual(b, out[i]) {
			t.Fatalf("Batches()[%d] differs from Next", i)
		}
		i++
	}
	return out
}

func TestNPYStacked(t *testing.T) {
	dir := t.TempDir()
	writeNPY(t, filepath.Join(dir, "x.npy"), npy.FromFloat32([]int64{7, 2, 3}, seq(7, 6)))
	writeNPY(t, filepath.Join(dir, "y.npy"), npy.FromInt64([]int64{7}, []int64{0, 1, 2, 3, 4, 5, 6}))
	cases := []struct {
		name      string
		limit     int
		batch     int
		wantIdx   []int
		wantSizes []int
	}{
		{"all, batch 3", 0, 3, []int{0, 1, 2, 3, 4, 5, 6}, []int{3, 3, 1}},
		{"all, default batch", 0, 0, []int{0, 1, 2, 3, 4, 5, 6}, []int{1, 1, 1, 1, 1, 1, 1}},
		{"limit 3 spreads", 3, 2, []int{0, 2, 4}, []int{2, 1}},
		{"limit above n", 100, 7, []int{0, 1, 2, 3, 4, 5, 6}, []int{7}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Open(Source{Path: filepath.Join(dir, "x.npy"), Labels: filepath.Join(dir, "y.npy"), Limit: c.limit, BatchSize: c.batch},
				[]InputSpec{{Name: "x", Shape: []int64{-1, 2, 3}, DType: "float32"}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Len() != len(c.wantIdx) || d.Synthetic() || !d.HasLabels() {
				t.Fatalf("Len %d Synthetic %v HasLabels %v", d.Len(), d.Synthetic(), d.HasLabels())
			}
			var sizes []int
			var got []float32
			var labels []int64
			start := 0
			for _, b := range collect(t, d) {
				if b.Start != start {
					t.Errorf("batch Start %d, want %d", b.Start, start)
				}
				start += b.Size()
				sizes = append(sizes, b.Size())
				if want := []int64{int64(b.Size()), 2, 3}; !slices.Equal(b.Inputs[0].Shape, want) {
					t.Errorf("batch shape %v, want %v", b.Inputs[0].Shape, want)
				}
				got = append(got, b.Inputs[0].Data.([]float32)...)
				labels = append(labels, b.Labels...)
			}
			var want []float32
			var wantLabels []int64
			for _, i := range c.wantIdx {
				want = append(want, seq(7, 6)[i*6:(i+1)*6]...)
				wantLabels = append(wantLabels, int64(i))
			}
			if !slices.Equal(sizes, c.wantSizes) || !slices.Equal(got, want) || !slices.Equal(labels, wantLabels) {
				t.Errorf("sizes %v data %v labels %v; want %v %v %v", sizes, got, labels, c.wantSizes, want, wantLabels)
			}
			if name := d.SampleName(1); !strings.HasSuffix(name, "x.npy["+strconv.Itoa(c.wantIdx[1])+"]") {
				t.Errorf("SampleName(1) = %q", name)
			}
			d.Reset()
			if b, err := d.Next(); err != nil || b.Start != 0 {
				t.Errorf("after Reset: %v %v", b.Start, err)
			}
		})
	}
}

func TestNPYPerSampleFolder(t *testing.T) {
	dir := t.TempDir()
	// Sample files with and without the leading batch dimension; sorted by name.
	writeNPY(t, filepath.Join(dir, "s2.npy"), npy.FromFloat32([]int64{1, 4}, []float32{20, 21, 22, 23}))
	writeNPY(t, filepath.Join(dir, "s0.npy"), npy.FromFloat32([]int64{4}, []float32{0, 1, 2, 3}))
	writeNPY(t, filepath.Join(dir, "s1.npy"), npy.FromFloat32([]int64{4}, []float32{10, 11, 12, 13}))
	os.WriteFile(filepath.Join(dir, "README"), []byte("ignored"), 0o644)
	var calls [][2]int
	d, err := Open(Source{Path: dir, BatchSize: 2, Progress: func(done, total int) { calls = append(calls, [2]int{done, total}) }},
		[]InputSpec{{Name: "x", Shape: []int64{1, -1}}})
	if err != nil {
		t.Fatal(err)
	}
	bs := collect(t, d)
	if got := append(bs[0].Inputs[0].Data.([]float32), bs[1].Inputs[0].Data.([]float32)...); !slices.Equal(got, []float32{0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}) {
		t.Errorf("data %v", got)
	}
	if !slices.Equal(d.Inputs()[0].Shape, []int64{-1, 4}) {
		t.Errorf("resolved shape %v, want [-1 4]", d.Inputs()[0].Shape)
	}
	if !reflect.DeepEqual(calls, [][2]int{{1, 3}, {2, 3}, {3, 3}}) {
		t.Errorf("progress calls %v", calls)
	}
	if d.HasLabels() || d.Labels() != nil {
		t.Errorf("labels without a labels file")
	}
	if !strings.HasSuffix(d.SampleName(2), "s2.npy") {
		t.Errorf("SampleName(2) = %q", d.SampleName(2))
	}
}

func TestNPYMultiInput(t *testing.T) {
	dir := t.TempDir()
	writeNPY(t, filepath.Join(dir, "input_ids.npy"), npy.FromInt64([]int64{3, 4}, []int64{101, 7, 8, 102, 101, 9, 102, 0, 101, 5, 6, 102}))
	// attention_mask as one file per sample.
	for i, m := range [][]int64{{1, 1, 1, 1}, {1, 1, 1, 0}, {1, 1, 1, 1}} {
		writeNPY(t, filepath.Join(dir, "attention_mask", "m"+strconv.Itoa(i)+".npy"), npy.FromInt64([]int64{4}, m))
	}
	writeNPY(t, filepath.Join(dir, "labels.npy"), npy.FromInt64([]int64{3}, []int64{1, 0, 1}))
	specs := []InputSpec{{Name: "input_ids", Shape: []int64{-1, 4}, DType: "int64"}, {Name: "attention_mask", Shape: []int64{-1, 4}, DType: "torch.int64"}}

	for _, src := range []Source{
		{Path: dir, Labels: "labels.npy", BatchSize: 2},
		{Kind: "npy", Path: dir, Inputs: []string{"input_ids.npy", "attention_mask"}, Labels: "labels.npy", BatchSize: 2},
	} {
		d, err := Open(src, specs)
		if err != nil {
			t.Fatal(err)
		}
		bs := collect(t, d)
		if len(bs) != 2 || len(bs[0].Inputs) != 2 {
			t.Fatalf("batches %d", len(bs))
		}
		if got := bs[0].Inputs[1].Data.([]int64); !slices.Equal(got, []int64{1, 1, 1, 1, 1, 1, 1, 0}) {
			t.Errorf("mask batch 0 = %v", got)
		}
		if got := bs[1].Inputs[0].Data.([]int64); !slices.Equal(got, []int64{101, 5, 6, 102}) {
			t.Errorf("ids batch 1 = %v", got)
		}
		if !slices.Equal(d.Labels(), []int64{1, 0, 1}) {
			t.Errorf("labels %v", d.Labels())
		}
	}
}

func TestNPZ(t *testing.T) {
	golden := filepath.Join("..", "npy", "testdata", "stored.npz") // input 4x1x2x2 f4, tokens 4x6 i8, labels
	dir := t.TempDir()
	// Members named differently from the model's inputs, in archive order.
	anon := filepath.Join(dir, "anon.npz")
	if err := npy.WriteNPZCompressed(anon, []string{"arr_0", "arr_1"}, []*npy.Array{
		npy.FromFloat32([]int64{2, 3}, seq(2, 3)), npy.FromInt64([]int64{2}, []int64{5, 6}),
	}); err != nil {
		t.Fatal(err)
	}
	// One archive per sample.
	perSample := filepath.Join(dir, "samples")
	os.Mkdir(perSample, 0o755)
	for i := range 3 {
		err := npy.WriteNPZ(filepath.Join(perSample, "s"+strconv.Itoa(i)+".npz"), []string{"pixels", "labels"}, []*npy.Array{
			npy.FromFloat32([]int64{1, 3}, seq(1, 3)), npy.FromInt64(nil, []int64{int64(2 - i)}),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	twoInputs := []InputSpec{{Name: "input", Shape: []int64{-1, 1, 2, 2}}, {Name: "tokens", Shape: []int64{0, 6}, DType: "long"}}
	cases := []struct {
		name       string
		src        Source
		specs      []InputSpec
		n          int
		wantLabels []int64
	}{
		{"golden by name", Source{Path: golden}, twoInputs, 4, []int64{0, 1, 2, 0}},
		{"golden deflated", Source{Kind: "npz", Path: filepath.Join("..", "npy", "testdata", "deflated.npz")}, twoInputs, 4, []int64{0, 1, 2, 0}},
		{"golden explicit members", Source{Path: golden, Inputs: []string{"input", "tokens"}, Limit: 2},
			[]InputSpec{{Name: "a", Shape: []int64{1, 1, 2, 2}}, {Name: "b", Shape: []int64{1, 6}, DType: "int64"}}, 2, []int64{0, 2}},
		{"archive order", Source{Path: anon}, []InputSpec{{Name: "x", Shape: []int64{1, 3}}, {Name: "n", Shape: []int64{-1}, DType: "int64"}}, 2, nil},
		{"per-sample archives", Source{Path: perSample}, []InputSpec{{Name: "pixels", Shape: []int64{1, 3}}}, 3, []int64{2, 1, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Open(c.src, c.specs)
			if err != nil {
				t.Fatal(err)
			}
			if d.Len() != c.n || !slices.Equal(d.Labels(), c.wantLabels) {
				t.Errorf("Len %d labels %v; want %d %v", d.Len(), d.Labels(), c.n, c.wantLabels)
			}
			b, _ := d.Batch(0)
			if len(b.Inputs) != len(c.specs) {
				t.Fatalf("%d inputs", len(b.Inputs))
			}
		})
	}
	// Spot-check values from the golden file (formula in scripts/gen_npy_testdata.py).
	d, err := Open(Source{Path: golden, BatchSize: 4}, twoInputs)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.Batch(0)
	if got := b.Inputs[0].Data.([]float32); got[0] != -3.25 || got[15] != 15*0.5-3.25 {
		t.Errorf("golden input values %v", got)
	}
	if got := b.Inputs[1].Data.([]int64); got[1] != (1000003%65536-32768)*1000000007 {
		t.Errorf("golden token values %v", got)
	}
}

func TestNPYErrors(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	writeNPY(t, p("ok.npy"), npy.FromFloat32([]int64{4, 3}, seq(4, 3)))
	writeNPY(t, p("f64.npy"), &npy.Array{Shape: []int64{4, 3}, DType: npy.Float64, Data: make([]float64, 12)})
	nan := seq(4, 3)
	nan[2*3+1] = float32(math.NaN())
	writeNPY(t, p("nan.npy"), npy.FromFloat32([]int64{4, 3}, nan))
	writeNPY(t, p("scalar.npy"), npy.FromFloat32(nil, []float32{1}))
	writeNPY(t, p("labels3.npy"), npy.FromInt64([]int64{3}, []int64{0, 1, 2}))
	writeNPY(t, p("labelsneg.npy"), npy.FromInt64([]int64{4}, []int64{0, 1, -2, 2}))
	writeNPY(t, p("labelsf.npy"), npy.FromFloat32([]int64{4}, []float32{0, 1, 2, 2}))
	os.WriteFile(p("header.npy"), []byte("\x93NUMPY\x01\x00\x10\x00{'descr': 'x'}  \n"), 0o644)
	os.WriteFile(p("text.npy"), []byte("1,2,3\n"), 0o644)
	os.Mkdir(p("empty"), 0o755)
	os.Mkdir(p("inf"), 0o755)
	writeNPY(t, p("inf/a.npy"), npy.FromFloat32([]int64{3}, []float32{1, 2, 3}))
	writeNPY(t, p("inf/b.npy"), npy.FromFloat32([]int64{3}, []float32{1, float32(math.Inf(-1)), 3}))
	os.Mkdir(p("ragged"), 0o755)
	writeNPY(t, p("ragged/a.npy"), npy.FromFloat32([]int64{3}, []float32{1, 2, 3}))
	writeNPY(t, p("ragged/b.npy"), npy.FromFloat32([]int64{2}, []float32{1, 2}))
	os.Mkdir(p("two"), 0o755)
	writeNPY(t, p("two/a.npy"), npy.FromFloat32([]int64{4, 3}, seq(4, 3)))
	writeNPY(t, p("two/b.npy"), npy.FromFloat32([]int64{5, 3}, seq(5, 3)))
	npy.WriteNPZ(p("ab.npz"), []string{"a", "b", "c"}, []*npy.Array{npy.FromFloat32([]int64{1}, []float32{1}), npy.FromFloat32([]int64{1}, []float32{1}), npy.FromFloat32([]int64{1}, []float32{1})})

	x3 := []InputSpec{{Name: "x", Shape: []int64{-1, 3}}}
	cases := []struct {
		name  string
		src   Source
		specs []InputSpec
		want  []string // substrings the error must contain
	}{
		{"shape", Source{Path: p("ok.npy")}, []InputSpec{{Name: "x", Shape: []int64{1, 3, 224, 224}}},
			[]string{"ok.npy", "holds 4x3 float32", `model input "x" (#0) expects Nx3x224x224 float32`, "save it with shape (N, 3, 224, 224)"}},
		{"dtype", Source{Path: p("f64.npy")}, x3, []string{"f64.npy", "4x3 float64", "expects Nx3 float32", "dtype float32"}},
		{"int input given floats", Source{Path: p("ok.npy")}, []InputSpec{{Name: "ids", Shape: []int64{1, 3}, DType: "int64"}}, []string{"ok.npy", "expects Nx3 int64"}},
		{"nan", Source{Path: p("nan.npy")}, x3, []string{"nan.npy", "sample 2 has NaN at element 1", "must be finite"}},
		{"inf per sample", Source{Path: p("inf")}, x3, []string{"b.npy (sample 1) has -Inf at element 1"}},
		{"ragged", Source{Path: p("ragged")}, []InputSpec{{Name: "x", Shape: []int64{-1, -1}}}, []string{"b.npy holds a 2 sample", "a.npy holds 3", "share one shape"}},
		{"wrong header", Source{Path: p("header.npy")}, x3, []string{"header.npy", "wrong header"}},
		{"not npy", Source{Path: p("text.npy")}, x3, []string{"text.npy", "bad magic (not a .npy file)"}},
		{"empty folder", Source{Kind: "npy", Path: p("empty")}, x3, []string{"empty", "holds no .npy files"}},
		{"empty folder auto", Source{Path: p("empty")}, x3, []string{"empty", "is empty"}},
		{"missing", Source{Path: p("nope.npy")}, x3, []string{"nope.npy", "no such file"}},
		{"scalar", Source{Path: p("scalar.npy")}, x3, []string{"scalar.npy is a scalar"}},
		{"labels count", Source{Path: p("ok.npy"), Labels: p("labels3.npy")}, x3, []string{"labels3.npy has 3 entries but the data have 4 samples"}},
		{"labels negative", Source{Path: p("ok.npy"), Labels: p("labelsneg.npy")}, x3, []string{"labelsneg.npy", "entry 2 is -2"}},
		{"labels float", Source{Path: p("ok.npy"), Labels: p("labelsf.npy")}, x3, []string{"labelsf.npy", "cannot be read as integers"}},
		{"sample counts differ", Source{Path: p("two"), Inputs: []string{"a.npy", "b.npy"}}, []InputSpec{{Name: "a", Shape: []int64{1, 3}}, {Name: "b", Shape: []int64{1, 3}}},
			[]string{"a.npy has 4 samples but", "b.npy has 5"}},
		{"one file two inputs", Source{Path: p("ok.npy")}, []InputSpec{{Name: "a", Shape: []int64{1, 3}}, {Name: "b", Shape: []int64{1, 3}}}, []string{"ok.npy is one array but the model has 2 inputs"}},
		{"inputs count", Source{Path: dir, Inputs: []string{"ok.npy"}}, []InputSpec{{Name: "a", Shape: []int64{1, 3}}, {Name: "b", Shape: []int64{1, 3}}}, []string{"inputs lists 1 entries but the model has 2 inputs"}},
		{"npz members ambiguous", Source{Path: p("ab.npz")}, []InputSpec{{Name: "q", Shape: []int64{1}}, {Name: "r", Shape: []int64{1}}}, []string{"ab.npz has members a, b, c", `inputs "q", "r"`}},
		{"npz member missing", Source{Path: p("ab.npz"), Inputs: []string{"zz"}}, x3, []string{`ab.npz has no member "zz"`}},
		{"npz label member missing", Source{Path: p("ab.npz"), Labels: "y"}, x3, []string{`no labels member "y"`}},
		{"memory cap", Source{Path: p("ok.npy"), MaxMemoryMB: 1}, []InputSpec{{Name: "x", Shape: []int64{1, 3}}}, nil},
		{"bad kind", Source{Kind: "csv", Path: p("ok.npy")}, x3, []string{`kind "csv": want npy, npz, images or random`}},
		{"negative limit", Source{Path: p("ok.npy"), Limit: -1}, x3, []string{"limit -1"}},
		{"no path", Source{}, x3, []string{"path is empty", "kind: random"}},
		{"no inputs", Source{Path: p("ok.npy")}, nil, []string{"no inputs"}},
		{"bad dtype", Source{Path: p("ok.npy")}, []InputSpec{{Name: "x", Shape: []int64{1, 3}, DType: "complex64"}}, []string{`dtype "complex64" is not supported`}},
		{"no batch dim", Source{Path: p("ok.npy")}, []InputSpec{{Name: "x"}}, []string{"empty shape"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, _ := os.ReadDir(dir)
			d, err := Open(c.src, c.specs)
			if c.want == nil { // must succeed (guards the table's other cases against false passes)
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Open succeeded (%d samples), want an error", d.Len())
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\n does not contain %q", err, w)
				}
			}
			after, _ := os.ReadDir(dir)
			if len(before) != len(after) {
				t.Errorf("Open wrote files: %d entries before, %d after", len(before), len(after))
			}
		})
	}
}

func TestMemoryCap(t *testing.T) {
	dir := t.TempDir()
	writeNPY(t, filepath.Join(dir, "big.npy"), npy.FromFloat32([]int64{3, 1 << 18}, make([]float32, 3<<18))) // 3 MiB
	spec := []InputSpec{{Name: "x", Shape: []int64{1, 1 << 18}}}
	if _, err := Open(Source{Path: filepath.Join(dir, "big.npy"), MaxMemoryMB: 2}, spec); err == nil || !strings.Contains(err.Error(), "above max_memory_mb 2; lower limit") {
		t.Errorf("error %v, want the memory cap", err)
	}
	if _, err := Open(Source{Path: filepath.Join(dir, "big.npy"), MaxMemoryMB: 2, Limit: 2}, spec); err != nil {
		t.Errorf("limit 2 should fit 2 MiB: %v", err)
	}
}

func TestConcurrentBatches(t *testing.T) {
	dir := t.TempDir()
	writeNPY(t, filepath.Join(dir, "x.npy"), npy.FromFloat32([]int64{50, 3}, seq(50, 3)))
	d, err := Open(Source{Path: filepath.Join(dir, "x.npy"), BatchSize: 4}, []InputSpec{{Name: "x", Shape: []int64{1, 3}}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int]int{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b, err := d.Next()
				if err == io.EOF {
					return
				}
				var sum float32
				for b2 := range d.Batches() {
					sum += b2.Inputs[0].Data.([]float32)[0]
				}
				mu.Lock()
				seen[b.Start]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != d.NumBatches() {
		t.Errorf("concurrent Next saw %d distinct batches, want %d", len(seen), d.NumBatches())
	}
	for s, n := range seen {
		if n != 1 {
			t.Errorf("batch at %d served %d times", s, n)
		}
	}
	if _, err := d.Batch(d.NumBatches()); err == nil {
		t.Error("Batch out of range accepted")
	}
}
