package torch_test

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// The op library sits beside the shim, is a shared library named by its soname, and loading it
// (or a copy under another name) into a process that has the shim is skipped: the shim
// registers the same operators, and registering them twice would abort the process. The
// operators then still resolve (the shim's).
func TestOpsLibrary(t *testing.T) {
	p, err := torch.OpsLibraryPath()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p) != torch.OpsLibraryName {
		t.Errorf("OpsLibraryPath %q: want a file named %s", p, torch.OpsLibraryName)
	}
	f, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	names, err := f.DynString(elf.DT_SONAME)
	f.Close()
	if err != nil || len(names) != 1 || names[0] != torch.OpsLibraryName {
		t.Fatalf("%s: soname %v (%v), want %s", p, names, err, torch.OpsLibraryName)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), "ops-copy.so")
	if err := os.WriteFile(copied, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, lib := range []string{p, copied} {
		if err := torch.LoadLibrary(lib); err != nil {
			t.Errorf("LoadLibrary(%s): %v", lib, err)
		}
	}
	m := loadFixture(t, fixtures.Load(t).Get(t, "digits"))
	// 0.25 and zero point 0 hold these values exactly; ScalarType 13 is quint8.
	if err := m.DefineOps("def ts_qdq(self, x):\n    return ops.torchspeed.dequantize(ops.torchspeed.quantize_per_tensor(x, 0.25, 0, 13))\n"); err != nil {
		t.Fatal(err)
	}
	x, err := torch.NewTensor([]float32{0.5, 1.25, 3}, []int64{3})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	outs, err := m.RunMethod("ts_qdq", x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(outs)
	got, err := outs[0].Tensor.Float32s()
	if err != nil || len(got) != 3 || got[0] != 0.5 || got[1] != 1.25 || got[2] != 3 {
		t.Errorf("torchspeed::quantize_per_tensor then dequantize: %v (%v)", got, err)
	}
}
