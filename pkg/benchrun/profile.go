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
		runs, err = profileLoop(o, func() (torch.OpTiming, error) { return m.OpProfileOnThisThread(in...) })
	})
	if err != nil {
		return nil, err
	}
	return bench.SummarizeOps(l.Spec.Name, runs)
}

// ProfileCalls is ProfileOps for a model called with calls' arguments (typed values, a stream's
// ordered sequences): each profiled run is one call of method, made as the timed runs make it (a
// session of its own on the shared inference thread, the sequences replayed from a reset state;
// a reset, when a stream starts over, is in that call's profile).
func ProfileCalls(l *Loaded, method string, calls Calls, o bench.Options) (*bench.OpProfile, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("profile %s: %w", l.Spec.Name, err)
	}
	var runs []bench.OpRun
	var err error
	torch.Do(func() {
		var t *SessionTarget
		if t, err = l.SessionTarget(method, calls); err != nil {
			return
		}
		defer t.Close()
		runs, err = profileLoop(o, func() (torch.OpTiming, error) {
			if err := torch.OpProfileBegin(); err != nil {
				return torch.OpTiming{}, err
			}
			runErr := t.Run()
			timing, err := torch.OpProfileEnd() // always: the profile must not stay open
			if runErr != nil {
				return torch.OpTiming{}, fmt.Errorf("profile %s: %w", l.Spec.Name, runErr)
			}
			return timing, err
		})
	})
	if err != nil {
		return nil, err
	}
	return bench.SummarizeOps(l.Spec.Name, runs)
}

// profileLoop runs profile profileWarmup times, dropping those, then o.Runs times or for
// o.Duration (at least once, at most MaxProfileRuns), on the calling (inference) thread.
func profileLoop(o bench.Options, profile func() (torch.OpTiming, error)) ([]bench.OpRun, error) {
	for range profileWarmup {
		if _, err := profile(); err != nil {
			return nil, err
		}
	}
	var runs []bench.OpRun
	start := time.Now()
	for len(runs) < MaxProfileRuns {
		if o.Runs > 0 && len(runs) >= o.Runs {
			break
		}
		if o.Duration > 0 && len(runs) > 0 && time.Since(start) >= o.Duration {
			break
		}
		t, err := profile()
		if err != nil {
			return nil, err
		}
		runs = append(runs, opRun(t))
	}
	return runs, nil
}

func opRun(t torch.OpTiming) bench.OpRun {
	r := bench.OpRun{Total: time.Duration(t.TotalNS), Ops: make([]bench.OpCall, len(t.Ops))}
	for i, op := range t.Ops {
		r.Ops[i] = bench.OpCall{Op: op.Op, Shapes: op.Shapes, Module: op.Scope, Time: time.Duration(op.NS)}
	}
	return r
}
