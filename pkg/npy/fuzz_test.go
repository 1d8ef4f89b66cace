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
