// Per-op timing of one forward (ts_module_op_profile), from RecordFunction callbacks on the
// calling thread: the time each top-level dispatched op took, in the order the interpreter ran
// them, so that the caller can line the i-th op of one run up with the i-th of the next.
#include <ATen/record_function.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "internal.h"

namespace {

struct OpTime {
  std::string op;
  std::string shapes;
  std::string scope;
  int64_t ns = 0;
};

struct Profile {
  std::vector<OpTime> ops;
  // Depth of dispatched ops in flight on this thread: only depth 1 is recorded, so that an op's
  // callees (aten::linear's aten::addmm) are counted once, inside it.
  int depth = 0;
};

// The callbacks are plain function pointers: the profile they feed is thread-local, set for the
// duration of one ts_module_op_profile call on the calling thread.
thread_local Profile* tl_profile = nullptr;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct StartTime : at::ObserverContext {
  int64_t t0 = 0;
  size_t index = 0;
};

std::string shapes_of(c10::ArrayRef<const c10::IValue> in) {
  std::string s;
  for (const auto& v : in) {
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    if (!s.empty()) s += ' ';
    s += '[';
    bool first = true;
    for (int64_t d : v.toTensor().sizes()) {
      if (!first) s += ',';
      s += std::to_string(d);
      first = false;
    }
    s += ']';
  }
  return s;
}

// The dotted path of the submodule whose code dispatched the op ("layer1.0.conv1"), from the
// interpreter's call stack (kept through inlining and freezing); empty at the top level or when
// the graph lost it (a graph rewritten by a pass). The hierarchy reads "TOP(ResNet)::forward",
// "layer1(Sequential)::forward", ...: the instance names, after the top.
std::string module_path() {
  std::string path;
  bool top = true;
  for (const auto& entry : torch::jit::currentModuleHierarchy()) {
    if (top) {
      top = false;
      continue;
    }
    if (!path.empty()) path += '.';
    path += entry.substr(0, entry.find('('));
  }
  return path;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Profile* p = tl_profile;
  if (p == nullptr) return nullptr;
  if (++p->depth != 1) return nullptr;
  auto ctx = std::make_unique<StartTime>();
  ctx->index = p->ops.size();
  p->ops.push_back(OpTime{fn.name(), shapes_of(fn.inputs()), module_path(), 0});
  // Last, so that the bookkeeping above is not in the op's time.
  ctx->t0 = now_ns();
  return ctx;
}

void on_end(const at::RecordFunction&, at::ObserverContext* c) {
  int64_t t1 = now_ns();
  Profile* p = tl_profile;
  if (p == nullptr) return;
  if (c != nullptr) {
    auto* st = static_cast<StartTime*>(c);
    if (st->index < p->ops.size()) p->ops[st->index].ns = t1 - st->t0;
  }
  if (p->depth > 0) p->depth--;
}

// Removes the callbacks and clears the thread-local profile however the forward ends.
struct ProfileScope {
  at::CallbackHandle handle;
  explicit ProfileScope(Profile* p) {
    tl_profile = p;
    // Only ATen/dispatcher ops (RecordScope::FUNCTION): TorchScript function calls of a module
    // that was not inlined would otherwise be the one top-level "op".
    handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(on_start, on_end).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  }
  ~ProfileScope() {
    at::removeCallback(handle);
    tl_profile = nullptr;
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;
};

std::string profile_json(const Profile& prof, int64_t total) {
  tsimpl::JsonWriter w;
  w.begin_object().key("total_ns").value(total).key("ops").begin_array();
  for (const auto& o : prof.ops) {
    w.begin_object().key("op").value(o.op).key("ns").value(o.ns).key("shapes").value(o.shapes).key("scope").value(o.scope).end_object();
  }
  w.end_array().end_object();
  return w.str();
}

// A profile opened by ts_op_profile_begin on this thread, closed by ts_op_profile_end: whatever
// runs between them on the thread (any method call, with any arguments) is recorded.
struct OpenProfile {
  Profile prof;
  std::unique_ptr<ProfileScope> scope = std::make_unique<ProfileScope>(&prof);
  int64_t t0 = 0;
};
thread_local std::unique_ptr<OpenProfile> tl_open;

}  // namespace

extern "C" {

ts_status* ts_module_op_profile(const ts_module* m, ts_tensor* const* inputs, size_t n, char** json) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "op_profile");
  TS_CHECK_NOT_NULL(json, "op_profile");
  if (tl_open) tsimpl::fail(TS_CODE_INVALID_ARGUMENT, "a profile is open on this thread (ts_op_profile_begin)");
  auto args = tsimpl::make_inputs(inputs, n);
  auto method = m->m.get_method("forward");
  Profile prof;
  int64_t total = 0;
  {
    c10::InferenceMode guard;
    ProfileScope scope(&prof);
    int64_t t0 = now_ns();
    method(args);
    total = now_ns() - t0;
  }
  *json = tsimpl::dup_string(profile_json(prof, total));
  TS_API_END("op_profile")
}

ts_status* ts_op_profile_begin(void) noexcept {
  TS_API_BEGIN
  if (tl_profile != nullptr || tl_open) {
    tsimpl::fail(TS_CODE_INVALID_ARGUMENT, "a profile is already open on this thread (or a forward is being profiled)");
  }
  auto open = std::make_unique<OpenProfile>();
  tl_open = std::move(open);
  tl_open->t0 = now_ns();
  TS_API_END("op_profile_begin")
}

ts_status* ts_op_profile_end(char** json) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(json, "op_profile_end");
  if (!tl_open) tsimpl::fail(TS_CODE_INVALID_ARGUMENT, "no profile is open on this thread: call ts_op_profile_begin first");
  const int64_t total = now_ns() - tl_open->t0;
  // The callbacks go before the JSON is built: the profile then stays whole whatever happens.
  std::unique_ptr<OpenProfile> open = std::move(tl_open);
  open->scope.reset();
  std::string js = profile_json(open->prof, total);
  *json = tsimpl::dup_string(js);
  TS_API_END("op_profile_end")
}

}  // extern "C"
