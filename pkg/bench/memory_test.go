package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// TestMeasureModelSizeDigits: the tensor records of the digits fixture are its parameters and
// buffers, 153,912 bytes by PyTorch's count (sum of numel() * element_size() over
// parameters() and buffers() of torch.jit.load("digits.pt")).
func TestMeasureModelSizeDigits(t *testing.T) {
	path := filepath.Join(fixtures.Dir(t), "digits.pt")
	sz, err := MeasureModelSize(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if sz.FileBytes != st.Size() {
		t.Errorf("file bytes %d, want %d", sz.FileBytes, st.Size())
	}
	if sz.TensorBytes != 153912 {
		t.Errorf("tensor bytes %d, want 153912 (parameters and buffers)", sz.TensorBytes)
	}
}

func TestMeasureModelSizeBadInput(t *testing.T) {
	dir := t.TempDir()
	notZip := filepath.Join(dir, "model.pt")
	if err := os.WriteFile(notZip, []byte("not an archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{notZip, filepath.Join(dir, "missing.pt")} {
		_, err := MeasureModelSize(p)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v, want one naming the file", p, err)
		}
	}
}

func TestPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("peak RSS is read on Linux only")
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = 1
	}
	// The process has held at least the buffer just touched.
	if got := PeakRSS(); got == nil || *got < int64(len(buf)) {
		t.Errorf("peak RSS %v after touching %d bytes", got, len(buf))
	}
	_ = buf[len(buf)-1]
}
