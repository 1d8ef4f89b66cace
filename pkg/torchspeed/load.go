package torchspeed

import (
	"archive/zip"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// Model is a loaded artifact, ready for Predict from many goroutines.
type Model struct {
	Manifest *Manifest
	// Warnings are things a caller should log: e.g. a libtorch version other than the one the
	// artifact was measured with.
	Warnings []string
	m        *torch.Module
	state    stateInfo // see session.go
}

// LoadOptions adjust Load.
type LoadOptions struct {
	// Threads overrides the manifest's intra-op thread count (0: keep the manifest's).
	Threads int
	// KeepThreads leaves libtorch's thread settings alone (a process that sets them itself).
	KeepThreads bool
	// Method and ResetMethod name, for a plain TorchScript file, the method Run calls (its
	// state is what Stateful reports) and the method that resets that state (a config's
	// model.method and model.reset_method); an artifact's manifest names its own.
	Method, ResetMethod string
	// StockOps leaves out the load-time passes whose result runs only where torchspeed's shim
	// is loaded (PassFastQDQ, PassFastLinear, PassFastConv, PassFuseConvAdd): for a module that is saved again
	// for stock libtorch.
	StockOps bool
	// SkipPasses leaves out the listed load-time passes (e.g. PassOptimizeForInference, whose
	// graph libtorch 1.13 saves but cannot load back): for a module that is saved again.
	SkipPasses []string
	// OpLibraries are shared libraries of custom operators (TORCH_LIBRARY extensions) the
	// model calls, loaded with torch.LoadLibrary before the model.
	OpLibraries []string
}

// LoadOpLibraries loads shared libraries of custom operators, in order, before the models that
// call them are loaded (torch.LoadLibrary). The error names the library that failed.
func LoadOpLibraries(paths []string) error {
	for _, p := range paths {
		if err := torch.LoadLibrary(p); err != nil {
			return err
		}
	}
	return nil
}

// Load opens an artifact written by `torchspeed optimize`, re-applies its load-time passes and
// applies its runtime settings. A plain TorchScript file without a manifest loads too, as is.
//
// Before libtorch reads the file, Load checks every record's CRC and, for an artifact, that its
// records match the digest in its manifest; it then sets the artifact's quantized engine and
// loads under one lock, since INT8 weights are packed during the load for the engine set then.
func Load(path string, opts ...LoadOptions) (*Model, error) {
	var o LoadOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	// Before libtorch runs anything of the model: a kernel variable naming instructions this CPU
	// lacks stops the process on an illegal instruction at the first call that reaches it.
	here, err := cpu.Detect(cpu.Options{})
	if err != nil {
		here = nil // the CPU cannot be read: nothing to check against
	} else if err := runenv.CheckISAEnv(os.LookupEnv, runenv.MachineOf(here)); err != nil {
		return nil, fmt.Errorf("load %q: %w", path, err)
	}
	if err := LoadOpLibraries(o.OpLibraries); err != nil {
		return nil, err
	}
	man, err := VerifyArchive(path)
	if err != nil {
		zr, zerr := zip.OpenReader(path)
		if zerr == nil {
			zr.Close()
			return nil, err
		}
		// Not a readable zip at all: torch.Load says why (missing, empty, not an archive).
		mod, lerr := torch.Load(path)
		if lerr != nil {
			return nil, lerr
		}
		mod.Close()
		return nil, err
	}
	model := &Model{}
	engine := ""
	if man != nil {
		engine = man.QEngine
	}
	mod, err := torch.LoadWithEngine(path, engine)
	if err != nil {
		return nil, err
	}
	if man == nil {
		model.Manifest = &Manifest{Precision: "unknown", Method: o.Method, ResetMethod: o.ResetMethod}
		model.Warnings = append(model.Warnings, fmt.Sprintf("%s has no torchspeed manifest: loaded as a plain TorchScript model", path))
		if err := mod.Eval(); err != nil {
			mod.Close()
			return nil, err
		}
		model.m = mod
		if err := model.initState(); err != nil {
			mod.Close()
			return nil, fmt.Errorf("load model %q: %w", path, err)
		}
		return model, nil
	}
	model.Manifest = man
	if man.RecordsSHA256 == "" {
		model.Warnings = append(model.Warnings, fmt.Sprintf("artifact %q records no digest (written by an older torchspeed): its integrity cannot be checked: run torchspeed optimize again", path))
	} else if man.ManifestSHA256 == "" {
		model.Warnings = append(model.Warnings, fmt.Sprintf("artifact %q records no digest of its manifest (written by an older torchspeed): changes to the manifest cannot be detected: run torchspeed optimize again", path))
	}
	model.Warnings = append(model.Warnings, man.CPUWarnings(path, CPUOf(here))...)
	if have := torch.Version(); majorMinor(have) != majorMinor(man.Libtorch) {
		model.Warnings = append(model.Warnings, fmt.Sprintf("artifact %q was made and measured with libtorch %s, this process has %s: re-run torchspeed optimize with this libtorch for figures that hold", path, torch.Clip(man.Libtorch), have))
	}
	if !o.KeepThreads {
		threads := man.Runtime.Threads
		if o.Threads != 0 {
			threads = o.Threads
		}
		if threads < 0 && o.Threads == 0 {
			model.Warnings = append(model.Warnings, fmt.Sprintf("artifact %q asks for %d threads: ignored, libtorch's default kept", path, threads))
			threads = 0
		}
		// A manifest comes from another machine: more threads than this process may run would
		// oversubscribe it (a manifest asking for 2000 grew a host process to 4,068 threads).
		if avail := torch.AvailableCPUs(); threads > avail && o.Threads == 0 {
			model.Warnings = append(model.Warnings, fmt.Sprintf("artifact %q asks for %d threads, this process may use %d CPUs: using %d", path, threads, avail, avail))
			threads = avail
		}
		if threads != 0 {
			if err := torch.SetNumThreads(threads); err != nil {
				mod.Close()
				return nil, fmt.Errorf("load artifact %q: %w", path, err)
			}
		}
	}
	for _, pass := range man.LoadPasses {
		if slices.Contains(o.SkipPasses, pass) {
			continue
		}
		switch pass {
		case PassFastQDQ, PassFastLinear, PassLinearBF16, PassFastConv, PassFuseConvAdd: // last, below
		case PassFreeze:
			fr, err := mod.Freeze(man.preserved()...)
			if err != nil {
				mod.Close()
				return nil, fmt.Errorf("load artifact %q: re-applying %s: %w", path, pass, err)
			}
			mod.Close()
			mod = fr
		case PassOptimizeForInference:
			opt, err := mod.OptimizeForInference()
			if err != nil {
				mod.Close()
				return nil, fmt.Errorf("load artifact %q: re-applying %s: %w", path, pass, err)
			}
			mod.Close()
			mod = opt
		default:
			mod.Close()
			return nil, fmt.Errorf("load artifact %q: unknown load-time pass %q (written by torchspeed %s): upgrade torchspeed", path, torch.Clip(pass), torch.Clip(man.Torchspeed))
		}
	}
	if o.applies(man, PassFastLinear) {
		fast, _, _, err := mod.FastLinear()
		if err != nil {
			mod.Close()
			return nil, fmt.Errorf("load artifact %q: re-applying %s: %w", path, PassFastLinear, err)
		}
		mod.Close()
		mod = fast
	}
	if o.applies(man, PassLinearBF16) {
		bf, _, err := mod.LinearBF16()
		if err != nil {
			mod.Close()
			return nil, fmt.Errorf("load artifact %q: re-applying %s: %w", path, PassLinearBF16, err)
		}
		mod.Close()
		mod = bf
	}
	if o.applies(man, PassFastConv) {
		fast, _, _, err := mod.FastConv()
		if err != nil {
			mod.Close()
			return nil, fmt.Errorf("load artifact %q: re-applying %s: %w", path, PassFastConv, err)
		}
		mod.Close()
		mod = fast
	}
	if o.applies(man, PassFuseConvAdd) {
		if why := torch.ConvAddUnavailable(); why != "" {
			model.Warnings = append(model.Warnings, fmt.Sprintf("artifact %q lists %s, but %s: its convolutions and adds run unfused", path, PassFuseConvAdd, why))
		} else {
			fused, _, err := mod.FuseConvAdd()
			if err != nil {
				mod.Close()
				return nil, fmt.Errorf("load artifact %q: re-applying %s: %w", path, PassFuseConvAdd, err)
			}
			mod.Close()
			mod = fused
		}
	}
	if o.applies(man, PassFastQDQ) {
		fast, _, err := mod.FastQDQ()
		if err != nil {
			mod.Close()
			return nil, fmt.Errorf("load artifact %q: re-applying %s: %w", path, PassFastQDQ, err)
		}
		mod.Close()
		mod = fast
	}
	model.m = mod
	if err := model.initState(); err != nil {
		mod.Close()
		return nil, fmt.Errorf("load artifact %q: %w", path, err)
	}
	return model, nil
}

// applies says whether Load runs pass, one of the passes whose result calls torchspeed's
// operators, on an artifact with manifest man.
func (o *LoadOptions) applies(man *Manifest, pass string) bool {
	return slices.Contains(man.LoadPasses, pass) && !o.StockOps && !slices.Contains(o.SkipPasses, pass)
}

func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// Module is the underlying TorchScript module (owned by the Model).
func (m *Model) Module() *torch.Module {
	if m == nil {
		return nil
	}
	return m.m
}

// Predict runs the model. 4-D float inputs are converted to channels-last when the artifact
// wants it; callers pass ordinary contiguous tensors. Safe from many goroutines.
func (m *Model) Predict(inputs ...*torch.Tensor) ([]torch.Output, error) {
	if err := m.usable(); err != nil {
		return nil, fmt.Errorf("predict: %w", err)
	}
	defer m.lockIfStateful()()
	return m.predictOn(m.m, nil, inputs)
}

func (m *Model) predictOn(mod *torch.Module, th *torch.Thread, inputs []*torch.Tensor) ([]torch.Output, error) {
	if err := checkInputs(inputs); err != nil {
		return nil, fmt.Errorf("predict: %w", err)
	}
	if outs, ok, err := m.typedPredict(mod, th, inputs); ok {
		return outs, err
	}
	if m.Manifest != nil && len(m.Manifest.Inputs) > 0 && len(inputs) != len(m.Manifest.Inputs) {
		return nil, fmt.Errorf("predict: the artifact takes %d input(s) (%s), got %d", len(m.Manifest.Inputs), describeSpecs(m.Manifest.Inputs), len(inputs))
	}
	if m.Manifest == nil || !m.Manifest.ChannelsLast {
		return tensorCall(mod, th, m.state.method, inputs)
	}
	conv, release, err := ChannelsLastInputs(inputs)
	if err != nil {
		return nil, err
	}
	defer release()
	return tensorCall(mod, th, m.state.method, conv)
}

// ChannelsLastInputs returns inputs with every 4-D float32 tensor copied to channels-last, as a
// channels-last artifact wants them; release frees the copies. Predict, optimize's candidates
// and bench all convert this way, so they measure what users run.
func ChannelsLastInputs(inputs []*torch.Tensor) ([]*torch.Tensor, func(), error) {
	if err := checkInputs(inputs); err != nil {
		return nil, nil, err
	}
	conv := make([]*torch.Tensor, len(inputs))
	var made []*torch.Tensor
	release := func() {
		for _, t := range made {
			t.Close()
		}
	}
	for i, t := range inputs {
		conv[i] = t
		if len(t.Shape()) == 4 && t.DType() == torch.Float32 {
			cl, err := t.ChannelsLast()
			if err != nil {
				release()
				return nil, nil, err
			}
			made = append(made, cl)
			conv[i] = cl
		}
	}
	return conv, release, nil
}

// checkInputs refuses nil inputs with the position, before anything dereferences them.
func checkInputs(inputs []*torch.Tensor) error {
	for i, t := range inputs {
		if t == nil {
			return fmt.Errorf("input %d is nil: pass a tensor from torch.NewTensor", i)
		}
	}
	return nil
}

func describeSpecs(s []InputSpec) string {
	parts := make([]string, len(s))
	for i, in := range s {
		parts[i] = fmt.Sprintf("%s %s%v", in.Name, in.DType, in.Shape)
	}
	return strings.Join(parts, ", ")
}

// Close frees the model; it waits for Predict calls in flight. Sessions keep their own copies.
// It is idempotent.
func (m *Model) Close() error {
	if m == nil {
		return nil
	}
	m.state.pristine.Close()
	return m.m.Close()
}
