package npy

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"fmt"
	"io"
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

// An .npz member is inflated only when what it declares is bounded: a deflated .npy of zeros
// (kilobytes that inflate to 128 MiB here, 1 GiB in the CLI's matrix) is refused as a zip bomb
// from the zip directory, a member that declares more than deflate can produce is corrupt, and a
// header that claims more than its member holds is truncated, all before the array is allocated.
func TestHostileNPZBounds(t *testing.T) {
	dir := t.TempDir()
	header := func(n int64) []byte {
		var b bytes.Buffer
		if err := Write(&b, &Array{Shape: []int64{0}, DType: Float32, Data: []float32{}}); err != nil {
			t.Fatal(err)
		}
		return bytes.Replace(b.Bytes(), []byte("(0,)"), []byte(fmt.Sprintf("(%d,)", n)), 1)
	}
	write := func(name string, add func(zw *zip.Writer)) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		zw := zip.NewWriter(f)
		add(zw)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	zeros := func(w io.Writer, n int64) {
		buf := make([]byte, 1<<20)
		for ; n > 0; n -= int64(len(buf)) {
			if _, err := w.Write(buf[:min(n, int64(len(buf)))]); err != nil {
				t.Fatal(err)
			}
		}
	}
	const n = 32 << 20 // float32s: 128 MiB
	bomb := write("bomb.npz", func(zw *zip.Writer) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "x.npy", Method: zip.Deflate})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(header(n))
		zeros(w, 4*n)
	})
	// The same member with its directory entry claiming 1 TiB from a few compressed bytes.
	var deflated bytes.Buffer
	fw, _ := flate.NewWriter(&deflated, flate.BestSpeed)
	fw.Write(header(4))
	fw.Write(make([]byte, 16))
	fw.Close()
	liar := write("liar.npz", func(zw *zip.Writer) {
		w, err := zw.CreateRaw(&zip.FileHeader{Name: "x.npy", Method: zip.Deflate, CompressedSize64: uint64(deflated.Len()), UncompressedSize64: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(deflated.Bytes())
	})
	// A header that claims 1 GiB in a member of 128 bytes, stored.
	short := write("short.npz", func(zw *zip.Writer) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "x.npy", Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(header(1 << 28))
		w.Write(make([]byte, 64))
	})
	for _, c := range []struct {
		path string
		want []string
	}{
		{bomb, []string{"bomb.npz", `"x.npy"`, "zip bomb", "128.0 MiB"}},
		{liar, []string{"liar.npz", `"x.npy"`, "more than deflate can produce"}},
		{short, []string{"short.npz", `"x.npy"`, "1073741824 bytes, file has"}},
	} {
		_, _, err := ReadNPZ(c.path)
		if err == nil {
			t.Fatalf("%s: read", c.path)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant %q", c.path, err, w)
			}
		}
	}
}
