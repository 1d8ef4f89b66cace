package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/callargs"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// callInputs are the flags (and config values) that give a method's arguments, for run and
// bench: --input [NAME=]VALUE, --input-shape/--dtype (random tensors), --method, and a config's
// model.method and model.inputs.
type callInputs struct {
	inputs []string
	shapes []string
	dtypes []string
	method string
	seed   uint64
	config []config.Input
}

func (ci *callInputs) addFlags(c *cobra.Command) {
	f := c.Flags()
	f.StringArrayVar(&ci.inputs, "input", nil, "an argument's value: [NAME=]FILE.npy, FILE.npz[:MEMBER], seq:CHUNKS.npy, A.npy,B.npy, int:N, float:X, bool:true|false, str:TEXT or none (repeat; positional without NAME=)")
	f.StringArrayVar(&ci.shapes, "input-shape", nil, "shape of a random tensor argument, e.g. 1x3x224x224 (repeat for several, in order)")
	f.StringArrayVar(&ci.dtypes, "dtype", nil, "dtype of each --input-shape input (float32, int64, ...; default float32)")
	f.StringVar(&ci.method, "method", "", "method to call (default: forward, or the artifact's)")
	f.Uint64Var(&ci.seed, "seed", 1, "seed for random inputs")
	completeEnums(c, map[string][]string{"dtype": dtypes})
}

// fromConfig takes the method and the inputs from a config where no flag gave them.
func (ci *callInputs) fromConfig(cfg *config.Config) {
	if ci.method == "" {
		ci.method = cfg.Model.Method
	}
	if len(ci.shapes) == 0 {
		ci.config = cfg.Model.Inputs
	}
}

// typed reports whether the arguments need the typed call path (bench keeps its plain tensor
// path otherwise): a value from --input or a config's data/value, another method than forward,
// or a forward whose schema has arguments that are not tensors.
func (ci *callInputs) typed(m *torchspeed.Model) (bool, error) {
	if len(ci.inputs) > 0 || (ci.method != "" && ci.method != "forward") || m.Method() != "forward" {
		return true, nil
	}
	for _, in := range ci.config {
		if in.Data != "" || !in.IsTensor() || in.Value != nil {
			return true, nil
		}
	}
	s, err := m.Module().MethodSchema("forward")
	if err != nil {
		return false, err
	}
	for _, a := range s.Arguments {
		if a.Kind != "tensor" {
			return true, nil
		}
	}
	return false, nil
}

// plan checks the method and builds every call's arguments from the flags, the config, and
// else the artifact's manifest; an input that cannot be used is a usage error naming it.
func (ci *callInputs) plan(cmd string, m *torchspeed.Model, log io.Writer) (*callargs.Plan, error) {
	method := ci.method
	if method == "" {
		method = m.Method()
	}
	methods, err := m.Module().Methods()
	if err != nil {
		return nil, err
	}
	if !slices.Contains(methods, method) {
		return nil, exitcode.Usagef("%s: --method %s: the model has no method %q (it has %s)", cmd, method, method, strings.Join(methods, ", "))
	}
	schema, err := m.Module().MethodSchema(method)
	if err != nil {
		return nil, err
	}
	usage := func(err error) error { return exitcode.New(exitcode.Usage, fmt.Errorf("%s: %w", cmd, err)) }
	fromCfg, err := callargs.FromConfig(ci.config)
	if err != nil {
		return nil, usage(err)
	}
	fromFlags, err := callargs.FromFlags("--input", ci.inputs)
	if err != nil {
		return nil, usage(err)
	}
	given := callargs.Merge(fromCfg, fromFlags)
	if m.Manifest != nil {
		// An artifact's shapes check the files given for its arguments.
		for i := range given {
			g := &given[i]
			for _, in := range m.Manifest.Inputs {
				if g.Name != "" && in.Name == g.Name && g.Shape == nil && g.Src.Kind == config.SourceFile && len(in.Shape) > 0 {
					g.Shape, g.BatchDim = in.Shape, in.BatchDim
				}
			}
		}
	}
	what, shapes, dts := cmd+": --input-shape", ci.shapes, ci.dtypes
	var names []string
	if len(given) == 0 && len(shapes) == 0 && m.Manifest != nil {
		for _, in := range m.Manifest.Inputs {
			if len(in.Value) == 0 && (in.Type == "" || in.Type == "Tensor") {
				shapes = append(shapes, config.FormatShape(in.Shape))
				dts = append(dts, in.DType)
				names = append(names, in.Name)
			}
		}
		what = cmd + ": the manifest of " + m.Module().Name()
		if len(shapes) > 0 {
			fmt.Fprintf(log, "%s: inputs %s from the artifact's manifest\n", cmd, strings.Join(shapes, ", "))
		}
	}
	specs, err := parseInputs(what, shapes, dts)
	if err != nil {
		return nil, err
	}
	for i, s := range specs {
		g := callargs.Given{What: fmt.Sprintf("--input-shape %s", shapes[i]), Shape: s.Shape, DType: s.DType.String(), Random: true}
		if names != nil {
			// By name where the schema has it (manifests made without a config name
			// them input0, input1, ...), else in order.
			g.What = "the manifest of " + m.Module().Name()
			if _, ok := schema.Argument(names[i]); ok {
				g.Name = names[i]
			}
		}
		given = append(given, g)
	}
	rng := benchrun.NewRand(ci.seed)
	var man []torchspeed.InputSpec
	if m.Manifest != nil {
		man = m.Manifest.Inputs
	}
	plan, err := callargs.Build(schema, given, callargs.Options{
		Random: func(shape []int64, dt torch.DType) (*torch.Tensor, error) {
			return benchrun.RandomTensor(rng, shape, dt, nil)
		},
		Manifest: man,
	})
	if err != nil {
		return nil, usage(err)
	}
	return plan, nil
}
