package npy

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzRead checks that no input makes Read panic or allocate beyond what the input
// backs, and that whatever Read accepts survives a Write/Read round trip.
//
//	go test ./pkg/npy -run '^$' -fuzz FuzzRead -fuzztime 60s
func FuzzRead(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.npy"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b)
		}
	}
	f.Add(npyBytes(2, "{'descr': '>i8', 'fortran_order': False, 'shape': (2L, 1L), }\n", make([]byte, 16)))
	f.Add(npyBytes(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }\n", []byte{0, 1, 7}))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, r := range []func() (*Array, error){
			func() (*Array, error) { return Read(bytes.NewReader(data)) },
			func() (*Array, error) { return Read(struct{ *bytes.Buffer }{bytes.NewBuffer(data)}) },
		} {
			a, err := r()
			if err != nil {
				continue
			}
			if err := a.Validate(); err != nil {
				t.Fatalf("Read returned an invalid array: %v", err)
			}
			var buf bytes.Buffer
			if err := Write(&buf, a); err != nil {
				t.Fatalf("Write of a read array: %v", err)
			}
			b, err := Read(&buf)
			if err != nil {
				t.Fatalf("re-read: %v", err)
			}
			if !reflect.DeepEqual(a.Shape, b.Shape) || a.DType != b.DType || !bytes.Equal(payloadLE(a.Data), payloadLE(b.Data)) {
				t.Fatalf("round trip changed the array: %+v vs %+v", a, b)
			}
		}
	})
}

// FuzzReadNPZ checks that no archive makes DecodeNPZ (ReadNPZ's reader) panic or allocate
// beyond what the archive backs (a deflated member may claim any shape), and that whatever it
// accepts survives an EncodeNPZ/DecodeNPZ round trip.
//
//	go test ./pkg/npy -run '^$' -fuzz FuzzReadNPZ -fuzztime 60s
func FuzzReadNPZ(f *testing.F) {
	a, err := ReadFile(filepath.Join("testdata", "float32_v1.npy"))
	if err != nil {
		f.Fatal(err)
	}
	b := FromInt64([]int64{2, 2}, []int64{1, -2, 3, -4})
	var plain bytes.Buffer
	if err := EncodeNPZ(&plain, []string{"x", "y"}, []*Array{a, b}); err != nil {
		f.Fatal(err)
	}
	f.Add(plain.Bytes())
	deflated := filepath.Join(f.TempDir(), "d.npz")
	if err := WriteNPZCompressed(deflated, []string{"x"}, []*Array{a}); err != nil {
		f.Fatal(err)
	}
	if raw, err := os.ReadFile(deflated); err == nil {
		f.Add(raw)
	}
	decode := func(b []byte) (map[string]*Array, []string, error) {
		return DecodeNPZ(bytes.NewReader(b), int64(len(b)), "fuzz.npz")
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		arrays, names, err := decode(data)
		if err != nil {
			return
		}
		if len(names) != len(arrays) {
			t.Fatalf("%d names for %d arrays", len(names), len(arrays))
		}
		list := make([]*Array, len(names))
		for i, n := range names {
			if err := arrays[n].Validate(); err != nil {
				t.Fatalf("member %q: an invalid array: %v", n, err)
			}
			list[i] = arrays[n]
		}
		var buf bytes.Buffer
		if err := EncodeNPZ(&buf, names, list); err != nil {
			t.Fatalf("EncodeNPZ of a read archive: %v", err)
		}
		back, names2, err := decode(buf.Bytes())
		if err != nil || !reflect.DeepEqual(names, names2) {
			t.Fatalf("re-read: %v (names %v, then %v)", err, names, names2)
		}
		for _, n := range names {
			x, y := arrays[n], back[n]
			if !reflect.DeepEqual(x.Shape, y.Shape) || x.DType != y.DType || !bytes.Equal(payloadLE(x.Data), payloadLE(y.Data)) {
				t.Fatalf("member %q changed in the round trip", n)
			}
		}
	})
}
