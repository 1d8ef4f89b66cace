package main

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/npy"
)

// streamTolerance is how far run's outputs may be from PyTorch's over a reference stream.
const streamTolerance = 1e-5

// rowsOf selects rows idx (along dimension 0) of a stacked array.
func rowsOf(t *testing.T, a *npy.Array, idx []int) *npy.Array {
	t.Helper()
	out := &npy.Array{Shape: append([]int64{int64(len(idx))}, a.Shape[1:]...), DType: a.DType}
	switch d := a.Data.(type) {
	case []float32:
		out.Data = pickRows(d, int(a.Shape[0]), idx)
	case []int64:
		out.Data = pickRows(d, int(a.Shape[0]), idx)
	default:
		t.Fatalf("rowsOf: %T", a.Data)
	}
	return out
}

func pickRows[T any](d []T, rows int, idx []int) []T {
	per := len(d) / rows
	var out []T
	for _, i := range idx {
		out = append(out, d[i*per:(i+1)*per]...)
	}
	return out
}

// streamRun replays a fixture's reference stream through `run --save`: calls that share their
// non-tensor arguments run as one sequence (seq: files of their rows, constants as int:/float:/
// bool:/str:/none), so a stateful stream, whose constants do not change, is one run from a
// reset state. extra are more flags for run. It returns the largest difference from PyTorch's
// outputs.
func streamRun(t *testing.T, f fixtures.Fixture, method string, extra ...string) float64 {
	s := f.Stream(t, method)
	groups := map[string][]int{}
	var order []string
	for i := 0; i < s.Calls; i++ {
		var key []string
		for _, a := range s.Args {
			switch {
			case len(a.Ints) > 0:
				key = append(key, a.Name+"=int:"+strconv.FormatInt(a.Ints[i], 10))
			case len(a.Floats) > 0:
				key = append(key, a.Name+"=float:"+strconv.FormatFloat(a.Floats[i], 'g', -1, 64))
			case len(a.Bools) > 0:
				key = append(key, a.Name+"=bool:"+strconv.FormatBool(a.Bools[i]))
			case len(a.Strs) > 0:
				key = append(key, a.Name+"=str:"+a.Strs[i])
			case a.Present != nil && !a.Present[i]:
				key = append(key, a.Name+"=none")
			}
		}
		k := strings.Join(key, "\x00")
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	if f.ResetMethod != "" && len(order) != 1 {
		t.Fatalf("%s: a stateful stream must replay as one sequence, its constants make %d", f.Name, len(order))
	}
	dir := t.TempDir()
	worst := 0.0
	for g, k := range order {
		idx := groups[k]
		var args []string
		if k != "" {
			for _, c := range strings.Split(k, "\x00") {
				args = append(args, "--input", c)
			}
		}
		seqFile := func(name string, spec fixtures.Tensor) string {
			p := filepath.Join(dir, fmt.Sprintf("g%d_%s.npy", g, name))
			if err := npy.WriteFile(p, rowsOf(t, f.Array(t, spec), idx)); err != nil {
				t.Fatal(err)
			}
			return "seq:" + p
		}
		for _, a := range s.Args {
			switch {
			case a.Tensor != nil && (a.Present == nil || a.Present[idx[0]]):
				args = append(args, "--input", a.Name+"="+seqFile(a.Name, *a.Tensor))
			case len(a.Tensors) > 0:
				var items []string
				for j, ts := range a.Tensors {
					items = append(items, seqFile(fmt.Sprintf("%s_%d", a.Name, j), ts))
				}
				args = append(args, "--input", a.Name+"="+strings.Join(items, ","))
			}
		}
		out := filepath.Join(dir, fmt.Sprintf("out%d.npz", g))
		args = append(append([]string{"-m", f.ModelPath(), "--method", method, "--save", out}, extra...), args...)
		// In this process (the command's code, without a process start per group).
		if stdout, stderr, code := inProcess(append([]string{"run"}, args...)...); code != 0 {
			t.Fatalf("%s.%s: run %v: exit %d\n%s%s", f.Name, method, args, code, stdout, stderr)
		}
		worst = max(worst, compareSaved(t, f, s, out, idx))
	}
	return worst
}

// inProcess runs `run` or `bench` in this process: stdout, stderr (with the error main would
// print) and the exit code main would return.
func inProcess(args ...string) (string, string, int) {
	c := newRunCmd(&ui{})
	if args[0] == "bench" {
		c = newBenchCmd(&ui{})
	}
	var stdout, stderr bytes.Buffer
	c.SetOut(&stdout)
	c.SetErr(&stderr)
	c.SetArgs(args[1:])
	c.SilenceUsage, c.SilenceErrors = true, true
	err := c.Execute()
	if err != nil {
		stderr.WriteString("torchspeed: " + err.Error() + "\n")
	}
	return stdout.String(), stderr.String(), exitcode.Of(err)
}

// compareSaved compares a --save file with the reference outputs of calls idx.
func compareSaved(t *testing.T, f fixtures.Fixture, s fixtures.Stream, path string, idx []int) float64 {
	got, names, err := npy.ReadNPZ(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(s.Outputs) {
		t.Fatalf("%s: saved %v, PyTorch gave %d outputs", f.Name, names, len(s.Outputs))
	}
	worst := 0.0
	for _, o := range s.Outputs {
		key := saveKey(o.Name)
		g, ok := got[key]
		if !ok {
			t.Fatalf("%s: %s not saved (keys %v)", f.Name, key, names)
		}
		want := rowsOf(t, f.Array(t, o), idx)
		if npy.ShapeString(g.Shape) != npy.ShapeString(want.Shape) {
			t.Fatalf("%s: %s has shape %v, want %v (stacked per call)", f.Name, key, g.Shape, want.Shape)
		}
		gd, _ := g.Float32s()
		wd, _ := want.Float32s()
		for i := range gd {
			d := math.Abs(float64(gd[i]) - float64(wd[i]))
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			worst = max(worst, d)
		}
	}
	return worst
}
