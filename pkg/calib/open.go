package calib

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/npy"
)

// Open reads and checks the data described by src for a model with the given inputs.
// Everything is validated here: a data set that does not fit the model, an empty
// folder, a corrupt image or file, or NaN/Inf values give an error naming the file and
// what to do, before anything else happens.
func Open(src Source, inputs []InputSpec) (*Dataset, error) {
	if err := src.Validate(); err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	ins, err := resolveInputs(inputs)
	if err != nil {
		return nil, err
	}
	kind := src.Kind
	if kind == "" {
		if kind, err = inferKind(src.Path); err != nil {
			return nil, err
		}
	}
	ld := &loader{src: src, ins: ins}
	var l *loaded
	switch kind {
	case KindNPY:
		l, err = ld.loadNPY()
	case KindNPZ:
		l, err = ld.loadNPZ()
	case KindImages:
		l, err = ld.loadImages()
	case KindRandom:
		l, err = ld.loadRandom()
	}
	if err != nil {
		return nil, err
	}
	n := int(l.cols[0].Shape[0])
	if n == 0 {
		return nil, fmt.Errorf("calib: %s holds no samples", l.desc)
	}
	d := &Dataset{
		cols: l.cols, labels: l.labels, classes: l.classes, names: l.names,
		n: n, batch: src.BatchSize, synthetic: l.synthetic, desc: l.desc,
	}
	if d.batch == 0 {
		d.batch = DefaultBatchSize
	}
	for i, c := range l.cols {
		d.inputs = append(d.inputs, InputSpec{Name: ins[i].name, Shape: append([]int64{-1}, c.Shape[1:]...), DType: c.DType})
	}
	return d, nil
}

// inferKind guesses the kind of data at path when the config does not say.
func inferKind(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("calib: data path: %w", err)
	}
	if !st.IsDir() {
		switch strings.ToLower(filepath.Ext(path)) {
		case ".npy":
			return KindNPY, nil
		case ".npz":
			return KindNPZ, nil
		}
		return "", fmt.Errorf("calib: cannot tell what kind of data %q is; use a .npy/.npz file or a directory, or set kind", path)
	}
	var npys, npzs, images int
	count := func(name string) {
		switch {
		case strings.EqualFold(filepath.Ext(name), ".npy"):
			npys++
		case strings.EqualFold(filepath.Ext(name), ".npz"):
			npzs++
		case isImage(name):
			images++
		}
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", fmt.Errorf("calib: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			count(e.Name())
			continue
		}
		// One level down: per-input .npy folders, or ImageFolder class folders.
		if sub, err := os.ReadDir(filepath.Join(path, e.Name())); err == nil {
			for _, s := range sub {
				count(s.Name())
			}
		}
	}
	switch {
	case npys > 0:
		return KindNPY, nil
	case npzs > 0:
		return KindNPZ, nil
	case images > 0:
		return KindImages, nil
	}
	return "", fmt.Errorf("calib: directory %s is empty: it holds no .npy, .npz, .jpg, .jpeg or .png files; put the calibration data there, or set kind", path)
}

// loaded is what a loader hands back to Open.
type loaded struct {
	cols      []*npy.Array
	labels    []int64
	classes   []string
	names     []string
	desc      string
	synthetic bool
}

// loader carries what every loading function needs.
type loader struct {
	src  Source
	ins  []input
	used int64 // bytes reserved so far
}

// pick returns the indices of the samples to use out of n: all of them, or, with a
// limit below n, limit indices spread evenly over the set (the first limit ones, in order,
// for a sequence: a stream replayed with gaps would not be the stream).
func (ld *loader) pick(n int) []int {
	k := n
	if ld.src.Limit > 0 && ld.src.Limit < n {
		k = ld.src.Limit
	}
	idx := make([]int, k)
	for i := range idx {
		idx[i] = int(int64(i) * int64(n) / int64(k))
		if ld.src.Sequence {
			idx[i] = i
		}
	}
	return idx
}

// reserve accounts for bytes of decoded tensors and refuses data sets that would
// exceed the memory budget, before the memory is allocated.
func (ld *loader) reserve(bytes int64, what string) error {
	limit := int64(ld.src.MaxMemoryMB)
	if limit == 0 {
		limit = DefaultMaxMemoryMB
	}
	ld.used += bytes
	if ld.used > limit<<20 {
		return fmt.Errorf("calib: %s: the data need %d MiB in memory, above max_memory_mb %d; lower limit or raise max_memory_mb", what, (ld.used+(1<<20)-1)>>20, limit)
	}
	return nil
}

// progress reports done of total to the configured callback, if any.
func (ld *loader) progress(done, total int) {
	if ld.src.Progress != nil {
		ld.src.Progress(done, total)
	}
}

// resolvePath interprets a relative Inputs or Labels entry relative to Path when Path
// is a directory.
func (ld *loader) resolvePath(p string) string {
	if filepath.IsAbs(p) || ld.src.Path == "" {
		return p
	}
	if st, err := os.Stat(ld.src.Path); err == nil && st.IsDir() {
		return filepath.Join(ld.src.Path, p)
	}
	return p
}

// input is a model input during loading: its per-sample shape, with -1 for sizes
// still to be taken from the data.
type input struct {
	index  int
	name   string
	dtype  string
	sample []int64
}

func (in input) label() string {
	if in.name != "" {
		return fmt.Sprintf("model input %q (#%d)", in.name, in.index)
	}
	return fmt.Sprintf("model input #%d", in.index)
}

// expect formats what the input wants: "Nx3x224x224 float32", "?" for free sizes.
func (in input) expect() string {
	parts := []string{"N"}
	for _, d := range in.sample {
		if d < 0 {
			parts = append(parts, "?")
		} else {
			parts = append(parts, fmt.Sprint(d))
		}
	}
	return strings.Join(parts, "x") + " " + in.dtype
}

// numpyShape formats the per-sample shape as the (N, ...) tuple to save.
func (in input) numpyShape() string {
	parts := []string{"N"}
	for _, d := range in.sample {
		if d < 0 {
			parts = append(parts, "?")
		} else {
			parts = append(parts, fmt.Sprint(d))
		}
	}
	if len(parts) == 1 {
		return "(N,)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// matches reports whether a per-sample shape fits the input.
func (in input) matches(sample []int64) bool {
	if len(sample) != len(in.sample) {
		return false
	}
	for i, d := range in.sample {
		if d >= 0 && d != sample[i] {
			return false
		}
	}
	return true
}

func resolveInputs(specs []InputSpec) ([]input, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("calib: the model has no inputs to feed")
	}
	out := make([]input, len(specs))
	for i, s := range specs {
		dt, err := normalizeDType(s.DType)
		if err != nil {
			return nil, fmt.Errorf("calib: model input %q (#%d): %v", s.Name, i, err)
		}
		if len(s.Shape) == 0 {
			return nil, fmt.Errorf("calib: model input %q (#%d) has an empty shape; give its shape with the batch dimension first, e.g. [1, 3, 224, 224]", s.Name, i)
		}
		sample := make([]int64, len(s.Shape)-1)
		for k, d := range s.Shape[1:] {
			if d <= 0 {
				d = -1
			}
			sample[k] = d
		}
		out[i] = input{index: i, name: s.Name, dtype: dt, sample: sample}
	}
	return out, nil
}

func inputNames(ins []input) string {
	names := make([]string, len(ins))
	for i, in := range ins {
		names[i] = fmt.Sprintf("%q", in.name)
	}
	return strings.Join(names, ", ")
}
