package torchspeed

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// saveWithManifest writes the digits fixture frozen, with the given manifest.
func saveWithManifest(t *testing.T, man *Manifest) string {
	t.Helper()
	f := fixtures.Load(t).Get(t, "digits")
	m, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Eval()
	fr, err := m.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	p := filepath.Join(t.TempDir(), "a.torchspeed.pt")
	if err := SaveArtifact(fr, p, man); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadManifestChecks(t *testing.T) {
	good := &Manifest{Format: version.ManifestFormat, Torchspeed: "test", Libtorch: torch.Version(), Precision: "fp32",
		LoadPasses: []string{PassOptimizeForInference}, Inputs: []InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}}}
	m, err := Load(saveWithManifest(t, good), LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Warnings) != 0 {
		t.Errorf("warnings for a matching artifact: %v", m.Warnings)
	}
	x, _ := torch.NewTensor(make([]float32, 64), []int64{1, 1, 8, 8})
	defer x.Close()
	outs, err := m.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	torch.CloseOutputs(outs)
	if _, err := m.Predict(x, x); err == nil || !strings.Contains(err.Error(), "takes 1 input") {
		t.Errorf("two inputs: %v", err)
	}
	m.Close()

	newer := *good
	newer.Format = version.ManifestFormat + 1
	newer.Torchspeed = "9.9"
	if _, err := Load(saveWithManifest(t, &newer)); err == nil || !strings.Contains(err.Error(), "upgrade torchspeed") {
		t.Errorf("newer format: %v", err)
	}

	other := *good
	other.Libtorch = "0.9.0"
	m, err = Load(saveWithManifest(t, &other), LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Warnings) == 0 || !strings.Contains(m.Warnings[0], "libtorch 0.9.0") {
		t.Errorf("no warning for another libtorch: %v", m.Warnings)
	}
	m.Close()

	pass := *good
	pass.LoadPasses = []string{"fuse_everything"}
	if _, err := Load(saveWithManifest(t, &pass), LoadOptions{KeepThreads: true}); err == nil || !strings.Contains(err.Error(), "unknown load-time pass") {
		t.Errorf("unknown pass: %v", err)
	}
}

func TestLoadPlainTorchScript(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	m, err := Load(f.ModelPath(), LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.Warnings) == 0 || !strings.Contains(m.Warnings[0], "no torchspeed manifest") {
		t.Errorf("warnings: %v", m.Warnings)
	}
}
