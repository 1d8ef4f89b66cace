package torch_test

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// writeFile writes data as name in a temp folder (a hostile model file).
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Bad model files: a clear error that names the file and says what to do; never a crash.
func TestLoadBadFiles(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	good, err := os.ReadFile(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	w, _ := zw.Create("hello.txt")
	w.Write([]byte("not a model"))
	zw.Close()

	cases := []struct {
		name string
		path string
		want string
	}{
		{"missing", filepath.Join(t.TempDir(), "nope.pt"), "file not found"},
		{"empty", writeFile(t, "empty.pt", nil), "file is empty"},
		{"not a zip", writeFile(t, "text.pt", []byte("hello world, no zip here")), "not a TorchScript archive"},
		{"truncated", writeFile(t, "trunc.pt", good[:len(good)/2]), "truncated or corrupt"},
		{"zip not torchscript", writeFile(t, "other.pt", zbuf.Bytes()), "not a TorchScript module"},
		{"directory", t.TempDir(), "is a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := torch.Load(c.path)
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Fatalf("error %q does not name the file or say %q", err, c.want)
			}
		})
	}
}

func TestForwardBadInputs(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "resnet18")
	m := loadFixture(t, f)
	mk := func(data any, shape ...int64) *torch.Tensor {
		x, err := torch.NewTensorAny(data, shape)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		return x
	}
	good := tensorsOf(t, f.InputArrays(t))[0]
	cases := []struct {
		name   string
		inputs []*torch.Tensor
		want   string
	}{
		{"too many inputs", []*torch.Tensor{good, good}, "takes 1 input(s), got 2"},
		{"no inputs", nil, "missing value"},
		{"wrong channels", []*torch.Tensor{mk(make([]float32, 4*32*32), 1, 4, 32, 32)}, "channels"},
		{"wrong rank", []*torch.Tensor{mk(make([]float32, 10), 10)}, "resnet18"},
		{"wrong dtype", []*torch.Tensor{mk(make([]int64, 3*32*32), 1, 3, 32, 32)}, "resnet18"},
		{"zero elements", []*torch.Tensor{mk([]float32{}, 0, 3, 224, 224)}, "no elements"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outs, err := m.Forward(c.inputs...)
			if err == nil {
				torch.CloseOutputs(outs)
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			var te *torch.Error
			if c.name != "too many inputs" && c.name != "zero elements" && !errors.As(err, &te) {
				t.Fatalf("error %v is not a *torch.Error", err)
			}
		})
	}

	// NaN input runs, and the NaN shows in the result.
	nan := make([]float32, 3*224*224)
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	outs, err := m.Forward(mk(nan, 1, 3, 224, 224))
	if err != nil {
		t.Fatalf("NaN input should run: %v", err)
	}
	defer torch.CloseOutputs(outs)
	vals, _ := outs[0].Tensor.Float32s()
	if !math.IsNaN(float64(vals[0])) {
		t.Fatalf("NaN input gave %v", vals[0])
	}
}

func TestClosedHandles(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	m, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	in := tensorsOf(t, f.InputArrays(t))
	m.Close()
	m.Close() // idempotent
	if _, err := m.Forward(in...); !errors.Is(err, torch.ErrClosed) {
		t.Fatalf("forward on closed module: %v", err)
	}
	if _, err := m.Freeze(); !errors.Is(err, torch.ErrClosed) {
		t.Fatalf("freeze on closed module: %v", err)
	}
	x, _ := torch.NewTensor([]float32{1, 2}, []int64{2})
	x.Close()
	x.Close()
	if _, err := torch.Data[float32](x); !errors.Is(err, torch.ErrClosed) {
		t.Fatalf("data of closed tensor: %v", err)
	}
	m2 := loadFixture(t, f)
	if _, err := m2.Forward(x); !errors.Is(err, torch.ErrClosed) {
		t.Fatalf("forward with closed input: %v", err)
	}
}

func TestNewTensorRejectsBadShapes(t *testing.T) {
	cases := []struct {
		data  any
		shape []int64
		want  string
	}{
		{[]float32{1, 2, 3}, []int64{2, 2}, "holds 4 elements, data has 3"},
		{[]float32{1}, []int64{-1}, "negative"},
		{[]string{"a"}, []int64{1}, "unsupported data type"},
	}
	for _, c := range cases {
		if _, err := torch.NewTensorAny(c.data, c.shape); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewTensor(%T, %v): %v, want %q", c.data, c.shape, err, c.want)
		}
	}
	for _, d := range []any{[]float64{1.5}, []int64{7}, []int32{7}, []uint8{7}, []int8{-7}, []bool{true}, []int16{-3}} {
		x, err := torch.NewTensorAny(d, []int64{1})
		if err != nil {
			t.Fatal(err)
		}
		back, err := torch.DataAny(x)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := fmt.Sprint(back), fmt.Sprint(d); a != b {
			t.Errorf("round trip %v -> %v", d, back)
		}
		x.Close()
	}
}

func fmtAny(v any) string { return fmt.Sprint(v) }
