package callargs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/npy"
)

func flags(t *testing.T, values ...string) []Given {
	t.Helper()
	g, err := FromFlags("--input", values)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func load(t *testing.T, name string) *torch.Module {
	t.Helper()
	f := fixtures.Load(t).Get(t, name)
	m, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func schema(t *testing.T, m *torch.Module, method string) *torch.MethodSchema {
	t.Helper()
	s, err := m.MethodSchema(method)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Defaults: trailing ones are left to the method; one before an argument given is passed
// from the schema. Values are named or positional.
func TestBuildDefaults(t *testing.T) {
	m := load(t, "typed_args")
	dir := t.TempDir()
	x := filepath.Join(dir, "x.npy")
	if err := npy.WriteFile(x, npy.FromFloat32([]int64{1, 5, 8}, make([]float32, 40))); err != nil {
		t.Fatal(err)
	}
	e := filepath.Join(dir, "e.npy")
	if err := npy.WriteFile(e, npy.FromFloat32([]int64{1, 8}, make([]float32, 8))); err != nil {
		t.Fatal(err)
	}
	base := []string{x, "mask=none", "extras=" + e + "," + e, "pair=" + e + "," + e, "scale=float:1", "normalize=bool:false"}
	p, err := Build(schema(t, m, "forward"), flags(t, base...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := strings.Join(p.Names, ","); got != "x,mask,extras,pair,scale,normalize" || p.Calls() != 0 {
		t.Errorf("names %s, calls %d", got, p.Calls())
	}
	p2, err := Build(schema(t, m, "forward"), flags(t, append(base, "top_k=int:1")...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	args := p2.Args(0)
	if len(args) != 8 || args[6].String() != `str "mean"` || args[7].String() != "int 1" {
		t.Errorf("args %v", args)
	}
	out, err := m.Call("forward", args...)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := out.Outputs()
	out.Close()
	if err != nil || len(outs) != 3 || outs[2].Name != "top" || outs[2].Tensor.Shape()[1] != 1 {
		t.Errorf("outputs %v %v", outs, err)
	}
	torch.CloseOutputs(outs)
}

// A Dict[str, Tensor] argument takes every member of a .npz, by name.
func TestBuildDict(t *testing.T) {
	m := load(t, "two_methods")
	if err := m.Define("def total(self, d: Dict[str, Tensor], w: float) -> Tensor:\n    return d[\"a\"] * w + d[\"b\"]\n"); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "d.npz")
	if err := npy.WriteNPZ(p, []string{"a", "b"}, []*npy.Array{npy.FromFloat32([]int64{2}, []float32{1, 2}), npy.FromFloat32([]int64{2}, []float32{10, 20})}); err != nil {
		t.Fatal(err)
	}
	plan, err := Build(schema(t, m, "total"), flags(t, p, "float:3"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	v, err := m.Call("total", plan.Args(0)...)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ten, err := v.ToTensor()
	if err != nil {
		t.Fatal(err)
	}
	defer ten.Close()
	if got, _ := ten.Float32s(); len(got) != 2 || got[0] != 13 || got[1] != 26 {
		t.Errorf("total = %v, want [13 26]", got)
	}
	// One member of it is a tensor; the whole archive is not.
	if _, err := Build(schema(t, m, "embed"), flags(t, p), Options{}); err == nil || !strings.Contains(err.Error(), "name one with") {
		t.Errorf("whole npz for a tensor: %v", err)
	}
	one, err := Build(schema(t, m, "embed"), flags(t, "x="+p+":a"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	one.Close()
}

// Config constants and random tensors resolve like flags; a declared type that is not the
// schema's is refused.
func TestBuildFromConfig(t *testing.T) {
	m := load(t, "streaming")
	g, err := FromConfig([]config.Input{{Name: "x", Shape: []int64{1, 256}}, {Name: "sr", Type: "int", Value: 8000}})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	p, err := Build(schema(t, m, "forward"), g, Options{Random: func(shape []int64, dt torch.DType) (*torch.Tensor, error) {
		calls++
		return torch.NewTensor(make([]float32, 256), shape)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if calls != 1 || p.Args(0)[1].String() != "int 8000" {
		t.Errorf("random calls %d, sr %v", calls, p.Args(0)[1])
	}
	g[1].Type = "float"
	if _, err := Build(schema(t, m, "forward"), g, Options{Random: func(s []int64, _ torch.DType) (*torch.Tensor, error) {
		return torch.NewTensor(make([]float32, 256), s)
	}}); err == nil || !strings.Contains(err.Error(), "declared float") {
		t.Errorf("declared float for int: %v", err)
	}
}
