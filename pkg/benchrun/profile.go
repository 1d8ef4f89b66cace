package benchrun

import (
	"fmt"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// MaxProfileRuns caps the profiled forwards of one model: each keeps every op's time (a
// ResNet-50 forward lists about 170), so a time-limited profile of a fast model would otherwise
// grow without bound.
const MaxProfileRuns = 1000

// profileWarmup profiled forwards are run and dropped first: the first forwards with the
// callbacks installed are slower than the rest, and a model profiled without timed runs before
// (an artifact's original) still runs TorchScript's profiling passes in its first two.
const profileWarmup = 3

// ProfileOps times l's forward op by op on inputs (the caller's to close): o.Runs profiled
// forwards, or as many as fit in o.Duration (at most MaxProfileRuns), after a few dropped ones,
// all on the shared inference thread. Time it after the model's timed runs: the profile's
// callbacks slow every op, so its figures are for comparing ops and models profiled alike.
func ProfileOps(l *Loaded, inputs []*torch.Tensor, o bench.Options) (*bench.OpProfile, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("profile %s: %w", l.Spec.Name, err)
	}
	in := inputs
	if l.Model.Manifest != nil && l.Model.Manifest.ChannelsLast {
		// As Predict and the timed runs do: the conversion is part of the artifact's forward.
		conv, release, err := torchspeed.ChannelsLastInputs(inputs)
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", l.Spec.Name, err)
		}
		defer release()
		in = conv
	}
	m := l.Model.Module()
	var runs []bench.OpRun
	var err error
	torch.Do(func() {
		for range profileWarmup {
			if _, err = m.OpProfileOnThisThread(in...); err != nil {
				return
			}
		}
		start := time.Now()
		for len(runs) < MaxProfileRuns {
			if o.Runs > 0 && len(runs) >= o.Runs {
				break
			}
			if o.Duration > 0 && len(runs) > 0 && time.Since(start) >= o.Duration {
				break
			}
			var t torch.OpTiming
			if t, err = m.OpProfileOnThisThread(in...); err != nil {
				return
			}
			runs = append(runs, opRun(t))
		}
	})
	if err != nil {
		return nil, err
	}
	return bench.SummarizeOps(l.Spec.Name, runs)
}

func opRun(t torch.OpTiming) bench.OpRun {
	r := bench.OpRun{Total: time.Duration(t.TotalNS), Ops: make([]bench.OpCall, len(t.Ops))}
	for i, op := range t.Ops {
		r.Ops[i] = bench.OpCall{Op: op.Op, Shapes: op.Shapes, Module: op.Scope, Time: time.Duration(op.NS)}
	}
	return r
}
