// What the C entries' translation units share: the handle structs, inline conversions between
// the ABI's codes and ATen's types, and the exception barrier. Not part of the C ABI.
// Header-only over common.h, so the files of csrc/abi depend on these two headers (and on the
// passes' and kernels' headers) and never on each other.
#pragma once

#include <c10/core/QEngine.h>
#include <c10/util/Exception.h>
#include <torch/script.h>
#include <torch/version.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "common.h"
#include "torchspeed.h"

#if TORCH_VERSION_MAJOR < 1 || (TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR < 13)
#error "torchspeed needs libtorch 1.13 or newer"
#endif

struct ts_tensor {
  at::Tensor t;
};

struct ts_module {
  torch::jit::Module m;
  // Extra files read at load time, by name (without the "extra/" prefix).
  std::map<std::string, std::string> extra;
};

struct ts_outputs {
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
};

namespace tsimpl {

inline at::ScalarType to_scalar_type(int32_t code) {
  switch (code) {
    case TS_FLOAT32: return at::kFloat;
    case TS_FLOAT64: return at::kDouble;
    case TS_INT64: return at::kLong;
    case TS_INT32: return at::kInt;
    case TS_UINT8: return at::kByte;
    case TS_BOOL: return at::kBool;
    case TS_INT8: return at::kChar;
    case TS_INT16: return at::kShort;
    case TS_FLOAT16: return at::kHalf;
    case TS_BFLOAT16: return at::kBFloat16;
    default: fail(TS_CODE_INVALID_ARGUMENT, "unknown dtype code " + std::to_string(code));
  }
}

inline int32_t from_scalar_type(at::ScalarType st) {
  switch (st) {
    case at::kFloat: return TS_FLOAT32;
    case at::kDouble: return TS_FLOAT64;
    case at::kLong: return TS_INT64;
    case at::kInt: return TS_INT32;
    case at::kByte: return TS_UINT8;
    case at::kBool: return TS_BOOL;
    case at::kChar: return TS_INT8;
    case at::kShort: return TS_INT16;
    case at::kHalf: return TS_FLOAT16;
    case at::kBFloat16: return TS_BFLOAT16;
    case at::kQUInt8: return TS_QUINT8;
    case at::kQInt8: return TS_QINT8;
    case at::kQInt32: return TS_QINT32;
    default: return -1;
  }
}

inline std::vector<c10::IValue> make_inputs(ts_tensor* const* inputs, size_t n) {
  if (n > 0 && inputs == nullptr) fail(TS_CODE_INVALID_ARGUMENT, "inputs is NULL with n = " + std::to_string(n));
  std::vector<c10::IValue> v;
  v.reserve(n);
  for (size_t i = 0; i < n; i++) {
    if (inputs[i] == nullptr) fail(TS_CODE_INVALID_ARGUMENT, "input " + std::to_string(i) + " is NULL");
    v.emplace_back(inputs[i]->t);
  }
  return v;
}

static_assert(static_cast<int>(at::QEngine::NoQEngine) == 0 && static_cast<int>(at::QEngine::FBGEMM) == 1 &&
                  static_cast<int>(at::QEngine::QNNPACK) == 2,
              "engine_name_of's numbering");
#if TORCH_VERSION_MAJOR > 1 || TORCH_VERSION_MINOR >= 13
static_assert(static_cast<int>(at::QEngine::ONEDNN) == 3 && static_cast<int>(at::QEngine::X86) == 4,
              "engine_name_of's numbering");
#endif

// The quantized engine's name as PyTorch spells it in Python: "onednn", "x86", ...
inline std::string engine_name(at::QEngine e) { return engine_name_of(static_cast<int>(e)); }

// Sets the quantized engine by name; fails (TS_CODE_NOT_FOUND) naming the supported ones.
inline void select_engine(const std::string& want) {
  std::string have;
  for (auto e : at::globalContext().supportedQEngines()) {
    if (engine_name(e) == want) {
      at::globalContext().setQEngine(e);
      return;
    }
    have += (have.empty() ? "" : ", ") + engine_name(e);
  }
  fail(TS_CODE_NOT_FOUND,
       "engine \"" + clip(want, 40) + "\" is not supported by this libtorch build (supported: " + have + ")");
}

// The ts_code of a libtorch error: NotImplementedError is a missing kernel or feature; the rest
// are checks failing on the model or its inputs.
inline int32_t code_of(const c10::Error& e) noexcept {
  if (dynamic_cast<const c10::NotImplementedError*>(&e) != nullptr) return TS_CODE_UNSUPPORTED;
  return TS_CODE_MODEL_ERROR;
}

// Whether ts_module_forward/_run_method on this thread run under c10::InferenceMode
// (ts_exec_settings.inference_mode; runtime.cpp).
extern thread_local bool tl_inference_mode;

// Whether the calling thread is an inference thread: one that ts_worker_serve serves (and that
// runs Thread.Do's functions between serves). Set there, never cleared (runtime.cpp).
extern thread_local bool tl_inference_thread;

// For the length of a scope, limits the calling thread's OpenMP team to one thread, unless the
// thread is an inference thread (runtime.cpp). Every entry point that can run parallel ATen
// work (copies, conversions, loads, graph passes, quantization) from an arbitrary thread holds
// one, so that such work leaves no OpenMP pool behind on the caller's thread; forwards do not
// (a thread that runs a forward is an inference thread by its caller's choice).
class OneThreadTeam {
 public:
  OneThreadTeam();
  ~OneThreadTeam();
  OneThreadTeam(const OneThreadTeam&) = delete;
  OneThreadTeam& operator=(const OneThreadTeam&) = delete;

 private:
  int prev_ = 0;  // the count to restore; 0 when nothing was changed
};

}  // namespace tsimpl

// Every exported body runs inside this pair. The catch clauses allocate nothing that can throw
// (make_status never throws and falls back to the preallocated out-of-memory status):
// CodedError carries its code; bad_alloc is out of memory; c10::Error keeps its message without
// the C++ backtrace; any std::exception (torch::jit::ErrorReport is one, and not a c10::Error)
// is a model error, std::invalid_argument an invalid argument; anything else is internal.
// Nothing escapes into C or Go.
#define TS_API_BEGIN try {
#define TS_API_END(op)                                                                       \
  }                                                                                          \
  catch (const tsimpl::CodedError& e) {                                                      \
    return tsimpl::make_status(e.code(), op, e.what());                                      \
  }                                                                                          \
  catch (const std::bad_alloc&) {                                                            \
    return tsimpl::oom_status();                                                             \
  }                                                                                          \
  catch (const c10::Error& e) {                                                              \
    return tsimpl::make_status(tsimpl::code_of(e), op, e.what_without_backtrace());          \
  }                                                                                          \
  catch (const std::invalid_argument& e) {                                                   \
    return tsimpl::make_status(TS_CODE_INVALID_ARGUMENT, op, e.what());                      \
  }                                                                                          \
  catch (const std::exception& e) {                                                          \
    return tsimpl::make_status(TS_CODE_MODEL_ERROR, op, e.what());                           \
  }                                                                                          \
  catch (...) {                                                                              \
    return tsimpl::make_status(TS_CODE_INTERNAL, op, "unknown C++ exception");               \
  }                                                                                          \
  return nullptr;

// Refuses a call whose condition fails with an invalid-argument status.
#define TS_CHECK_ARG(cond, op, msg)                                                       \
  do {                                                                                    \
    if (!(cond)) return tsimpl::make_status(TS_CODE_INVALID_ARGUMENT, op, std::string(msg)); \
  } while (0)

// The one NULL check every function uses: "op: NAME is NULL".
#define TS_CHECK_NOT_NULL(ptr, op) TS_CHECK_ARG((ptr) != nullptr, op, #ptr " is NULL")
