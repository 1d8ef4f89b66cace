package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/callargs"
	"github.com/torchspeed/torchspeed/pkg/config"
)

// Models whose method takes more than tensors (forward(x, sr: int)), keeps state, or is timed
// on real data (--input, a config's data) run through sessions and typed arguments
// (pkg/callargs); tensor-only models on random inputs keep the plain forward path.

// givesValues reports whether a config's inputs give values (data files, constants, types
// other than Tensor) rather than only shapes for random tensors.
func givesValues(inputs []config.Input) bool {
	for _, in := range inputs {
		if in.Data != "" || in.Value != nil || !in.IsTensor() {
			return true
		}
	}
	return false
}

func (b *benchCmd) callInputs() callInputs {
	return callInputs{inputs: b.values, shapes: b.shapes, dtypes: b.dtypes, method: b.method, seed: b.seed, config: b.cfgInputs}
}

// typedPlans builds each model's call arguments when bench needs the typed path, else nil.
func (b *benchCmd) typedPlans(models []*benchrun.Loaded, log io.Writer) ([]*callargs.Plan, error) {
	ci := b.callInputs()
	typed, err := ci.typed(models[0].Model)
	if err != nil || !typed {
		return nil, err
	}
	if b.sweeping() {
		return nil, exitcode.Usagef("bench: sweeps change the batch of tensor-only inputs; %s takes typed or real-data arguments: measure it with --streams N or --instances N", models[0].Spec.Name)
	}
	var plans []*callargs.Plan
	for _, l := range models {
		p, err := ci.plan("bench", l.Model, log)
		if err != nil {
			closePlans(plans)
			return nil, err
		}
		plans = append(plans, p)
	}
	return plans, nil
}

func closePlans(plans []*callargs.Plan) {
	for _, p := range plans {
		p.Close()
	}
}

// target is one stream of the first model for a measurement: its forward on random inputs, or
// a session on the plan's arguments. done releases it.
func (b *benchCmd) target(l *benchrun.Loaded, ins []benchrun.InputSpec, plans []*callargs.Plan) (bench.Target, func(), error) {
	if plans != nil {
		t, err := l.SessionTarget(plans[0].Method, plans[0])
		if err != nil {
			return nil, nil, err
		}
		return t, func() { t.Close() }, nil
	}
	inputs, err := benchrun.MakeInputs(ins, 0, b.seed)
	if err != nil {
		return nil, nil, err
	}
	return l.Target(inputs), func() { benchrun.CloseTensors(inputs) }, nil
}

// serveRounds is the hidden --serve mode: timed rounds on request (benchrun.ServeTarget).
func (b *benchCmd) serveRounds(c *cobra.Command, l *benchrun.Loaded, ins []benchrun.InputSpec, plans []*callargs.Plan, settings map[string]string) error {
	if plans == nil {
		return benchrun.ServeRounds(c.InOrStdin(), c.OutOrStdout(), l, ins, b.seed, b.warmup, settings)
	}
	var t *benchrun.SessionTarget
	var err error
	// The session's calls run on the inference worker, where ServeTarget times them.
	torch.Do(func() { t, err = l.SessionTarget(plans[0].Method, plans[0]) })
	if err != nil {
		return err
	}
	defer t.Close()
	return benchrun.ServeTarget(c.InOrStdin(), c.OutOrStdout(), t, b.warmup, settings)
}
