package export

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// writeServedModel writes the file a server loads to dst. When the artifact re-applies
// optimize_for_inference at load, it first tries to save the optimized graph itself: kept
// only if plain torch::jit::load reads it back and it answers like torchspeed.Load (libtorch
// 1.13 saves it but cannot load it back). Otherwise dst is the artifact, byte for byte.
// saved says which; note explains it.
func writeServedModel(a *Artifact, dst string) (saved bool, note string, err error) {
	if !slices.Contains(a.Manifest.LoadPasses, torchspeed.PassOptimizeForInference) {
		return false, "", copyFile(a.Path, dst)
	}
	why, err := saveOptimized(a, dst)
	if err != nil {
		return false, "", err
	}
	if why == "" {
		return true, fmt.Sprintf("%s holds the optimize_for_inference graph (libtorch %s loads it back and it answers like torchspeed.Load): plain loading keeps the pass", filepath.Base(dst), torch.Version()), nil
	}
	if err := copyFile(a.Path, dst); err != nil {
		return false, "", err
	}
	return false, fmt.Sprintf("%s is the artifact: the optimize_for_inference graph cannot be saved by libtorch %s (%s)", filepath.Base(dst), torch.Version(), why), nil
}

// saveOptimized saves the artifact's graph after its load-time passes to dst and checks it.
// A non-empty why means it could not be kept (nothing is left at dst); err is for failures
// of the export itself.
func saveOptimized(a *Artifact, dst string) (why string, err error) {
	// StockOps: the file is for a stock server, which has no torchspeed:: operators.
	m, err := torchspeed.Load(a.Path, torchspeed.LoadOptions{KeepThreads: true, StockOps: true})
	if err != nil {
		return "", err
	}
	defer m.Close()
	man := *m.Manifest
	// The saved graph is the result of the passes: torchspeed.Load must not apply them again,
	// except those StockOps left out.
	man.LoadPasses = []string{}
	for _, p := range []string{torchspeed.PassFastLinear, torchspeed.PassFastConv, torchspeed.PassFuseConvAdd, torchspeed.PassFastQDQ} {
		if slices.Contains(m.Manifest.LoadPasses, p) {
			man.LoadPasses = append(man.LoadPasses, p)
		}
	}
	raw, err := man.Marshal()
	if err != nil {
		return "", err
	}
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".optimized")
	defer os.Remove(tmp)
	if err := m.Module().Save(tmp, map[string][]byte{torchspeed.ManifestFile: raw}); err != nil {
		return "saving it failed: " + firstLine(err), nil
	}
	plain, err := torch.Load(tmp)
	if err != nil {
		return "loading it back failed: " + firstLine(err), nil
	}
	defer plain.Close()
	if err := plain.Eval(); err != nil {
		return "loading it back failed: " + firstLine(err), nil
	}
	want, err := runBatch(m, a.Inputs, 1)
	if err != nil {
		return "", err
	}
	got, err := runPlain(plain, a.Inputs)
	if err != nil {
		return "running it after loading it back failed: " + firstLine(err), nil
	}
	for i := range want {
		if i >= len(got) || len(got[i].values) != len(want[i].values) {
			return fmt.Sprintf("loaded back, it gives %d outputs, not %d", len(got), len(want)), nil
		}
		if d := maxRelDiff(got[i].values, want[i].values); d > 1e-4 {
			return fmt.Sprintf("loaded back, output %s differs from torchspeed.Load's (max relative difference %.3g)", want[i].name, d), nil
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	return "", nil
}

// runPlain runs a plainly loaded module on the same inputs as runBatch(…, 1), contiguous, as
// a server passes them.
func runPlain(mod *torch.Module, specs []Tensor) ([]output, error) {
	var ins []*torch.Tensor
	defer func() {
		for _, t := range ins {
			t.Close()
		}
	}()
	for i, s := range specs {
		t, err := sampleTensor(s, 1, uint64(i))
		if err != nil {
			return nil, err
		}
		ins = append(ins, t)
	}
	outs, err := mod.Forward(ins...)
	if err != nil {
		return nil, err
	}
	defer torch.CloseOutputs(outs)
	return copyOutputs(outs)
}
