package torch

/*
#include "torchspeed.h"
*/
import "C"

import "fmt"

// ExecSettings are how TorchScript methods execute, as Triton's PyTorch backend sets them
// before each execution from its model parameters. libtorch's defaults are all true.
type ExecSettings struct {
	// OptimizedExecution is torch::jit::setGraphExecutorOptimize (Triton:
	// DISABLE_OPTIMIZED_EXECUTION is its negation). Thread-local.
	OptimizedExecution bool `json:"optimized_execution"`
	// InferenceMode runs forward under c10::InferenceMode; false runs it under a NoGradGuard
	// only (Triton: INFERENCE_MODE). Thread-local.
	InferenceMode bool `json:"inference_mode"`
	// JITExecutor is the profiling executor (true) or the legacy one (Triton:
	// ENABLE_JIT_EXECUTOR). Process-wide, read when a method first runs.
	JITExecutor bool `json:"jit_executor"`
	// JITProfiling is torch::jit::getProfilingMode() (Triton: ENABLE_JIT_PROFILING).
	// Process-wide.
	JITProfiling bool `json:"jit_profiling"`
}

// DefaultExecSettings are libtorch's (and Triton's) defaults.
var DefaultExecSettings = ExecSettings{OptimizedExecution: true, InferenceMode: true, JITExecutor: true, JITProfiling: true}

func (s ExecSettings) String() string {
	return fmt.Sprintf("optimized_execution=%t inference_mode=%t jit_executor=%t jit_profiling=%t",
		s.OptimizedExecution, s.InferenceMode, s.JITExecutor, s.JITProfiling)
}

func cBool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

func (s ExecSettings) c() C.ts_exec_settings {
	return C.ts_exec_settings{optimized_execution: cBool(s.OptimizedExecution), inference_mode: cBool(s.InferenceMode),
		jit_executor: cBool(s.JITExecutor), jit_profiling: cBool(s.JITProfiling)}
}

// execSettingsHere reads the calling OS thread's settings (and the process-wide ones).
func execSettingsHere() (ExecSettings, error) {
	var c C.ts_exec_settings
	if err := statusErr(C.ts_exec_settings_get(&c)); err != nil {
		return ExecSettings{}, err
	}
	return ExecSettings{OptimizedExecution: c.optimized_execution != 0, InferenceMode: c.inference_mode != 0,
		JITExecutor: c.jit_executor != 0, JITProfiling: c.jit_profiling != 0}, nil
}

func setExecSettingsHere(s ExecSettings) error {
	c := s.c()
	return statusErr(C.ts_exec_settings_set(&c))
}

// CurrentExecSettings are the settings Forward runs with now: the shared inference thread's
// thread-local ones and the process-wide ones.
func CurrentExecSettings() (ExecSettings, error) {
	var (
		s   ExecSettings
		err error
	)
	Do(func() { s, err = execSettingsHere() })
	return s, err
}

// ForwardWith runs forward on the shared inference thread with s applied first, as Triton's
// backend applies its parameters before each execution, and the previous settings restored
// after (so other modules in the process keep theirs). The process-wide settings are switched
// for the call: do not run other modules on other threads meanwhile. The JIT executor is chosen
// on a module's first call, so a module should always be run with the same s.
func (m *Module) ForwardWith(s ExecSettings, inputs ...*Tensor) ([]Output, error) {
	var (
		outs []Output
		err  error
	)
	Do(func() {
		prev, e := execSettingsHere()
		if e != nil {
			err = e
			return
		}
		if e := setExecSettingsHere(s); e != nil {
			err = e
			return
		}
		outs, err = m.ForwardOnThisThread(inputs...)
		if e := setExecSettingsHere(prev); e != nil && err == nil {
			CloseOutputs(outs)
			outs, err = nil, fmt.Errorf("restore execution settings: %w", e)
		}
	})
	return outs, err
}
