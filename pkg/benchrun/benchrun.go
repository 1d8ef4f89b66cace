// Package benchrun runs TorchScript models and torchspeed artifacts for measurement: it loads
// them, makes random inputs of given shapes and dtypes, wraps one forward as a bench.Target,
// runs concurrent throughput streams, serves timed rounds to a driver process and drives such
// processes, one per pinned instance (RunInstances). The timing loops and statistics are
// pkg/bench's (pure Go); this package supplies what they time.
//
// It is the runner behind `torchspeed bench`, and its messages are that command's: they begin
// with "bench:".
package benchrun

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/tserr"
)

// InputSpec is the shape and dtype of one random input.
type InputSpec struct {
	Shape []int64
	DType torch.DType
}

// MakeInputs builds random inputs with a fixed seed, one per spec (see RandomTensor); batch > 0
// replaces dimension 0 of every input. The same specs, batch and seed give the same values. On
// error it closes what it made and returns bad input (tserr.ErrBadInput: a batch size for a
// scalar input, or a dtype RandomTensor does not support, is the caller's choice of inputs, not a
// failure of the model or libtorch). The caller closes the tensors (see CloseTensors).
func MakeInputs(specs []InputSpec, batch int, seed uint64) ([]*torch.Tensor, error) {
	rng := NewRand(seed)
	var out []*torch.Tensor
	for _, s := range specs {
		shape := append([]int64(nil), s.Shape...)
		if batch > 0 {
			if len(shape) == 0 {
				CloseTensors(out)
				return nil, tserr.BadInput(errors.New("bench: --sweep-batch needs inputs with a batch dimension; a scalar input has none"))
			}
			shape[0] = int64(batch)
		}
		t, err := RandomTensor(rng, shape, s.DType, nil)
		if err != nil {
			CloseTensors(out)
			return nil, tserr.BadInput(fmt.Errorf("bench: input %v: %v", shape, err))
		}
		out = append(out, t)
	}
	return out, nil
}

// CloseTensors closes every tensor in ts.
func CloseTensors(ts []*torch.Tensor) {
	for _, t := range ts {
		t.Close()
	}
}

// NewRand is the random stream of seed that inputs are drawn from (RandomTensor): bench, run and
// optimize give the same seed the same stream.
func NewRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// RandomTensor makes a standard-normal float tensor, or integers drawn from intRange
// ([low, high), e.g. token ids below the vocabulary size; nil is [0, 100), and [0, 256) for
// uint8), or random bools. It is the one random-input generator: bench and optimize draw their
// inputs through it.
func RandomTensor(rng *rand.Rand, shape []int64, dt torch.DType, intRange []int64) (*torch.Tensor, error) {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	lo, hi := int64(0), int64(100)
	if dt == torch.Uint8 {
		hi = 256
	}
	if len(intRange) == 2 {
		if intRange[0] >= intRange[1] {
			return nil, fmt.Errorf("random integers need a range [low, high) with low < high, got %v", intRange)
		}
		lo, hi = intRange[0], intRange[1]
	}
	switch dt {
	case torch.Float32:
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64())
		}
		return torch.NewTensor(d, shape)
	case torch.Float64:
		d := make([]float64, n)
		for i := range d {
			d[i] = rng.NormFloat64()
		}
		return torch.NewTensor(d, shape)
	case torch.Int64:
		d := make([]int64, n)
		for i := range d {
			d[i] = lo + rng.Int64N(hi-lo)
		}
		return torch.NewTensor(d, shape)
	case torch.Int32:
		d := make([]int32, n)
		for i := range d {
			d[i] = int32(lo + rng.Int64N(hi-lo))
		}
		return torch.NewTensor(d, shape)
	case torch.Uint8:
		d := make([]uint8, n)
		for i := range d {
			if len(intRange) == 2 {
				d[i] = uint8(lo + rng.Int64N(hi-lo))
			} else {
				d[i] = uint8(rng.IntN(256))
			}
		}
		return torch.NewTensor(d, shape)
	case torch.Bool:
		d := make([]bool, n)
		for i := range d {
			d[i] = rng.IntN(2) == 1
		}
		return torch.NewTensor(d, shape)
	}
	return nil, fmt.Errorf("random inputs of dtype %s are not supported", dt)
}

// ModuleTarget is one forward of a loaded module on fixed inputs, as a bench.Target. It calls
// libtorch on the current OS thread: the callers (torch.Do for latency runs, bench.Throughput
// streams) are locked to their threads, and hopping to a worker thread per call would add a
// goroutine hand-off to every measured latency. Make one with Loaded.Target.
type ModuleTarget struct {
	name   string
	m      *torch.Module
	inputs []*torch.Tensor
	// channelsLast converts 4-D float inputs on every call, as
	// torchspeed.Model.Predict does: the conversion is part of what a
	// caller of the artifact pays.
	channelsLast bool
}

// Name returns the name the model is reported under.
func (t *ModuleTarget) Name() string { return t.name }

// Run runs one forward on the calling thread and releases its outputs.
func (t *ModuleTarget) Run() error {
	in := t.inputs
	if t.channelsLast {
		conv, release, err := torchspeed.ChannelsLastInputs(t.inputs)
		if err != nil {
			return err
		}
		defer release()
		in = conv
	}
	outs, err := t.m.ForwardOnThisThread(in...)
	if err != nil {
		return err
	}
	torch.CloseOutputs(outs)
	return nil
}

// ModelSpec is one model to measure and the name it is reported under; Method and ResetMethod
// are a plain model's (torchspeed.LoadOptions).
type ModelSpec struct{ Path, Name, Method, ResetMethod string }

// Loaded is a model or artifact loaded for measurement. The caller closes Model.
type Loaded struct {
	Spec     ModelSpec
	Model    *torchspeed.Model
	LoadTime time.Duration // how long LoadModel took
}

// Target returns the forward of l on inputs, which stay the caller's to close. An artifact
// whose manifest asks for channels-last inputs converts them on every call.
func (l *Loaded) Target(inputs []*torch.Tensor) *ModuleTarget {
	return &ModuleTarget{name: l.Spec.Name, m: l.Model.Module(), inputs: inputs,
		channelsLast: l.Model.Manifest != nil && l.Model.Manifest.ChannelsLast}
}

// NewModuleTarget is the forward of a loaded module m on inputs (both stay the caller's), named
// name in results: for callers that load modules themselves (quant's candidates).
func NewModuleTarget(name string, m *torch.Module, inputs []*torch.Tensor) *ModuleTarget {
	return &ModuleTarget{name: name, m: m, inputs: inputs}
}

// IsArtifact tells a torchspeed artifact (with a manifest) from a plain TorchScript file.
func (l *Loaded) IsArtifact() bool { return l.Model.Manifest != nil && l.Model.Manifest.Format > 0 }

// LoadModel loads a plain TorchScript file or a torchspeed artifact (its load-time passes
// re-applied, its quantized engine set) and times the load. It leaves the thread count alone:
// the caller sets it. An artifact's warnings (libtorch version drift, no digest) go to warn:
// give it stderr even when progress is quiet, since they change what the figures mean.
func LoadModel(s ModelSpec, warn io.Writer) (*Loaded, error) {
	start := time.Now()
	m, err := torchspeed.Load(s.Path, torchspeed.LoadOptions{KeepThreads: true, Method: s.Method, ResetMethod: s.ResetMethod})
	if err != nil {
		return nil, fmt.Errorf("bench: load %q: %w", s.Path, err)
	}
	l := &Loaded{Spec: s, Model: m}
	if l.IsArtifact() {
		// An artifact: its warnings (libtorch version drift) matter. A
		// plain model's only warning is that it is one.
		for _, w := range m.Warnings {
			fmt.Fprintf(warn, "bench: %s: %s\n", s.Name, w)
		}
	}
	l.LoadTime = time.Since(start)
	return l, nil
}

// RunStreams measures one throughput configuration of l: streams goroutines on locked threads,
// each with threads intra-op threads and its own inputs (from ins, seeded seed+stream number;
// batch > 0 replaces dimension 0), sharing the module (its forward is safe from many threads).
// The result's Batch is batch, or else dimension 0 of the first input.
func RunStreams(l *Loaded, ins []InputSpec, batch, threads, streams int, o bench.Options, seed uint64) (*bench.ThroughputResult, error) {
	var mu sync.Mutex
	var made [][]*torch.Tensor
	defer func() {
		for _, ts := range made {
			CloseTensors(ts)
		}
	}()
	factory := func(s int) (bench.Target, error) {
		// On the stream's own locked thread: the thread count applies to
		// this thread's OpenMP pool.
		if err := torch.SetNumThreads(threads); err != nil {
			return nil, err
		}
		inputs, err := MakeInputs(ins, batch, seed+uint64(s))
		if err != nil {
			return nil, err
		}
		mu.Lock()
		made = append(made, inputs)
		mu.Unlock()
		return l.Target(inputs), nil
	}
	if batch == 0 && len(ins) > 0 && len(ins[0].Shape) > 0 {
		batch = int(ins[0].Shape[0])
	}
	r, err := bench.Throughput(l.Spec.Name, factory, bench.ThroughputOptions{Options: o, Streams: streams, Batch: batch})
	if err != nil {
		return nil, err
	}
	r.Threads = threads
	return r, nil
}
