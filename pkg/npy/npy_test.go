package npy

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// want recomputes the formula in scripts/gen_npy_testdata.py for n elements.
func want(dtype string, n int) any {
	switch dtype {
	case Bool:
		out := make([]bool, n)
		for i := range out {
			out[i] = i%3 == 0
		}
		return out
	case Float32:
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(float64(i)*0.5 - 3.25)
		}
		return out
	case Float64:
		out := make([]float64, n)
		for i := range out {
			out[i] = float64(i)*0.5 - 3.25
		}
		return out
	case Uint8:
		out := make([]uint8, n)
		for i := range out {
			out[i] = uint8(i * 37 % 256)
		}
		return out
	case Int8:
		out := make([]int8, n)
		for i := range out {
			out[i] = int8(i*37%256 - 128)
		}
		return out
	}
	base := make([]int64, n)
	for i := range base {
		base[i] = int64(i)*1000003%65536 - 32768
	}
	switch dtype {
	case Int64:
		for i := range base {
			base[i] *= 1000000007
		}
		return base
	case Int32:
		out := make([]int32, n)
		for i, v := range base {
			out[i] = int32(v)
		}
		return out
	case Int16:
		out := make([]int16, n)
		for i, v := range base {
			out[i] = int16(v)
		}
		return out
	}
	panic("unknown dtype " + dtype)
}

func TestReadGolden(t *testing.T) {
	dtypes := []string{Float32, Float64, Int64, Int32, Int16, Int8, Uint8, Bool}
	type tc struct {
		file  string
		dtype string
		shape []int64
	}
	var cases []tc
	for _, dt := range dtypes {
		cases = append(cases,
			tc{dt + "_le.npy", dt, []int64{2, 3, 4}},
			tc{dt + "_be.npy", dt, []int64{2, 3, 4}})
	}
	cases = append(cases,
		tc{"float32_v1.npy", Float32, []int64{2, 3, 4}},
		tc{"float32_v2.npy", Float32, []int64{2, 3, 4}},
		tc{"float32_v3.npy", Float32, []int64{2, 3, 4}},
		tc{"scalar_f8.npy", Float64, []int64{}},
		tc{"empty_0x3_f4.npy", Float32, []int64{0, 3}},
		tc{"vector_i8.npy", Int64, []int64{5}},
	)
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			a, err := ReadFile(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			if a.DType != c.dtype || !reflect.DeepEqual(a.Shape, c.shape) {
				t.Fatalf("got %s %v, want %s %v", a.DType, a.Shape, c.dtype, c.shape)
			}
			if err := a.Validate(); err != nil {
				t.Fatal(err)
			}
			w := want(c.dtype, int(numel(c.shape)))
			if !reflect.DeepEqual(a.Data, w) {
				t.Fatalf("data %v, want %v", a.Data, w)
			}
		})
	}
}

// TestWriteMatchesNumpy checks that Write produces the bytes np.save produced for the
// same array, header padding included.
func TestWriteMatchesNumpy(t *testing.T) {
	for _, dt := range []string{Float32, Float64, Int64, Int32, Int16, Int8, Uint8, Bool} {
		t.Run(dt, func(t *testing.T) {
			golden, err := os.ReadFile(filepath.Join("testdata", dt+"_le.npy"))
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			a := &Array{Shape: []int64{2, 3, 4}, DType: dt, Data: want(dt, 24)}
			if err := Write(&buf, a); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), golden) {
				t.Fatalf("Write output differs from np.save:\n got %q\nwant %q", buf.Bytes(), golden)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	cases := []*Array{
		{Shape: []int64{2, 3}, DType: Float32, Data: []float32{1, -2, float32(math.Inf(1)), 0, 5.5, 1e-30}},
		{Shape: []int64{}, DType: Float64, Data: []float64{math.Pi}},
		{Shape: []int64{0, 4}, DType: Int64, Data: []int64{}},
		{Shape: []int64{3}, DType: Int64, Data: []int64{math.MinInt64, 0, math.MaxInt64}},
		{Shape: []int64{2}, DType: Int32, Data: []int32{math.MinInt32, math.MaxInt32}},
		{Shape: []int64{2}, DType: Int16, Data: []int16{-1, 300}},
		{Shape: []int64{2}, DType: Int8, Data: []int8{-128, 127}},
		{Shape: []int64{1, 1, 3}, DType: Uint8, Data: []uint8{0, 128, 255}},
		{Shape: []int64{4}, DType: Bool, Data: []bool{true, false, false, true}},
		// A shape so long that the header no longer fits format 1.0's 16-bit length.
		{Shape: manyOnes(7000), DType: Float32, Data: []float32{42}},
	}
	dir := t.TempDir()
	for i, a := range cases {
		t.Run(a.DType+"_"+ShapeString(a.Shape)[:min(20, len(ShapeString(a.Shape)))], func(t *testing.T) {
			var buf bytes.Buffer
			if err := Write(&buf, a); err != nil {
				t.Fatal(err)
			}
			if (buf.Len()-len(payloadLE(a.Data)))%64 != 0 {
				t.Errorf("header of %d bytes is not 64-byte aligned", buf.Len()-len(payloadLE(a.Data)))
			}
			got, err := Read(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, a) {
				t.Fatalf("round trip: got %+v, want %+v", got, a)
			}
			// Through a plain io.Reader (unknown length) as well.
			got, err = Read(struct{ *bytes.Buffer }{bytes.NewBuffer(buf.Bytes())})
			if err != nil || !reflect.DeepEqual(got, a) {
				t.Fatalf("round trip via io.Reader: %v %+v", err, got)
			}
			path := filepath.Join(dir, "a.npy")
			if err := WriteFile(path, a); err != nil {
				t.Fatal(err)
			}
			got, err = ReadFile(path)
			if err != nil || !reflect.DeepEqual(got, a) {
				t.Fatalf("file round trip %d: %v %+v", i, err, got)
			}
		})
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("WriteFile left temporary files: %v", entries)
	}
}

func manyOnes(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// npyBytes builds a .npy stream by hand so tests can corrupt any part of it.
func npyBytes(major byte, hdr string, payload []byte) []byte {
	b := []byte(magic)
	b = append(b, major, 0)
	if major == 1 {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(hdr)))
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(hdr)))
	}
	b = append(b, hdr...)
	return append(b, payload...)
}

func TestReadErrors(t *testing.T) {
	good := "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 224, 224), }\n"
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty file", nil, "x.npy: bad magic (not a .npy file)"},
		{"png", []byte("\x89PNG\r\n\x1a\n...."), "bad magic (not a .npy file)"},
		{"magic only", []byte(magic), "truncated header"},
		{"version 4", npyBytes(4, good, nil), "unsupported .npy format version 4.0"},
		{"header cut", npyBytes(1, good, nil)[:30], "truncated header"},
		{"truncated data", npyBytes(1, good, make([]byte, 1000)), "x.npy: header says 3x224x224 float32 = 602112 bytes, file has 1000"},
		{"not a dict", npyBytes(1, "hello\n", nil), "wrong header: header is not a dict"},
		{"missing shape", npyBytes(1, "{'descr': '<f4', 'fortran_order': False}\n", nil), `header is missing key "shape"`},
		{"extra key", npyBytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}\n", nil), `unexpected key "x"`},
		{"bad shape", npyBytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }\n", nil), "header 'shape'"},
		{"one-tuple without comma", npyBytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }\n", nil), "must be written (3,)"},
		{"huge shape", npyBytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999, 99999999999), }\n", nil), "too large"},
		{"fortran", npyBytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }\n", make([]byte, 16)), "fortran_order=True arrays are not supported"},
		{"float16", npyBytes(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }\n", make([]byte, 4)), `unsupported dtype "<f2"`},
		{"object", npyBytes(1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }\n", nil), `unsupported dtype "|O"`},
		{"structured", npyBytes(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n", nil), "structured dtype"},
		{"bad bool", npyBytes(1, "{'descr': '<f4', 'fortran_order': false, 'shape': (2,), }\n", nil), "expected True or False"},
		{"huge v2 header", append([]byte(magic+"\x02\x00"), 0xff, 0xff, 0xff, 0x7f), "implausibly large"},
		{"trailing text", npyBytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), } junk\n", make([]byte, 4)), "unexpected text after the dict"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "x.npy")
			if err := os.WriteFile(path, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadFile(path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ReadFile error %v, want it to contain %q", err, c.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			// The streaming reader (length unknown) must reject the same input.
			_, err = Read(struct{ *bytes.Buffer }{bytes.NewBuffer(c.data)})
			if err == nil {
				t.Fatalf("Read accepted what ReadFile rejected")
			}
		})
	}
}

func TestReadGoldenErrors(t *testing.T) {
	for file, wantErr := range map[string]string{
		"fortran_f4.npy": "fortran_order=True arrays are not supported",
		"float16.npy":    `unsupported dtype "<f2"`,
	} {
		_, err := ReadFile(filepath.Join("testdata", file))
		if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: error %v, want %q naming the file", file, err, wantErr)
		}
	}
}

func TestWriteRejectsInvalid(t *testing.T) {
	cases := []struct {
		a    *Array
		want string
	}{
		{&Array{Shape: []int64{3}, DType: Float32, Data: []float32{1, 2}}, "needs 3 elements, data has 2"},
		{&Array{Shape: []int64{2}, DType: Float64, Data: []float32{1, 2}}, "does not match data of type []float32"},
		{&Array{Shape: []int64{2}, DType: "complex64", Data: []float32{1, 2}}, `unsupported dtype "complex64"`},
		{&Array{Shape: []int64{-1}, DType: Float32, Data: []float32{}}, "invalid shape"},
		{nil, "nil array"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		var buf bytes.Buffer
		if err := Write(&buf, c.a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Write(%+v) error %v, want %q", c.a, err, c.want)
		}
		path := filepath.Join(dir, "bad.npy")
		if err := WriteFile(path, c.a); err == nil {
			t.Errorf("WriteFile(%+v) accepted an invalid array", c.a)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("WriteFile wrote %s despite the error", path)
		}
	}
}

func TestConversions(t *testing.T) {
	cases := []struct {
		a     *Array
		f32   []float32
		i64   []int64
		i64Er bool
	}{
		{&Array{Shape: []int64{2}, DType: Float64, Data: []float64{1.5, -2}}, []float32{1.5, -2}, nil, true},
		{&Array{Shape: []int64{2}, DType: Int64, Data: []int64{7, -8}}, []float32{7, -8}, []int64{7, -8}, false},
		{&Array{Shape: []int64{2}, DType: Int32, Data: []int32{7, -8}}, []float32{7, -8}, []int64{7, -8}, false},
		{&Array{Shape: []int64{2}, DType: Int16, Data: []int16{7, -8}}, []float32{7, -8}, []int64{7, -8}, false},
		{&Array{Shape: []int64{2}, DType: Int8, Data: []int8{7, -8}}, []float32{7, -8}, []int64{7, -8}, false},
		{&Array{Shape: []int64{2}, DType: Uint8, Data: []uint8{7, 255}}, []float32{7, 255}, []int64{7, 255}, false},
		{&Array{Shape: []int64{2}, DType: Bool, Data: []bool{true, false}}, []float32{1, 0}, []int64{1, 0}, false},
		{FromFloat32([]int64{2}, []float32{3, 4}), []float32{3, 4}, nil, true},
	}
	for _, c := range cases {
		f, err := c.a.Float32s()
		if err != nil || !reflect.DeepEqual(f, c.f32) {
			t.Errorf("%s Float32s = %v, %v; want %v", c.a.DType, f, err, c.f32)
		}
		i, err := c.a.Int64s()
		if (err != nil) != c.i64Er || (!c.i64Er && !reflect.DeepEqual(i, c.i64)) {
			t.Errorf("%s Int64s = %v, %v; want %v (error %v)", c.a.DType, i, err, c.i64, c.i64Er)
		}
	}
	if n := (&Array{Shape: []int64{math.MaxInt64, 2}}).Numel(); n != -1 {
		t.Errorf("overflowing Numel = %d, want -1", n)
	}
	if n := (&Array{}).Numel(); n != 1 {
		t.Errorf("scalar Numel = %d, want 1", n)
	}
}

// TestNumpyReadsOurFiles has Debian's numpy load what WriteFile and WriteNPZ wrote.
func TestNumpyReadsOurFiles(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy").Run(); err != nil {
		t.Skipf("%s with numpy not available: %v", py, err)
	}
	dir := t.TempDir()
	a := &Array{Shape: []int64{2, 3, 4}, DType: Int64, Data: want(Int64, 24)}
	b := &Array{Shape: []int64{2, 3, 4}, DType: Bool, Data: want(Bool, 24)}
	if err := WriteFile(filepath.Join(dir, "a.npy"), a); err != nil {
		t.Fatal(err)
	}
	if err := WriteNPZCompressed(filepath.Join(dir, "c.npz"), []string{"a", "b"}, []*Array{a, b}); err != nil {
		t.Fatal(err)
	}
	script := `
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
import importlib.util
spec = importlib.util.spec_from_file_location("gen", sys.argv[3])
gen = importlib.util.module_from_spec(spec); spec.loader.exec_module(gen)
d = sys.argv[1]
a = np.load(d + "/a.npy")
assert a.dtype == np.int64 and (a == gen.values("int64", (2, 3, 4))).all(), a
z = np.load(d + "/c.npz")
assert z.files == ["a", "b"], z.files
assert (z["b"] == gen.values("bool", (2, 3, 4))).all()
print("ok")
`
	gen, _ := filepath.Abs("../../scripts/gen_npy_testdata.py")
	out, err := exec.Command(py, "-c", script, dir, filepath.Dir(gen), gen).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("numpy could not read our files: %v\n%s", err, out)
	}
}

func TestSplitData(t *testing.T) {
	d := []int64{0, 1, 2, 3, 4, 5}
	got, err := SplitData(d, 3, 1)
	if err != nil || !slices.Equal(got.([]int64), []int64{2, 3}) {
		t.Errorf("part 1 of 3 = %v, %v; want [2 3]", got, err)
	}
	for _, bad := range []struct{ parts, i int }{{0, 0}, {3, 3}, {3, -1}} {
		if _, err := SplitData(d, bad.parts, bad.i); err == nil {
			t.Errorf("part %d of %d: no error", bad.i, bad.parts)
		}
	}
	if _, err := SplitData([]string{"a"}, 1, 0); err == nil {
		t.Error("strings split without an error")
	}
}

func TestFirstNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		data any
		want int
	}{
		{[]float32{1, 2, float32(nan)}, 2},
		{[]float32{float32(-inf), 0}, 0},
		{[]float32{math.MaxFloat32, -math.MaxFloat32}, -1},
		{[]float64{0, inf}, 1},
		{[]float64{1, 2}, -1},
		{[]int64{1}, -1},
		{[]bool{true}, -1},
	} {
		if got := FirstNonFinite(c.data); got != c.want {
			t.Errorf("FirstNonFinite(%v) = %d, want %d", c.data, got, c.want)
		}
	}
}

func TestSliceData(t *testing.T) {
	d := []int16{0, 1, 2, 3, 4}
	got, err := SliceData(d, 1, 3)
	if err != nil || !reflect.DeepEqual(got, []int16{1, 2}) {
		t.Fatalf("SliceData = %v, %v", got, err)
	}
	got.([]int16)[0] = 9
	if d[1] != 9 {
		t.Error("SliceData copied: it shares the array's memory")
	}
	for _, bad := range [][2]int{{-1, 2}, {3, 2}, {0, 6}} {
		if _, err := SliceData(d, bad[0], bad[1]); err == nil {
			t.Errorf("SliceData(%v) succeeded", bad)
		}
	}
	if _, err := SliceData([]string{"a"}, 0, 1); err == nil {
		t.Error("SliceData of []string succeeded")
	}
}
