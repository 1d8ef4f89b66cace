package calib

import (
	"fmt"
	"io"
	"iter"
	"sync"

	"github.com/torchspeed/torchspeed/pkg/npy"
)

// Batch is a group of consecutive samples, one array per model input.
type Batch struct {
	// Start is the index of the batch's first sample in the data set.
	Start int
	// Inputs holds one array per model input, in the model's input order, each of shape
	// [batch, ...]. The arrays share the data set's memory: do not modify them.
	Inputs []*npy.Array
	// Labels holds one class label per sample, or nil when the data set has none.
	Labels []int64
}

// Size returns the number of samples in the batch.
func (b Batch) Size() int {
	if len(b.Inputs) == 0 || len(b.Inputs[0].Shape) == 0 {
		return 0
	}
	return int(b.Inputs[0].Shape[0])
}

// Dataset is a checked, in-memory set of samples for a model's inputs. Its methods are
// safe for concurrent use; Next and Reset share one cursor, Batch and Batches do not
// use it.
type Dataset struct {
	inputs    []InputSpec  // resolved: batch dimension -1, other dimensions concrete
	cols      []*npy.Array // one per input, shape [n, ...]
	labels    []int64
	classes   []string
	names     []string // per sample: where it came from
	n, batch  int
	synthetic bool
	desc      string

	mu  sync.Mutex
	pos int
}

// Len returns the number of samples.
func (d *Dataset) Len() int { return d.n }

// BatchSize returns the number of samples per batch (the last batch may hold fewer).
func (d *Dataset) BatchSize() int { return d.batch }

// NumBatches returns the number of batches.
func (d *Dataset) NumBatches() int { return (d.n + d.batch - 1) / d.batch }

// Synthetic reports whether the data are random rather than real samples, in which
// case accuracy figures computed on them say nothing about the model's real accuracy.
func (d *Dataset) Synthetic() bool { return d.synthetic }

// HasLabels reports whether every sample has a class label.
func (d *Dataset) HasLabels() bool { return d.labels != nil }

// Labels returns the class label of every sample (nil if there are none). Do not
// modify the result.
func (d *Dataset) Labels() []int64 { return d.labels }

// Classes returns the class names of an ImageFolder layout, indexed by label, or nil.
func (d *Dataset) Classes() []string { return d.classes }

// Inputs returns the model inputs as the data fill them: dimension 0 (batch) is -1,
// the others are the sizes found in the data.
func (d *Dataset) Inputs() []InputSpec {
	out := make([]InputSpec, len(d.inputs))
	for i, in := range d.inputs {
		out[i] = InputSpec{Name: in.Name, Shape: append([]int64{}, in.Shape...), DType: in.DType}
	}
	return out
}

// SampleName says where sample i came from ("val/cat/1.jpg", "x.npy[17]"), for
// reports that point at individual samples.
func (d *Dataset) SampleName(i int) string {
	if i < 0 || i >= len(d.names) {
		return fmt.Sprintf("sample %d", i)
	}
	return d.names[i]
}

// Describe returns a one-line description for reports, e.g. "200 samples, images from
// val/ (ImageFolder, 10 classes), batch 8".
func (d *Dataset) Describe() string {
	s := fmt.Sprintf("%d samples, %s, batch %d", d.n, d.desc, d.batch)
	if d.synthetic {
		s += " (random data: results are unverified)"
	}
	return s
}

// Batch returns batch i (0 <= i < NumBatches()).
func (d *Dataset) Batch(i int) (Batch, error) {
	if i < 0 || i >= d.NumBatches() {
		return Batch{}, fmt.Errorf("batch %d out of range: the data set has %d batches", i, d.NumBatches())
	}
	lo := i * d.batch
	hi := min(lo+d.batch, d.n)
	b := Batch{Start: lo, Inputs: make([]*npy.Array, len(d.cols))}
	for k, c := range d.cols {
		sn := int(sampleNumel(c.Shape))
		shape := append([]int64{int64(hi - lo)}, c.Shape[1:]...)
		b.Inputs[k] = &npy.Array{Shape: shape, DType: c.DType, Data: sliceOf(c.Data, lo*sn, hi*sn)}
	}
	if d.labels != nil {
		b.Labels = d.labels[lo:hi]
	}
	return b, nil
}

// Next returns the next batch, or io.EOF after the last one. Reset starts over.
func (d *Dataset) Next() (Batch, error) {
	d.mu.Lock()
	i := d.pos
	if i >= d.NumBatches() {
		d.mu.Unlock()
		return Batch{}, io.EOF
	}
	d.pos++
	d.mu.Unlock()
	return d.Batch(i)
}

// Reset makes Next start again from the first batch.
func (d *Dataset) Reset() {
	d.mu.Lock()
	d.pos = 0
	d.mu.Unlock()
}

// Batches iterates over all batches in order, independently of Next.
func (d *Dataset) Batches() iter.Seq[Batch] {
	return func(yield func(Batch) bool) {
		for i := range d.NumBatches() {
			b, _ := d.Batch(i) // i is always in range
			if !yield(b) {
				return
			}
		}
	}
}
