// How a module's methods execute, set the way Triton's PyTorch backend sets them before each
// execution (pytorch_backend src/pt/model_instance_state.cc, ModelInstanceState::Execute):
// torch::jit::setGraphExecutorOptimize, c10::InferenceMode under a NoGradGuard, and the JIT's
// executor and profiling modes.
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include "internal.h"

namespace tsimpl {
thread_local bool tl_inference_mode = true;
}  // namespace tsimpl

extern "C" {

ts_status* ts_exec_settings_get(ts_exec_settings* out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(out, "exec_settings_get");
  ts_exec_settings s;
  s.optimized_execution = torch::jit::getGraphExecutorOptimize() ? 1 : 0;
  s.inference_mode = tsimpl::tl_inference_mode ? 1 : 0;
  s.jit_executor = torch::jit::getExecutorMode().load() ? 1 : 0;
  s.jit_profiling = torch::jit::getProfilingMode().load() ? 1 : 0;
  *out = s;
  TS_API_END("exec_settings_get")
}

ts_status* ts_exec_settings_set(const ts_exec_settings* s) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(s, "exec_settings_set");
  for (int32_t v : {s->optimized_execution, s->inference_mode, s->jit_executor, s->jit_profiling})
    TS_CHECK_ARG(v == 0 || v == 1, "exec_settings_set", "every setting must be 0 or 1, got " + std::to_string(v));
  torch::jit::setGraphExecutorOptimize(s->optimized_execution != 0);
  tsimpl::tl_inference_mode = s->inference_mode != 0;
  torch::jit::getExecutorMode() = s->jit_executor != 0;
  torch::jit::getProfilingMode() = s->jit_profiling != 0;
  TS_API_END("exec_settings_set")
}

}  // extern "C"
