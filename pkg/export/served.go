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
var opPasses = []string{torchspeed.PassFastLinear, torchspeed.PassLinearBF16, torchspeed.PassFastConv, torchspeed.PassFuseConvAdd, torchspeed.PassFastQDQ}

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
// operators (the server then loads torch.OpsLibraryName), optimize_for_inference (with
// libtorch 1.13, whose oneDNN graph does not load back as the pass leaves it, through
// torchspeed's serializable oneDNN constants; left out where even that does not load back) and
// a channels-last artifact's input conversion. With stockOps, optimize_for_inference is kept
// only where its graph loads back as it is. When nothing can be saved, dst is the artifact, byte
// for byte.
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
	if !stockOps && (len(ops) > 0 || hasOFI || man.ChannelsLast) {
		tries := [][]string{nil}
		if hasOFI && (len(ops) > 0 || man.ChannelsLast) {
			tries = append(tries, []string{torchspeed.PassOptimizeForInference})
		}
		for _, skip := range tries {
			why, sv, err := saveOptimized(a, dst, skip, false)
			if err != nil {
				return nil, err
			}
			if why != "" {
				whyNot = append(whyNot, why)
				continue
			}
			return servedOpsModel(a, base, skip, sv, len(ops) > 0, whyNot), nil
		}
	}
	if !hasOFI {
		return &servedModel{note: servedStockNote(base, ops, whyNot)}, copyFile(a.Path, dst)
	}
	why, _, err := saveOptimized(a, dst, nil, true)
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

// servedOpsModel describes what saveOptimized wrote at base for a with the passes in skip left
// out; opPassesSaved: the artifact has passes that call torchspeed's operators (all saved).
func servedOpsModel(a *Artifact, base string, skip []string, sv saved, opPassesSaved bool, whyNot []string) *servedModel {
	s := &servedModel{ops: opPassesSaved || sv.mkldnn, passes: []string{}}
	for _, p := range a.Manifest.LoadPasses {
		if !slices.Contains(skip, p) {
			s.passes = append(s.passes, p)
		}
	}
	if sv.channelsLast {
		s.passes = append(s.passes, SavedChannelsLast)
	}
	if s.ops {
		s.note = fmt.Sprintf("%s holds the graph after %s and calls torchspeed's operators: the server loads %s first", base, strings.Join(s.passes, ", "), torch.OpsLibraryName)
	} else {
		s.note = fmt.Sprintf("%s holds the graph after %s, with libtorch's operators only", base, strings.Join(s.passes, ", "))
	}
	if slices.Contains(s.passes, torchspeed.PassOptimizeForInference) {
		if sv.mkldnn {
			s.note += fmt.Sprintf("; the optimize_for_inference graph keeps its oneDNN weights as torchspeed.MkldnnConstant (laid out for oneDNN again by the loading process), loads back in libtorch %s and answers like torchspeed.Load", torch.Version())
		} else {
			s.note += fmt.Sprintf("; the optimize_for_inference graph loads back in libtorch %s and answers like torchspeed.Load", torch.Version())
		}
	}
	if sv.channelsLast {
		s.note += "; the graph converts its 4-D float32 inputs to channels-last itself"
	}
	if len(skip) > 0 {
		s.note += fmt.Sprintf("; the optimize_for_inference graph is left out: libtorch %s cannot load it back (%s)", torch.Version(), whyNot[0])
	}
	return s
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

// SavedChannelsLast, in a served file's saved passes, says its graph converts its 4-D float32
// inputs to channels-last itself (the conversion torchspeed.Load applies to the inputs of an
// artifact whose manifest says channels_last).
const SavedChannelsLast = "channels_last_input"

// saved is what saveOptimized wrote into the served graph beyond the load-time passes.
type saved struct {
	// mkldnn: the optimize_for_inference graph's oneDNN constants and ops were swapped for
	// torchspeed's serializable ones (the graph needs torch.OpsLibraryName).
	mkldnn bool
	// channelsLast: the graph converts its inputs to channels-last.
	channelsLast bool
}

// saveOptimized saves the artifact's graph after its load-time passes (less skip; less those
// that call torchspeed's operators when stockOps) to dst and checks that plain loading reads
// it back and it answers like torchspeed.Load. Unless stockOps, an optimize_for_inference graph
// takes torchspeed's serializable oneDNN constants (torch.Module.ServeMKLDNN), and a channels-last
// artifact's graph converts its inputs itself. A non-empty why means it could not be kept
// (nothing is left at dst); err is for failures of the export itself.
func saveOptimized(a *Artifact, dst string, skip []string, stockOps bool) (why string, sv saved, err error) {
	m, err := torchspeed.Load(a.Path, torchspeed.LoadOptions{KeepThreads: true, StockOps: stockOps, SkipPasses: skip})
	if err != nil {
		return "", sv, err
	}
	defer m.Close()
	man := *m.Manifest
	// The saved graph is the result of the passes: torchspeed.Load must not apply them again,
	// except those StockOps left out.
	man.LoadPasses = []string{}
	// The digests are the artifact's records' and manifest's, not these: a stale one makes
	// torchspeed.Load and Inspect refuse the served file as modified.
	man.RecordsSHA256, man.RecordSHA256, man.ManifestSHA256 = "", nil, ""
	if stockOps {
		for _, p := range opPasses {
			if slices.Contains(m.Manifest.LoadPasses, p) {
				man.LoadPasses = append(man.LoadPasses, p)
			}
		}
	}
	mod, sv, release, err := servedGraph(m, a.Inputs, stockOps)
	if err != nil {
		return "rewriting it for serving failed: " + firstLine(err), sv, nil
	}
	defer release()
	if sv.channelsLast {
		man.ChannelsLast = false
	}
	raw, err := man.Marshal()
	if err != nil {
		return "", sv, err
	}
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".optimized")
	defer os.Remove(tmp)
	if err := mod.Save(tmp, map[string][]byte{torchspeed.ManifestFile: raw}); err != nil {
		return "saving it failed: " + firstLine(err), sv, nil
	}
	if why, err := checkPlain(m, tmp, a.Inputs); why != "" || err != nil {
		return why, sv, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", sv, fmt.Errorf("export: %w", err)
	}
	return "", sv, nil
}

// servedGraph is the loaded module as it is saved for serving: optimize_for_inference's oneDNN
// constants made serializable and the channels-last input conversion in the graph, where those
// apply (neither with stockOps: the first calls torchspeed's operators, and a stock served graph
// stays what it was). release closes what servedGraph made (not m's own module).
func servedGraph(m *torchspeed.Model, inputs []Tensor, stockOps bool) (mod *torch.Module, sv saved, release func(), err error) {
	mod = m.Module()
	var made []*torch.Module
	release = func() {
		for _, x := range made {
			x.Close()
		}
	}
	if stockOps {
		return mod, sv, release, nil
	}
	if slices.Contains(m.Manifest.LoadPasses, torchspeed.PassOptimizeForInference) && torch.MKLDNNServeUnavailable() == "" {
		next, constants, others, err := mod.ServeMKLDNN()
		if err != nil {
			release()
			return nil, sv, nil, err
		}
		made = append(made, next)
		mod, sv.mkldnn = next, constants+others > 0
	}
	var idx []int
	for i, t := range inputs {
		if m.Manifest.ChannelsLast && len(t.Shape) == 4 && t.DType == torch.Float32 {
			idx = append(idx, i)
		}
	}
	if len(idx) > 0 {
		next, err := mod.ChannelsLastInputs(idx)
		if err != nil {
			release()
			return nil, sv, nil, err
		}
		made = append(made, next)
		mod, sv.channelsLast = next, true
	}
	return mod, sv, release, nil
}

// checkPlain loads the file at path plainly and checks that it answers like m on the inputs; a
// non-empty why says how it does not.
func checkPlain(m *torchspeed.Model, path string, inputs []Tensor) (why string, err error) {
	plain, err := torch.Load(path)
	if err != nil {
		return "loading it back failed: " + firstLine(err), nil
	}
	defer plain.Close()
	if err := plain.Eval(); err != nil {
		return "loading it back failed: " + firstLine(err), nil
	}
	want, err := runBatch(m, inputs, 1)
	if err != nil {
		return "", err
	}
	got, err := runPlain(plain, inputs)
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
