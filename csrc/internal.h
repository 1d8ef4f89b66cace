// Shared internals of the shim's translation units. Not part of the C ABI.
#pragma once

#include <torch/script.h>
#include <torch/version.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "torchspeed.h"

struct ts_status {
  std::string msg;
};

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

ts_status* make_status(std::string msg);

// Copies a std::string into malloc'ed, NUL-terminated memory released by ts_free.
char* dup_string(const std::string& s);

at::ScalarType to_scalar_type(int32_t code);
int32_t from_scalar_type(at::ScalarType st);

std::vector<c10::IValue> make_inputs(ts_tensor* const* inputs, size_t n);

// The quantized engine's name as PyTorch spells it in Python: "onednn", "x86", ...
std::string engine_name(at::QEngine e);

// Sets the quantized engine by name; throws std::invalid_argument naming the supported ones.
void select_engine(const std::string& name);

// Escapes s for use inside a JSON string (quotes not included).
std::string json_escape(const std::string& s);

}  // namespace tsimpl

// Every exported body runs inside this pair. c10::Error first (its message without the C++
// backtrace), then any std::exception (torch::jit::ErrorReport is one, and not a c10::Error),
// then anything else. Nothing escapes into C or Go.
#define TS_API_BEGIN try {
#define TS_API_END(op)                                                                   \
  }                                                                                      \
  catch (const c10::Error& e) {                                                          \
    return tsimpl::make_status(std::string(op) + ": " + e.what_without_backtrace());     \
  }                                                                                      \
  catch (const std::exception& e) {                                                      \
    return tsimpl::make_status(std::string(op) + ": " + e.what());                       \
  }                                                                                      \
  catch (...) {                                                                          \
    return tsimpl::make_status(std::string(op) + ": unknown C++ exception");             \
  }                                                                                      \
  return nullptr;

#define TS_CHECK_ARG(cond, op, msg) \
  do {                              \
    if (!(cond)) return tsimpl::make_status(std::string(op) + ": " + (msg)); \
  } while (0)
