package export

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// opPasses are the load-time passes whose graphs call torchspeed's operators, in the order
// torchspeed.Load applies them.
var opPasses = []string{torchspeed.PassFastLinear, torchspeed.PassFastConv, torchspeed.PassFuseConvAdd, torchspeed.PassFastQDQ}

// servedModel is what writeServedModel wrote.
type servedModel struct {
	// passes are the artifact's load-time passes whose result the file holds (none: it is the
	// artifact, byte for byte).
	passes []string
	// ops: the graph calls torchspeed's operators; a server loads torch.OpsLibraryName first.
	ops  bool
	note string
}

// saved: the file holds a graph after load-time passes, not the artifact's bytes.
func (s *servedModel) saved() bool { return len(s.passes) > 0 }

// writeServedModel writes the file a server loads to dst: the artifact's graph after its
// load-time passes, saved, where plain torch::jit::load reads it back and it answers like
// torchspeed.Load. Unless stockOps, that includes the passes whose graphs call torchspeed's
// operators (the server then loads torch.OpsLibraryName); optimize_for_inference is kept only
// where its graph loads back (libtorch 1.13 saves it but cannot load it back), and left out of
// the saved graph otherwise. When nothing can be saved, dst is the artifact, byte for byte.
func writeServedModel(a *Artifact, dst string, stockOps bool) (*servedModel, error) {
	man := a.Manifest
	hasOFI := slices.Contains(man.LoadPasses, torchspeed.PassOptimizeForInference)
	var ops []string
	for _, p := range opPasses {
		if slices.Contains(man.LoadPasses, p) {
			ops = append(ops, p)
		}
	}
	base := filepath.Base(dst)
	var whyNot []string
	if !stockOps && len(ops) > 0 {
		tries := [][]string{nil}
		if hasOFI {
			tries = append(tries, []string{torchspeed.PassOptimizeForInference})
		}
		for _, skip := range tries {
			why, err := saveOptimized(a, dst, skip, false)
			if err != nil {
				return nil, err
			}
			if why != "" {
				whyNot = append(whyNot, why)
				continue
			}
			s := &servedModel{ops: true}
			for _, p := range man.LoadPasses {
				if !slices.Contains(skip, p) {
					s.passes = append(s.passes, p)
				}
			}
			s.note = fmt.Sprintf("%s holds the graph after %s and calls torchspeed's operators: the server loads %s first", base, strings.Join(s.passes, ", "), torch.OpsLibraryName)
			if slices.Contains(s.passes, torchspeed.PassOptimizeForInference) {
				s.note += fmt.Sprintf("; the optimize_for_inference graph loads back in libtorch %s and answers like torchspeed.Load", torch.Version())
			}
			if len(skip) > 0 {
				s.note += fmt.Sprintf("; the optimize_for_inference graph is left out: libtorch %s cannot load it back (%s)", torch.Version(), whyNot[0])
			}
			return s, nil
		}
	}
	if !hasOFI {
		return &servedModel{note: servedStockNote(base, ops, whyNot)}, copyFile(a.Path, dst)
	}
	why, err := saveOptimized(a, dst, nil, true)
	if err != nil {
		return nil, err
	}
	if why == "" {
		s := &servedModel{passes: []string{}}
		for _, p := range man.LoadPasses {
			if !slices.Contains(ops, p) {
				s.passes = append(s.passes, p)
			}
		}
		s.note = fmt.Sprintf("%s holds the optimize_for_inference graph (libtorch %s loads it back and it answers like torchspeed.Load): plain loading keeps the pass", base, torch.Version())
		if n := servedStockNote(base, ops, whyNot); n != "" {
			s.note += "; " + n
		}
		return s, nil
	}
	if err := copyFile(a.Path, dst); err != nil {
		return nil, err
	}
	note := fmt.Sprintf("%s is the artifact: the optimize_for_inference graph cannot be saved by libtorch %s (%s)", base, torch.Version(), why)
	if n := servedStockNote(base, ops, whyNot); n != "" {
		note += "; " + n
	}
	return &servedModel{note: note}, nil
}

// servedStockNote says why the served file leaves torchspeed's operators out ("" when the
// artifact has none).
func servedStockNote(base string, ops, whyNot []string) string {
	if len(ops) == 0 {
		return ""
	}
	if len(whyNot) == 0 {
		return fmt.Sprintf("%s leaves out %s (stock operators only): the server runs libtorch's own", base, strings.Join(ops, ", "))
	}
	return fmt.Sprintf("%s leaves out %s: its graph with torchspeed's operators could not be served (%s)", base, strings.Join(ops, ", "), whyNot[len(whyNot)-1])
}

// saveOptimized saves the artifact's graph after its load-time passes (less skip; less those
// that call torchspeed's operators when stockOps) to dst and checks that plain loading reads
// it back and it answers like torchspeed.Load. A non-empty why means it could not be kept
// (nothing is left at dst); err is for failures of the export itself.
func saveOptimized(a *Artifact, dst string, skip []string, stockOps bool) (why string, err error) {
	m, err := torchspeed.Load(a.Path, torchspeed.LoadOptions{KeepThreads: true, StockOps: stockOps, SkipPasses: skip})
	if err != nil {
		return "", err
	}
	defer m.Close()
	man := *m.Manifest
	// The saved graph is the result of the passes: torchspeed.Load must not apply them again,
	// except those StockOps left out.
	man.LoadPasses = []string{}
	// The digest is the artifact's records', not these.
	man.RecordsSHA256 = ""
	if stockOps {
		for _, p := range opPasses {
			if slices.Contains(m.Manifest.LoadPasses, p) {
				man.LoadPasses = append(man.LoadPasses, p)
			}
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
