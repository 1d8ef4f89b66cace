package torch_test

import (
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// Each setting Triton's PyTorch backend offers runs a freshly loaded model (its executor is
// chosen on the first call) to the outputs PyTorch saved, and leaves the settings other calls
// run with as they were.
func TestForwardWithExecSettings(t *testing.T) {
	man := fixtures.Load(t)
	d := torch.DefaultExecSettings
	noProfiling, noExecutor, noOptimize, noInference := d, d, d, d
	noProfiling.JITProfiling = false
	noExecutor.JITExecutor = false
	noOptimize.OptimizedExecution = false
	noInference.InferenceMode = false
	for _, name := range []string{"digits", "transformer_traced"} {
		f := man.Get(t, name)
		for _, s := range []torch.ExecSettings{d, noProfiling, noExecutor, noOptimize, noInference} {
			m := loadFixture(t, f)
			ins := tensorsOf(t, f.InputArrays(t))
			// Past the profiling executor's profiled runs, to its optimized plan.
			for range 4 {
				outs, err := m.ForwardWith(s, ins...)
				if err != nil {
					t.Fatalf("%s with %v: %v", name, s, err)
				}
				checkOutputs(t, f, outs, crossPathTol)
				torch.CloseOutputs(outs)
			}
			now, err := torch.CurrentExecSettings()
			if err != nil {
				t.Fatal(err)
			}
			if now != d {
				t.Fatalf("%s: after ForwardWith(%v) the settings are %v, want them restored to %v", name, s, now, d)
			}
		}
	}
}
