package pipeline

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/fixtures/streamref"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// streamingConfig optimizes the streaming fixture as a user would configure it: x from the
// fixture's stream of chunks (seq:), sr a constant.
func streamingConfig(t *testing.T, f fixtures.Fixture, out, quantize string) *config.Config {
	t.Helper()
	s := f.Stream(t, "forward")
	c := config.Default()
	c.Model.Path = f.ModelPath()
	x := s.Args[0].Tensor
	c.Model.Inputs = []config.Input{
		{Name: "x", Shape: x.Shape[1:], DType: x.DType, Data: "seq:" + f.Path(x.File)},
		{Name: "sr", Type: "int", Value: 16000},
	}
	c.Quantize.Mode = quantize
	c.Bench.Runs, c.Bench.Warmup, c.Bench.StageRuns = 8, 1, 4
	c.Output.Dir = out
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &c
}

// replay runs the fixture's reference stream on a fresh session of the model (a reset state)
// and returns the largest difference from PyTorch's outputs.
func replay(t *testing.T, m *torchspeed.Model, ref *streamref.Ref) float64 {
	t.Helper()
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	worst := 0.0
	for i := 0; i < ref.Calls(); i++ {
		out, err := s.Run(ref.Args(i)...)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		d, err := ref.Diff(i, out)
		out.Close()
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, d)
	}
	return worst
}

// The streaming fixture (forward(x, sr: int), LSTM state and a context buffer in attributes,
// reset_states) optimizes end to end; the saved artifact keeps reset_states, records its state
// in the manifest, and a fresh load replays PyTorch's 100-call stream from a reset state.
func TestOptimizeStreaming(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "streaming")
	ref := streamref.Load(t, f, "forward")
	orig, err := torchspeed.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	origDiff := replay(t, orig, ref)

	out := t.TempDir()
	rep, err := Run(context.Background(), streamingConfig(t, f, out, "none"), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Stages {
		t.Logf("stage %-34s %-10s max abs %v  %s", s.Name, s.Status, deref(s.MaxAbsErr), s.Reason)
		if (s.Name == "freeze" || s.Name == "fold conv+bn") && s.Status == report.StatusRejected {
			t.Errorf("exact pass %s rejected: %s", s.Name, s.Reason)
		}
		if s.Name == "freeze" && s.MaxAbsErr != nil && *s.MaxAbsErr != 0 {
			t.Errorf("freeze differs from the original by %g over the stream from a reset state; want 0", *s.MaxAbsErr)
		}
	}
	m, err := torchspeed.Load(*rep.Artifact, torchspeed.LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mf := m.Manifest
	if !mf.Stateful || mf.ResetMethod != "reset_states" || !slices.Equal(mf.StateAttributes, f.State) {
		t.Errorf("manifest: stateful %v, reset %q, state %v; want true, reset_states, %v", mf.Stateful, mf.ResetMethod, mf.StateAttributes, f.State)
	}
	if methods, _ := m.Module().Methods(); !slices.Contains(methods, "reset_states") {
		t.Errorf("the artifact lost reset_states (methods %v)", methods)
	}
	if len(mf.Inputs) != 2 || mf.Inputs[1].Type != "int" || string(mf.Inputs[1].Value) != "16000" {
		t.Errorf("manifest inputs %+v: want x and sr: int = 16000", mf.Inputs)
	}
	got := replay(t, m, ref)
	t.Logf("streaming, 100-call stream vs PyTorch: original max abs diff %.3g, artifact (%s) %.3g", origDiff, strings.Join(mf.Steps, "+"), got)
	if origDiff > 1e-5 || got > 1e-5 {
		t.Errorf("stream differs from PyTorch's: original %.3g, artifact %.3g (want <= 1e-5)", origDiff, got)
	}
	if v := rep.Validation; v == nil || !v.Passed || v.Synthetic || v.Samples != ref.Calls() {
		t.Errorf("validation %+v: want a pass on the 100 calls of the configured data", v)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
