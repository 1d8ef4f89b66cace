package torchspeed

import (
	"fmt"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
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
}

// Load opens an artifact written by `torchspeed optimize`, re-applies its load-time passes and
// applies its runtime settings. A plain TorchScript file without a manifest loads too, as is.
func Load(path string, opts ...LoadOptions) (*Model, error) {
	var o LoadOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	mod, err := torch.Load(path)
	if err != nil {
		return nil, err
	}
	extra, err := mod.ExtraFiles()
	if err != nil {
		mod.Close()
		return nil, fmt.Errorf("load artifact %q: %w", path, err)
	}
	model := &Model{m: mod}
	raw, ok := extra[ManifestFile]
	if !ok {
		model.Manifest = &Manifest{Precision: "unknown"}
		model.Warnings = append(model.Warnings, fmt.Sprintf("%s has no torchspeed manifest: loaded as a plain TorchScript model", path))
		if err := mod.Eval(); err != nil {
			mod.Close()
			return nil, err
		}
		if err := model.initState(); err != nil {
			mod.Close()
			return nil, fmt.Errorf("load model %q: %w", path, err)
		}
		return model, nil
	}
	man, err := ParseManifest(raw)
	if err != nil {
		mod.Close()
		return nil, fmt.Errorf("load artifact %q: %w", path, err)
	}
	model.Manifest = man
	if have := torch.Version(); majorMinor(have) != majorMinor(man.Libtorch) {
		model.Warnings = append(model.Warnings, fmt.Sprintf("artifact %q was made and measured with libtorch %s, this process has %s: re-run torchspeed optimize with this libtorch for figures that hold", path, man.Libtorch, have))
	}
	if man.QEngine != "" {
		// The engine must be set before the INT8 model's first run (its packed weights are
		// engine-specific).
		if err := torch.SetQEngine(man.QEngine); err != nil {
			mod.Close()
			return nil, fmt.Errorf("load artifact %q: made for quantized engine %s: %w", path, man.QEngine, err)
		}
	}
	if !o.KeepThreads {
		threads := man.Runtime.Threads
		if o.Threads > 0 {
			threads = o.Threads
		}
		if threads > 0 {
			if err := torch.SetNumThreads(threads); err != nil {
				mod.Close()
				return nil, err
			}
		}
	}
	for _, pass := range man.LoadPasses {
		switch pass {
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
			return nil, fmt.Errorf("load artifact %q: unknown load-time pass %q (written by torchspeed %s): upgrade torchspeed", path, pass, man.Torchspeed)
		}
	}
	model.m = mod
	if err := model.initState(); err != nil {
		mod.Close()
		return nil, fmt.Errorf("load artifact %q: %w", path, err)
	}
	return model, nil
}

func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// Module is the underlying TorchScript module (owned by the Model).
func (m *Model) Module() *torch.Module { return m.m }

// Predict runs the model. 4-D float inputs are converted to channels-last when the artifact
// wants it; callers pass ordinary contiguous tensors. Safe from many goroutines.
func (m *Model) Predict(inputs ...*torch.Tensor) ([]torch.Output, error) {
	defer m.lockIfStateful()()
	return m.predictOn(m.m, nil, inputs)
}

func (m *Model) predictOn(mod *torch.Module, th *torch.Thread, inputs []*torch.Tensor) ([]torch.Output, error) {
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

func describeSpecs(s []InputSpec) string {
	parts := make([]string, len(s))
	for i, in := range s {
		parts[i] = fmt.Sprintf("%s %s%v", in.Name, in.DType, in.Shape)
	}
	return strings.Join(parts, ", ")
}

// Close frees the model; it waits for Predict calls in flight. Sessions keep their own copies.
func (m *Model) Close() error {
	m.state.pristine.Close()
	return m.m.Close()
}
