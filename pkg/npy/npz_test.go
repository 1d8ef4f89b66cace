package npy

import (
	"archive/zip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestReadNPZGolden(t *testing.T) {
	for _, file := range []string{"stored.npz", "deflated.npz"} {
		t.Run(file, func(t *testing.T) {
			m, order, err := ReadNPZ(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(order, []string{"input", "tokens", "labels"}) {
				t.Fatalf("order %v", order)
			}
			in := m["input"]
			if in.DType != Float32 || !reflect.DeepEqual(in.Shape, []int64{4, 1, 2, 2}) || !reflect.DeepEqual(in.Data, want(Float32, 16)) {
				t.Errorf("input = %+v", in)
			}
			tok := m["tokens"]
			if tok.DType != Int64 || !reflect.DeepEqual(tok.Shape, []int64{4, 6}) || !reflect.DeepEqual(tok.Data, want(Int64, 24)) {
				t.Errorf("tokens = %+v", tok)
			}
			if l := m["labels"]; !reflect.DeepEqual(l.Data, []int64{0, 1, 2, 0}) {
				t.Errorf("labels = %+v", l)
			}
		})
	}
}

func TestNPZRoundTrip(t *testing.T) {
	dir := t.TempDir()
	names := []string{"x", "mask", "ids"}
	arrays := []*Array{
		FromFloat32([]int64{2, 2}, []float32{1, 2, 3, 4}),
		{Shape: []int64{3}, DType: Bool, Data: []bool{true, false, true}},
		FromInt64([]int64{1, 3}, []int64{101, 2023, 102}),
	}
	for _, write := range []func(string, []string, []*Array) error{WriteNPZ, WriteNPZCompressed} {
		path := filepath.Join(dir, "r.npz")
		if err := write(path, names, arrays); err != nil {
			t.Fatal(err)
		}
		m, order, err := ReadNPZ(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(order, names) {
			t.Errorf("order %v, want %v", order, names)
		}
		for i, n := range names {
			if !reflect.DeepEqual(m[n], arrays[i]) {
				t.Errorf("%s: got %+v, want %+v", n, m[n], arrays[i])
			}
		}
	}
}

func TestNPZErrors(t *testing.T) {
	dir := t.TempDir()
	notZip := filepath.Join(dir, "notzip.npz")
	os.WriteFile(notZip, []byte("hello"), 0o644)

	// An archive whose member is a truncated .npy.
	badMember := filepath.Join(dir, "badmember.npz")
	{
		f, _ := os.Create(badMember)
		zw := zip.NewWriter(f)
		w, _ := zw.Create("input.npy")
		w.Write(npyBytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10,), }\n", make([]byte, 8)))
		zw.Close()
		f.Close()
	}
	empty := filepath.Join(dir, "empty.npz")
	{
		f, _ := os.Create(empty)
		zip.NewWriter(f).Close()
		f.Close()
	}
	cases := []struct {
		path, want string
	}{
		{filepath.Join("testdata", "foreign.npz"), `member "readme.txt" is not a .npy array`},
		{notZip, "not a .npz (zip) archive"},
		{filepath.Join(dir, "missing.npz"), "no such file"},
		{badMember, `member "input.npy": header says 10 float32 = 40 bytes, file has 8`},
		{empty, "archive holds no arrays"},
	}
	for _, c := range cases {
		_, _, err := ReadNPZ(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("ReadNPZ(%s) error %v, want %q naming the file", c.path, err, c.want)
		}
	}

	bad := []struct {
		names  []string
		arrays []*Array
		want   string
	}{
		{[]string{"a"}, nil, "1 names for 0 arrays"},
		{[]string{"a", "a"}, []*Array{FromFloat32([]int64{1}, []float32{1}), FromFloat32([]int64{1}, []float32{1})}, `name "a" used twice`},
		{[]string{""}, []*Array{FromFloat32([]int64{1}, []float32{1})}, "empty name"},
		{[]string{"a"}, []*Array{FromFloat32([]int64{2}, []float32{1})}, `array "a": shape 2 needs 2 elements`},
	}
	for _, c := range bad {
		path := filepath.Join(dir, "out.npz")
		err := WriteNPZ(path, c.names, c.arrays)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("WriteNPZ(%v) error %v, want %q", c.names, err, c.want)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("WriteNPZ wrote %s despite the error", path)
		}
	}
}
