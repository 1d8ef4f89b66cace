package calib

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/npy"
)

// readLabelsNPY reads N integer labels from a .npy file of shape (N,) or (N, 1).
func readLabelsNPY(path string) ([]int64, error) {
	a, err := npy.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("calib: labels: %w", err)
	}
	return labelsFrom(path, a)
}

func labelsFrom(origin string, a *npy.Array) ([]int64, error) {
	if len(a.Shape) != 1 && !(len(a.Shape) == 2 && a.Shape[1] == 1) {
		return nil, fmt.Errorf("calib: labels %s has shape %s; want one integer class per sample, shape (N,)", origin, npy.ShapeString(a.Shape))
	}
	v, err := a.Int64s()
	if err != nil {
		return nil, fmt.Errorf("calib: labels %s: %v", origin, err)
	}
	for i, l := range v {
		if l < 0 {
			return nil, fmt.Errorf("calib: labels %s: entry %d is %d; class labels must be >= 0", origin, i, l)
		}
	}
	return v, nil
}

// perSampleLabels reads one label (a scalar or a one-element array) from each archive.
func perSampleLabels(files []string, member string) ([]int64, error) {
	labels := make([]int64, len(files))
	read := npzMemberReader(member)
	for i, f := range files {
		a, err := read(f)
		if err != nil {
			return nil, err
		}
		v, err := a.Int64s()
		if err != nil || len(v) != 1 || v[0] < 0 {
			return nil, fmt.Errorf("calib: %s member %q must hold one class label >= 0 (got %s %s)", f, member, npy.ShapeString(a.Shape), a.DType)
		}
		labels[i] = v[0]
	}
	return labels, nil
}

// readImageLabels reads labels for the listed images from a .npy (one per image, in
// listing order) or a text file of "<file> <label>" lines (file relative to the image
// folder, or its base name when that is unique; comma or whitespace separated; "#"
// starts a comment).
func readImageLabels(path string, files []imageFile) ([]int64, error) {
	if strings.EqualFold(filepath.Ext(path), ".npy") {
		l, err := readLabelsNPY(path)
		if err != nil {
			return nil, err
		}
		if len(l) != len(files) {
			return nil, fmt.Errorf("calib: labels %s has %d entries but the folder has %d images", path, len(l), len(files))
		}
		return l, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("calib: labels: %w", err)
	}
	defer f.Close()
	byName := map[string]int64{}
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = strings.TrimSpace(text[:i])
		}
		if text == "" {
			continue
		}
		fields := strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
		if len(fields) != 2 {
			return nil, fmt.Errorf("calib: labels %s line %d: %q; want \"<file> <label>\"", path, line, text)
		}
		v, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("calib: labels %s line %d: label %q is not an integer >= 0", path, line, fields[1])
		}
		byName[filepath.ToSlash(fields[0])] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("calib: labels %s: %w", path, err)
	}
	base := map[string]int{}
	for _, f := range files {
		base[filepath.Base(f.path)]++
	}
	labels := make([]int64, len(files))
	for i, f := range files {
		v, ok := byName[f.rel]
		if !ok && base[filepath.Base(f.path)] == 1 {
			v, ok = byName[filepath.Base(f.path)]
		}
		if !ok {
			return nil, fmt.Errorf("calib: labels %s has no line for image %s; add \"%s <label>\"", path, f.path, f.rel)
		}
		labels[i] = v
	}
	return labels, nil
}
