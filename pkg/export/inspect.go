// Package export turns a torchspeed artifact into what production servers load: a Triton
// model repository, the files torch-model-archiver takes for TorchServe, and a measurement of
// what running the artifact outside torchspeed's loader costs. Everything written comes from
// the artifact's manifest and from running the artifact, never from a guess.
package export

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// Tensor describes one input or output as the artifact takes or gives it at the manifest's
// shapes.
type Tensor struct {
	// Name is the forward argument's name (inputs) or the flattened output name ("0", "1").
	Name  string
	DType torch.DType
	Shape []int64
}

// Artifact is what an export needs to know about an artifact: its manifest and, found by
// running it, its outputs and whether its first dimension is a batch.
type Artifact struct {
	Path     string
	Manifest *torchspeed.Manifest
	// Warnings are torchspeed.Load's for the artifact (libtorch version drift, no digest).
	Warnings []string
	Inputs   []Tensor
	Outputs  []Tensor
	// Batchable: every input and output has a leading dimension of 1 in the manifest's shapes,
	// and a batch of two different samples gives two rows, the first equal to the single-sample
	// answer. BatchNote says why not when it is false.
	Batchable bool
	BatchNote string
	// DefaultQEngine is libtorch's quantized engine in this process before the first Inspect
	// loaded an artifact (which sets the artifact's engine): what a server that never sets
	// one runs INT8 models with.
	DefaultQEngine string
}

var (
	defaultQEngineOnce sync.Once
	defaultQEngine     string
	defaultQEngineErr  error
)

// Inspect loads the artifact with torchspeed.Load, runs it once at the manifest's shapes and
// once with a batch of two, and describes it. It sets libtorch's thread count to the
// manifest's (Load does).
func Inspect(path string) (*Artifact, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("export: artifact %q: %w: pass the .torchspeed.pt that `torchspeed optimize` wrote", path, err)
	}
	defaultQEngineOnce.Do(func() { defaultQEngine, defaultQEngineErr = torch.QEngine() })
	if defaultQEngineErr != nil {
		return nil, fmt.Errorf("export: libtorch's default quantized engine: %w", defaultQEngineErr)
	}
	m, err := torchspeed.Load(path)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	defer m.Close()
	man := m.Manifest
	if man == nil || man.Format == 0 || len(man.Inputs) == 0 {
		return nil, fmt.Errorf("export: %q has no torchspeed manifest with input shapes: export an artifact written by `torchspeed optimize`, not a plain TorchScript file", path)
	}
	a := &Artifact{Path: path, Manifest: man, DefaultQEngine: defaultQEngine, Warnings: m.Warnings}
	for _, in := range man.Inputs {
		dt, err := torch.ParseDType(in.DType)
		if err != nil {
			return nil, fmt.Errorf("export: %q: manifest input %q: %w", path, in.Name, err)
		}
		if len(in.Shape) == 0 {
			return nil, fmt.Errorf("export: %q: manifest input %q has no shape: re-run torchspeed optimize with the input's shape in model.inputs", path, in.Name)
		}
		a.Inputs = append(a.Inputs, Tensor{Name: in.Name, DType: dt, Shape: in.Shape})
	}
	one, err := runBatch(m, a.Inputs, 1)
	if err != nil {
		return nil, fmt.Errorf("export: running %q at the manifest's input shapes: %w", path, err)
	}
	for _, o := range one {
		a.Outputs = append(a.Outputs, Tensor{Name: o.name, DType: o.dtype, Shape: o.shape})
	}
	a.Batchable, a.BatchNote = checkBatch(m, a.Inputs, one)
	return a, nil
}

// output is one output copied out of libtorch.
type output struct {
	name   string
	dtype  torch.DType
	shape  []int64
	values []float64
}

// checkBatch runs a batch of two samples whose first equals the single-sample run.
func checkBatch(m *torchspeed.Model, inputs []Tensor, one []output) (bool, string) {
	for _, in := range inputs {
		if in.Shape[0] != 1 {
			return false, fmt.Sprintf("input %q has shape %v: its first dimension is not a batch of 1", in.Name, in.Shape)
		}
	}
	for _, o := range one {
		if len(o.shape) == 0 || o.shape[0] != 1 {
			return false, fmt.Sprintf("output %s has shape %v: its first dimension is not a batch of 1", o.name, o.shape)
		}
	}
	two, err := runBatch(m, inputs, 2)
	if err != nil {
		return false, fmt.Sprintf("a batch of 2 fails: %v", firstLine(err))
	}
	for i, o := range two {
		if len(o.shape) == 0 || o.shape[0] != 2 || !slices.Equal(o.shape[1:], one[i].shape[1:]) {
			return false, fmt.Sprintf("a batch of 2 gives output %s shape %v; a batch would give 2 rows of %v", o.name, o.shape, one[i].shape[1:])
		}
		row := o.values[:len(one[i].values)]
		if d := maxRelDiff(row, one[i].values); d > 1e-3 {
			return false, fmt.Sprintf("in a batch of 2, output %s's first row differs from the single-sample answer (max relative difference %.3g): samples are not independent along the first dimension", o.name, d)
		}
	}
	return true, ""
}

// runBatch runs the model on deterministic inputs with the first dimension set to n; sample 0
// is the same for every n.
func runBatch(m *torchspeed.Model, specs []Tensor, n int64) ([]output, error) {
	var ins []*torch.Tensor
	defer func() {
		for _, t := range ins {
			t.Close()
		}
	}()
	for i, s := range specs {
		t, err := sampleTensor(s, n, uint64(i))
		if err != nil {
			return nil, err
		}
		ins = append(ins, t)
	}
	outs, err := m.Predict(ins...)
	if err != nil {
		return nil, err
	}
	defer torch.CloseOutputs(outs)
	return copyOutputs(outs)
}

// copyOutputs copies outputs out of libtorch as float64.
func copyOutputs(outs []torch.Output) ([]output, error) {
	res := make([]output, 0, len(outs))
	for _, o := range outs {
		f, err := o.Tensor.Float()
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", o.Name, err)
		}
		vals, err := f.Float32s()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", o.Name, err)
		}
		v64 := make([]float64, len(vals))
		for i, v := range vals {
			v64[i] = float64(v)
		}
		res = append(res, output{name: o.Name, dtype: o.Tensor.DType(), shape: o.Tensor.Shape(), values: v64})
	}
	return res, nil
}

// sampleTensor makes input spec s with its first dimension n: a fixed pseudo-random pattern
// (small integers for integer inputs, which index embeddings), different for each sample.
func sampleTensor(s Tensor, n int64, seed uint64) (*torch.Tensor, error) {
	shape := append([]int64{n}, s.Shape[1:]...)
	if n == 1 {
		shape = s.Shape
	}
	count := int64(1)
	for _, d := range shape {
		count *= d
	}
	if count <= 0 || count > 1<<28 {
		return nil, fmt.Errorf("input %q: shape %v has %d elements: give a positive shape under 2^28 elements", s.Name, shape, count)
	}
	x := seed*0x9E3779B97F4A7C15 + 1
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	switch s.DType {
	case torch.Float32:
		d := make([]float32, count)
		for i := range d {
			d[i] = float32(next()%2000)/1000 - 1
		}
		return torch.NewTensor(d, shape)
	case torch.Float64:
		d := make([]float64, count)
		for i := range d {
			d[i] = float64(next()%2000)/1000 - 1
		}
		return torch.NewTensor(d, shape)
	case torch.Int64:
		d := make([]int64, count)
		for i := range d {
			d[i] = int64(next() % 10)
		}
		return torch.NewTensor(d, shape)
	case torch.Int32:
		d := make([]int32, count)
		for i := range d {
			d[i] = int32(next() % 10)
		}
		return torch.NewTensor(d, shape)
	case torch.Uint8:
		d := make([]uint8, count)
		for i := range d {
			d[i] = uint8(next())
		}
		return torch.NewTensor(d, shape)
	case torch.Bool:
		d := make([]bool, count)
		for i := range d {
			d[i] = next()%2 == 0
		}
		return torch.NewTensor(d, shape)
	}
	return nil, fmt.Errorf("input %q: dtype %s is not supported by export: use float32, float64, int64, int32, uint8 or bool", s.Name, s.DType)
}

func maxRelDiff(a, b []float64) float64 {
	scale := 1e-6
	for _, v := range b {
		scale = math.Max(scale, math.Abs(v))
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i])/scale)
	}
	return d
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// tupleIndex is the position of a flattened output in a tensor or flat tuple result ("0", "1",
// ...), or an error for dict entries and nested results, which Triton's and TorchServe's
// default handlers do not return.
func tupleIndex(name string) (int, error) {
	i, err := strconv.Atoi(name)
	if err != nil || i < 0 {
		return 0, errors.New("output " + strconv.Quote(name) + " is a dict entry or nested value")
	}
	return i, nil
}
