package calib

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/npy"
)

// column is where one model input's samples come from: one stacked N x ... array, or
// one file per sample.
type column struct {
	origin string     // file, member or directory, for messages
	arr    *npy.Array // stacked: the whole array
	files  []string   // per sample: the files, sorted
	read   func(path string) (*npy.Array, error)
}

func (c *column) count() int {
	if c.arr != nil {
		return int(c.arr.Shape[0])
	}
	return len(c.files)
}

func stacked(origin string, a *npy.Array) (*column, error) {
	if len(a.Shape) == 0 {
		return nil, fmt.Errorf("calib: %s is a scalar; save an array whose first dimension is the sample count", origin)
	}
	return &column{origin: origin, arr: a}, nil
}

// mismatch builds the error for data that do not fit an input.
func mismatch(origin string, shape []int64, dtype string, in input, perSample bool) error {
	what := "an N x ... array, first dimension = samples,"
	if perSample {
		what = "one sample per file,"
	}
	return fmt.Errorf("calib: %s holds %s %s, but %s expects %s (%s); save it with shape %s and dtype %s",
		origin, npy.ShapeString(shape), dtype, in.label(), in.expect(), what, in.numpyShape(), in.dtype)
}

// materialize checks the selected samples of c against in and returns them stacked as
// an [len(idx), ...] array, with a name per sample.
func (ld *loader) materialize(c *column, in input, idx []int, done func()) (*npy.Array, []string, error) {
	names := make([]string, len(idx))
	if c.arr != nil {
		a := c.arr
		if a.DType != in.dtype || !in.matches(a.Shape[1:]) {
			return nil, nil, mismatch(c.origin, a.Shape, a.DType, in, false)
		}
		sn := int(sampleNumel(a.Shape))
		if err := ld.reserve(int64(len(idx))*int64(sn)*int64(npy.ItemSize(a.DType)), c.origin); err != nil {
			return nil, nil, err
		}
		out := npy.MakeData(a.DType, len(idx)*sn)
		for k, i := range idx {
			src := sliceOf(a.Data, i*sn, (i+1)*sn)
			if j := npy.FirstNonFinite(src); j >= 0 {
				return nil, nil, fmt.Errorf("calib: %s: sample %d has %s at element %d; calibration data must be finite", c.origin, i, nonFiniteName(src, j), j)
			}
			copyAt(out, k*sn, src)
			names[k] = fmt.Sprintf("%s[%d]", c.origin, i)
			done()
		}
		shape := append([]int64{int64(len(idx))}, a.Shape[1:]...)
		return &npy.Array{Shape: shape, DType: a.DType, Data: out}, names, nil
	}

	var out any
	var sample []int64
	sn := 0
	for k, i := range idx {
		f := c.files[i]
		a, err := c.read(f)
		if err != nil {
			return nil, nil, err
		}
		shape := a.Shape
		// A sample saved with its batch dimension (1 x ...) is accepted as is.
		if len(shape) == len(in.sample)+1 && len(shape) > 0 && shape[0] == 1 {
			shape = shape[1:]
		}
		if a.DType != in.dtype || !in.matches(shape) {
			return nil, nil, mismatch(f, a.Shape, a.DType, in, true)
		}
		if sample == nil {
			sample = slices.Clone(shape)
			sn = int(a.Numel())
			if err := ld.reserve(int64(len(idx))*int64(sn)*int64(npy.ItemSize(a.DType)), c.origin); err != nil {
				return nil, nil, err
			}
			out = npy.MakeData(a.DType, len(idx)*sn)
		} else if !slices.Equal(sample, shape) {
			return nil, nil, fmt.Errorf("calib: %s holds a %s sample but %s holds %s; samples must share one shape to be batched (pad them to one length)",
				f, npy.ShapeString(shape), c.files[idx[0]], npy.ShapeString(sample))
		}
		if j := npy.FirstNonFinite(a.Data); j >= 0 {
			return nil, nil, fmt.Errorf("calib: %s (sample %d) has %s at element %d; calibration data must be finite", f, i, nonFiniteName(a.Data, j), j)
		}
		copyAt(out, k*sn, a.Data)
		names[k] = f
		done()
	}
	shape := append([]int64{int64(len(idx))}, sample...)
	return &npy.Array{Shape: shape, DType: in.dtype, Data: out}, names, nil
}

// assemble turns one column per input (plus optional labels over all samples) into the
// loaded data set: it checks that the columns agree on the sample count, picks the
// samples within the limit and checks each of them.
func (ld *loader) assemble(cols []*column, labels []int64, labelOrigin, desc string) (*loaded, error) {
	n := cols[0].count()
	for _, c := range cols[1:] {
		if c.count() != n {
			return nil, fmt.Errorf("calib: %s has %d samples but %s has %d; every model input needs the same number of samples",
				cols[0].origin, n, c.origin, c.count())
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("calib: %s holds no samples", cols[0].origin)
	}
	if labels != nil && len(labels) != n {
		return nil, fmt.Errorf("calib: labels %s has %d entries but the data have %d samples", labelOrigin, len(labels), n)
	}
	idx := ld.pick(n)
	total := len(idx) * len(cols)
	done := 0
	tick := func() {
		done++
		ld.progress(done, total)
	}
	l := &loaded{desc: desc}
	for i, c := range cols {
		a, names, err := ld.materialize(c, ld.ins[i], idx, tick)
		if err != nil {
			return nil, err
		}
		l.cols = append(l.cols, a)
		if i == 0 {
			l.names = names
		}
	}
	if labels != nil {
		l.labels = make([]int64, len(idx))
		for k, i := range idx {
			l.labels[k] = labels[i]
		}
	}
	return l, nil
}

// loadNPY handles Kind "npy".
func (ld *loader) loadNPY() (*loaded, error) {
	src := ld.src
	var isDir bool
	if src.Path != "" {
		st, err := os.Stat(src.Path)
		if err != nil {
			return nil, fmt.Errorf("calib: data path: %w", err)
		}
		isDir = st.IsDir()
	}
	var paths []string
	switch {
	case len(src.Inputs) > 0:
		if src.Path != "" && !isDir {
			return nil, fmt.Errorf("calib: path %q must be a directory (or empty) when inputs lists the files", src.Path)
		}
		if len(src.Inputs) != len(ld.ins) {
			return nil, fmt.Errorf("calib: inputs lists %d entries but the model has %d inputs (%s)", len(src.Inputs), len(ld.ins), inputNames(ld.ins))
		}
		for _, p := range src.Inputs {
			paths = append(paths, ld.resolvePath(p))
		}
	case !isDir:
		if len(ld.ins) != 1 {
			return nil, fmt.Errorf("calib: %s is one array but the model has %d inputs (%s); put <input>.npy files in a directory, or list one file per input in inputs",
				src.Path, len(ld.ins), inputNames(ld.ins))
		}
		paths = []string{src.Path}
	default:
		// <name>.npy or <name>/ for every input; else, for one input, the directory itself
		// holds one .npy per sample.
		for _, in := range ld.ins {
			for _, p := range []string{filepath.Join(src.Path, in.name+".npy"), filepath.Join(src.Path, in.name)} {
				if _, err := os.Stat(p); err == nil && in.name != "" {
					paths = append(paths, p)
					break
				}
			}
		}
		if len(paths) != len(ld.ins) {
			if len(ld.ins) != 1 {
				return nil, fmt.Errorf("calib: %s: the model has inputs %s; put <input>.npy (N x ...) or <input>/ (one .npy per sample) for each of them there, or list them in inputs",
					src.Path, inputNames(ld.ins))
			}
			paths = []string{src.Path}
		}
	}

	cols := make([]*column, len(paths))
	for i, p := range paths {
		c, err := npyColumn(p)
		if err != nil {
			return nil, err
		}
		cols[i] = c
	}
	var labels []int64
	if src.Labels != "" {
		var err error
		if labels, err = readLabelsNPY(ld.resolvePath(src.Labels)); err != nil {
			return nil, err
		}
	}
	desc := fmt.Sprintf(".npy data from %s", strings.Join(paths, ", "))
	return ld.assemble(cols, labels, src.Labels, desc)
}

// npyColumn opens a stacked .npy file or a directory with one .npy per sample.
func npyColumn(p string) (*column, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	if !st.IsDir() {
		a, err := npy.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("calib: %w", err)
		}
		return stacked(p, a)
	}
	files, err := listFiles(p, ".npy")
	if err != nil {
		return nil, err
	}
	return &column{origin: p, files: files, read: func(f string) (*npy.Array, error) {
		a, err := npy.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("calib: %w", err)
		}
		return a, nil
	}}, nil
}

// listFiles returns the files in dir with extension ext, sorted by name; an empty
// directory is an error.
func listFiles(dir, ext string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	var files []string
	others := 0
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if strings.EqualFold(filepath.Ext(e.Name()), ext) {
			files = append(files, filepath.Join(dir, e.Name()))
		} else {
			others++
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("calib: directory %s holds no %s files (%d other files); put one %s per sample there", dir, ext, others, ext)
	}
	return files, nil // os.ReadDir sorts by name
}

// loadNPZ handles Kind "npz": one archive with an N x ... member per input, or a
// directory with one archive per sample.
func (ld *loader) loadNPZ() (*loaded, error) {
	src := ld.src
	st, err := os.Stat(src.Path)
	if err != nil {
		return nil, fmt.Errorf("calib: data path: %w", err)
	}
	labelFile := strings.EqualFold(filepath.Ext(src.Labels), ".npy")
	if !st.IsDir() {
		arrays, order, err := npy.ReadNPZ(src.Path)
		if err != nil {
			return nil, fmt.Errorf("calib: %w", err)
		}
		labelMember := ""
		if !labelFile {
			labelMember = src.Labels
		}
		members, lm, err := ld.chooseMembers(src.Path, order, labelMember)
		if err != nil {
			return nil, err
		}
		cols := make([]*column, len(members))
		for i, m := range members {
			if cols[i], err = stacked(fmt.Sprintf("%s member %q", src.Path, m), arrays[m]); err != nil {
				return nil, err
			}
		}
		var labels []int64
		labelOrigin := ""
		switch {
		case labelFile:
			labelOrigin = src.Labels
			labels, err = readLabelsNPY(ld.resolvePath(src.Labels))
		case lm != "":
			labelOrigin = fmt.Sprintf("%s member %q", src.Path, lm)
			labels, err = labelsFrom(labelOrigin, arrays[lm])
		}
		if err != nil {
			return nil, err
		}
		return ld.assemble(cols, labels, labelOrigin, fmt.Sprintf(".npz data from %s (%s)", src.Path, strings.Join(members, ", ")))
	}

	// One archive per sample: members are chosen from the first archive and every other
	// archive must hold the same ones.
	files, err := listFiles(src.Path, ".npz")
	if err != nil {
		return nil, err
	}
	_, order, err := npy.ReadNPZ(files[0])
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	labelMember := ""
	if !labelFile {
		labelMember = src.Labels
	}
	members, lm, err := ld.chooseMembers(files[0], order, labelMember)
	if err != nil {
		return nil, err
	}
	cols := make([]*column, len(members))
	for i, m := range members {
		cols[i] = &column{origin: src.Path, files: files, read: npzMemberReader(m)}
	}
	var labels []int64
	labelOrigin := src.Labels
	switch {
	case labelFile:
		labels, err = readLabelsNPY(ld.resolvePath(src.Labels))
	case lm != "":
		labelOrigin = fmt.Sprintf("member %q of the files in %s", lm, src.Path)
		labels, err = perSampleLabels(files, lm)
	}
	if err != nil {
		return nil, err
	}
	return ld.assemble(cols, labels, labelOrigin, fmt.Sprintf(".npz samples from %s (%s)", src.Path, strings.Join(members, ", ")))
}

func npzMemberReader(member string) func(string) (*npy.Array, error) {
	return func(f string) (*npy.Array, error) {
		arrays, order, err := npy.ReadNPZ(f)
		if err != nil {
			return nil, fmt.Errorf("calib: %w", err)
		}
		a, ok := arrays[member]
		if !ok {
			return nil, fmt.Errorf("calib: %s has no member %q (it has %s); every sample file needs the same members", f, member, strings.Join(order, ", "))
		}
		return a, nil
	}
}

// chooseMembers picks the npz member for each model input: the names in inputs, else
// the members named like the inputs, else the members in archive order. It also
// returns the labels member ("" if none).
func (ld *loader) chooseMembers(path string, order []string, labelMember string) ([]string, string, error) {
	has := func(m string) bool { return slices.Contains(order, m) }
	if labelMember != "" && !has(labelMember) {
		return nil, "", fmt.Errorf("calib: %s has no labels member %q (it has %s)", path, labelMember, strings.Join(order, ", "))
	}
	if labelMember == "" && has("labels") {
		labelMember = "labels"
	}
	if len(ld.src.Inputs) > 0 {
		if len(ld.src.Inputs) != len(ld.ins) {
			return nil, "", fmt.Errorf("calib: inputs lists %d members but the model has %d inputs (%s)", len(ld.src.Inputs), len(ld.ins), inputNames(ld.ins))
		}
		for _, m := range ld.src.Inputs {
			if !has(m) {
				return nil, "", fmt.Errorf("calib: %s has no member %q (it has %s); fix inputs", path, m, strings.Join(order, ", "))
			}
		}
		return ld.src.Inputs, labelMember, nil
	}
	byName := make([]string, 0, len(ld.ins))
	for _, in := range ld.ins {
		if in.name != "" && has(in.name) {
			byName = append(byName, in.name)
		}
	}
	if len(byName) == len(ld.ins) {
		return byName, labelMember, nil
	}
	var rest []string
	for _, m := range order {
		if m != labelMember {
			rest = append(rest, m)
		}
	}
	if len(rest) == len(ld.ins) {
		return rest, labelMember, nil
	}
	return nil, "", fmt.Errorf("calib: %s has members %s but the model has inputs %s; name the members after the inputs, or list one member per input in inputs",
		path, strings.Join(order, ", "), inputNames(ld.ins))
}
