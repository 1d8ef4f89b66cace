package validate

import (
	"fmt"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/calib"
	"github.com/torchspeed/torchspeed/pkg/npy"
)

// arrays serves in-memory arrays (dimension 0 = sample) in batches.
type arrays struct {
	cols   []*npy.Array
	labels []int64
	names  []string
	batch  int
	n      int
}

// FromArrays serves whole-set arrays, one per model input with the samples along dimension 0,
// in batches of batchSize (the last may be smaller). labels (one per sample) may be nil. names
// label the inputs in error messages (nil: "input 0", ...). The arrays are checked: same
// sample count, supported dtypes, no NaN or Inf.
func FromArrays(cols []*npy.Array, labels []int64, names []string, batchSize int) (Batches, error) {
	if len(cols) == 0 {
		return nil, fmt.Errorf("data: no input arrays")
	}
	if batchSize < 1 {
		return nil, fmt.Errorf("data: batch size %d: use 1 or more", batchSize)
	}
	a := &arrays{cols: cols, labels: labels, names: names, batch: batchSize}
	for k, c := range cols {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("data: %s: %w", a.inputName(k), err)
		}
		if len(c.Shape) == 0 {
			return nil, fmt.Errorf("data: %s is a scalar; it needs the samples along dimension 0", a.inputName(k))
		}
		if k == 0 {
			a.n = int(c.Shape[0])
		} else if int(c.Shape[0]) != a.n {
			return nil, fmt.Errorf("data: %s has %d samples, %s has %d", a.inputName(k), c.Shape[0], a.inputName(0), a.n)
		}
		if i := npy.FirstNonFinite(c.Data); i >= 0 {
			per := int(c.Numel() / c.Shape[0])
			return nil, fmt.Errorf("data: %s holds NaN or Inf (sample %d, element %d): clean the data before calibrating or validating", a.inputName(k), i/max(per, 1), i%max(per, 1))
		}
	}
	if labels != nil && len(labels) != a.n {
		return nil, fmt.Errorf("data: %d labels for %d samples", len(labels), a.n)
	}
	return a, nil
}

func (a *arrays) inputName(k int) string {
	if k < len(a.names) && a.names[k] != "" {
		return fmt.Sprintf("input %q", a.names[k])
	}
	return fmt.Sprintf("input %d", k)
}

func (a *arrays) Len() int { return (a.n + a.batch - 1) / a.batch }

func (a *arrays) Batch(i int) (Batch, error) {
	if i < 0 || i >= a.Len() {
		return Batch{}, fmt.Errorf("batch %d out of range (%d batches)", i, a.Len())
	}
	lo, hi := i*a.batch, min((i+1)*a.batch, a.n)
	b := Batch{Owned: true}
	for k, c := range a.cols {
		per := int(c.Numel() / c.Shape[0])
		t, err := tensorOf(c, lo*per, hi*per, append([]int64{int64(hi - lo)}, c.Shape[1:]...))
		if err != nil {
			b.Close()
			return Batch{}, fmt.Errorf("%s, samples %d-%d: %w", a.inputName(k), lo, hi-1, err)
		}
		b.Inputs = append(b.Inputs, t)
	}
	if a.labels != nil {
		b.Labels = a.labels[lo:hi]
	}
	return b, nil
}

func tensorOf(c *npy.Array, lo, hi int, shape []int64) (*torch.Tensor, error) {
	d, err := npy.SliceData(c.Data, lo, hi)
	if err != nil {
		return nil, err
	}
	return torch.NewTensorAny(d, shape)
}

// dataset adapts a calib.Dataset (already checked by calib.Open) to Batches.
type dataset struct{ d *calib.Dataset }

// FromDataset serves a calibration or validation data set loaded by calib.Open.
func FromDataset(d *calib.Dataset) Batches { return dataset{d} }

func (s dataset) Len() int { return s.d.NumBatches() }

func (s dataset) Batch(i int) (Batch, error) {
	cb, err := s.d.Batch(i)
	if err != nil {
		return Batch{}, err
	}
	b := Batch{Owned: true, Labels: cb.Labels}
	for k, a := range cb.Inputs {
		t, err := tensorOf(a, 0, int(a.Numel()), a.Shape)
		if err != nil {
			b.Close()
			return Batch{}, fmt.Errorf("batch %d (from %s), input %d: %w", i, s.d.SampleName(cb.Start), k, err)
		}
		b.Inputs = append(b.Inputs, t)
	}
	return b, nil
}
