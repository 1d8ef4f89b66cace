package calib

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestRandom(t *testing.T) {
	specs := []InputSpec{
		{Name: "x", Shape: []int64{-1, 3, 4}},
		{Name: "ids", Shape: []int64{-1, 5}, DType: "int64"},
		{Name: "mask", Shape: []int64{-1, 5}, DType: "bool"},
		{Name: "px", Shape: []int64{-1, 2}, DType: "uint8"},
	}
	open := func(o RandomOptions, limit int) *Dataset {
		t.Helper()
		d, err := Open(Source{Kind: "random", Random: o, Limit: limit, BatchSize: 16}, specs)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a := open(RandomOptions{Seed: 7, Low: 3, High: 10}, 0)
	if !a.Synthetic() || a.Len() != DefaultRandomSamples || a.HasLabels() {
		t.Fatalf("Synthetic %v Len %d HasLabels %v", a.Synthetic(), a.Len(), a.HasLabels())
	}
	if !strings.Contains(a.Describe(), "unverified") {
		t.Errorf("Describe() = %q lacks the unverified warning", a.Describe())
	}
	b := open(RandomOptions{Seed: 7, Low: 3, High: 10}, 0)
	c := open(RandomOptions{Seed: 8, Low: 3, High: 10}, 0)
	if !reflect.DeepEqual(a.cols, b.cols) {
		t.Error("same seed gave different data")
	}
	if reflect.DeepEqual(a.cols[0].Data, c.cols[0].Data) || reflect.DeepEqual(a.cols[1].Data, c.cols[1].Data) {
		t.Error("different seeds gave the same data")
	}

	// Normal floats: mean ~0, std ~1 over 32*12 values.
	var sum, sq float64
	xs := a.cols[0].Data.([]float32)
	for _, v := range xs {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	mean := sum / float64(len(xs))
	std := math.Sqrt(sq/float64(len(xs)) - mean*mean)
	if math.Abs(mean) > 0.2 || math.Abs(std-1) > 0.2 {
		t.Errorf("normal data mean %.3f std %.3f", mean, std)
	}
	seen := map[int64]bool{}
	for _, v := range a.cols[1].Data.([]int64) {
		if v < 3 || v >= 10 {
			t.Fatalf("int %d outside [3, 10)", v)
		}
		seen[v] = true
	}
	if len(seen) != 7 {
		t.Errorf("ints cover %d of the 7 values in [3, 10)", len(seen))
	}
	trues := 0
	for _, v := range a.cols[2].Data.([]bool) {
		if v {
			trues++
		}
	}
	if trues == 0 || trues == 160 {
		t.Errorf("bools all equal (%d of 160 true)", trues)
	}

	u := open(RandomOptions{Dist: "uniform", Low: -2, High: -1, PerInput: map[string]RandomRange{
		"ids": {Low: 0, High: 30522}, "px": {Low: 0, High: 256},
	}}, 5)
	if u.Len() != 5 {
		t.Errorf("limit: Len %d", u.Len())
	}
	for _, v := range u.cols[0].Data.([]float32) {
		if v < -2 || v >= -1 {
			t.Fatalf("uniform value %v outside [-2, -1)", v)
		}
	}
	for _, v := range u.cols[1].Data.([]int64) {
		if v < 0 || v >= 30522 {
			t.Fatalf("per-input int %d outside [0, 30522)", v)
		}
	}
	if want := "ids: integers in [0, 30522)"; !strings.Contains(u.Describe(), want) {
		t.Errorf("Describe() = %q lacks %q", u.Describe(), want)
	}
}

func TestRandomErrors(t *testing.T) {
	cases := []struct {
		name  string
		o     RandomOptions
		specs []InputSpec
		want  string
	}{
		{"int without range", RandomOptions{}, []InputSpec{{Name: "ids", Shape: []int64{1, 8}, DType: "int64"}}, `model input "ids" (#0) is int64: random data for it need random.low and random.high`},
		{"open size", RandomOptions{}, []InputSpec{{Name: "x", Shape: []int64{1, -1}}}, "give the input's full shape"},
		{"range too wide for uint8", RandomOptions{Low: 0, High: 300}, []InputSpec{{Name: "x", Shape: []int64{1, 2}, DType: "uint8"}}, "does not fit uint8"},
		{"no integer in range", RandomOptions{Low: 0.2, High: 0.7}, []InputSpec{{Name: "x", Shape: []int64{1, 2}, DType: "int32"}}, "leave no integer"},
		{"bad dist", RandomOptions{Dist: "cauchy"}, []InputSpec{{Name: "x", Shape: []int64{1, 2}}}, `random.dist "cauchy"`},
		{"low above high", RandomOptions{Low: 2, High: 1}, []InputSpec{{Name: "x", Shape: []int64{1, 2}}}, "random.low 2 is above random.high 1"},
		{"per-input unknown", RandomOptions{PerInput: map[string]RandomRange{"y": {High: 2}}}, []InputSpec{{Name: "x", Shape: []int64{1, 2}}}, `random.per_input names "y", which is not a model input`},
		{"per-input int without range", RandomOptions{Low: 0, High: 5, PerInput: map[string]RandomRange{"ids": {Dist: "uniform"}}}, []InputSpec{{Name: "ids", Shape: []int64{1, 2}, DType: "int64"}}, "random.per_input.ids.low"},
	}
	for _, c := range cases {
		_, err := Open(Source{Kind: "random", Random: c.o}, c.specs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}
