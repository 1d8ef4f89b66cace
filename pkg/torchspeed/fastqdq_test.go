package torchspeed

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/version"
)

func torchspeedOps(t *testing.T, m *torch.Module) int {
	t.Helper()
	counts, err := m.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k, v := range counts {
		if strings.HasPrefix(k, "torchspeed::") {
			n += v
		}
	}
	return n
}

// TestLoadAppliesFastQDQ: an INT8 artifact listing fast_qdq stays a stock TorchScript file, Load
// swaps in torchspeed's ops (not with StockOps) and the outputs are the same bits; SaveArtifact
// refuses a module that already calls them.
func TestLoadAppliesFastQDQ(t *testing.T) {
	if !torch.FastQDQApplies() {
		t.Skip("libtorch has FBGEMM: its quantize/dequantize are not the scalar loops torchspeed's ops reproduce")
	}
	f := fixtures.Load(t).Get(t, "digits")
	q, err := torch.LoadWithEngine(f.Path(f.QuantRef.File), f.QuantRef.Engine)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Eval(); err != nil {
		t.Fatal(err)
	}
	in := f.InputArrays(t)[0]
	man := &Manifest{Format: version.ManifestFormat, Torchspeed: "test", Libtorch: torch.Version(), Precision: "int8-static",
		QEngine: f.QuantRef.Engine, LoadPasses: []string{PassFastQDQ}, Inputs: []InputSpec{{Name: "x", Shape: in.Shape, DType: "float32"}}}
	p := filepath.Join(t.TempDir(), "a.torchspeed.pt")
	if err := SaveArtifact(q, p, man); err != nil {
		t.Fatal(err)
	}
	plain, err := torch.LoadWithEngine(p, f.QuantRef.Engine)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if n := torchspeedOps(t, plain); n != 0 {
		t.Fatalf("the artifact on disk calls %d torchspeed:: ops: stock PyTorch could not load it", n)
	}
	m, err := Load(p, LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if n := torchspeedOps(t, m.Module()); n == 0 {
		t.Fatal("Load did not apply fast_qdq")
	}
	stock, err := Load(p, LoadOptions{KeepThreads: true, StockOps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stock.Close()
	if n := torchspeedOps(t, stock.Module()); n != 0 {
		t.Fatalf("Load with StockOps left %d torchspeed:: ops", n)
	}
	x, err := torch.NewTensorAny(in.Data, in.Shape)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	want, err := plain.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(want)
	got, err := m.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(got)
	w, _ := want[0].Tensor.Float32s()
	g, err := got[0].Tensor.Float32s()
	if err != nil || len(g) != len(w) {
		t.Fatalf("outputs: %v (%d values, want %d)", err, len(g), len(w))
	}
	for i := range w {
		if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
			t.Fatalf("output element %d: %v with fast_qdq, %v without", i, g[i], w[i])
		}
	}
	if err := SaveArtifact(m.Module(), filepath.Join(t.TempDir(), "b.pt"), man); err == nil || !strings.Contains(err.Error(), "torchspeed::") {
		t.Errorf("saving a module with torchspeed:: ops: %v, want a refusal naming them", err)
	}
}
