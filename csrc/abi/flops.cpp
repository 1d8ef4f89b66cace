// The per-op work counts the roofline reads (ts_module_op_flops), with the `ops.` resolver for
// define_ops.
#include <ATen/record_function.h>
#include <torch/csrc/jit/frontend/resolver.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "internal.h"

// ---- operation counts ----
// For the roofline: runs forward once with a thread-local RecordFunction
// callback that sees every dispatched ATen op and its inputs, and adds up the multiply-add work
// of the matrix-shaped ones from their input shapes.
//
// Why a callback and not the profiler's with_flops: libtorch's legacy profiler API
// (ProfilerConfig, enableProfilerLegacy, LegacyEvent::flops) changed shape between 1.13 and
// 2.x, and its conv formula has varied across releases; at::addThreadLocalCallback,
// RecordFunctionCallback and RecordFunction::inputs() are the same in 1.13 and 2.6. Counting
// where the work happens (aten::_convolution, which every conv1d/2d/3d and transposed conv
// reaches; mm/addmm/bmm/baddbmm, which linear and matmul reach) counts each op once, however
// the model spelled it.

namespace {

struct FlopCounter {
  std::map<std::string, double> flops;
  std::map<std::string, int64_t> calls;
};

// The callback is a plain function pointer, so the counter it feeds is thread-local: set for
// the duration of one ts_module_op_flops call on the calling thread (the JIT interpreter
// dispatches a forward's ops from the thread that called it).
thread_local FlopCounter* tl_counter = nullptr;

bool int_list(const c10::IValue& v, std::vector<int64_t>& out) {
  out.clear();
  if (!v.isList()) return false;
  for (const auto& e : v.toListRef()) {
    // Concrete SymInts (libtorch 2.x SymInt[] arguments) box as plain ints.
    if (!e.isInt()) return false;
    out.push_back(e.toInt());
  }
  return true;
}

bool sizes_of(const c10::IValue& v, std::vector<int64_t>& out) {
  out.clear();
  if (!v.isTensor()) return false;
  const auto& t = v.toTensor();
  if (!t.defined()) return false;
  auto s = t.sizes();
  out.assign(s.begin(), s.end());
  return true;
}

double prod(const std::vector<int64_t>& v, size_t from, size_t to) {
  double p = 1;
  for (size_t i = from; i < to && i < v.size(); i++) p *= static_cast<double>(v[i]);
  return p;
}

// aten::_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
// groups, ...). A normal conv's weight is [Cout, Cin/groups, k...] and each of its entries is
// used once per output position; a transposed conv's weight is [Cin, Cout/groups, k...] and each
// entry is used once per input position.
double conv_flops(c10::ArrayRef<const c10::IValue> in) {
  if (in.size() < 7) return 0;
  std::vector<int64_t> x, w, stride, pad, dil;
  if (!sizes_of(in[0], x) || !sizes_of(in[1], w) || x.size() < 3 || x.size() != w.size()) return 0;
  if (!int_list(in[3], stride) || !int_list(in[4], pad) || !int_list(in[5], dil)) return 0;
  bool transposed = in[6].isBool() && in[6].toBool();
  size_t nsp = x.size() - 2;
  double wnum = prod(w, 0, w.size());
  double positions = 1;
  for (size_t i = 0; i < nsp; i++) {
    if (transposed) {
      positions *= static_cast<double>(x[2 + i]);
      continue;
    }
    int64_t s = stride.size() == nsp ? stride[i] : (stride.size() == 1 ? stride[0] : 1);
    int64_t p = pad.size() == nsp ? pad[i] : (pad.size() == 1 ? pad[0] : 0);
    int64_t d = dil.size() == nsp ? dil[i] : (dil.size() == 1 ? dil[0] : 1);
    int64_t o = (x[2 + i] + 2 * p - d * (w[2 + i] - 1) - 1) / std::max<int64_t>(s, 1) + 1;
    positions *= static_cast<double>(std::max<int64_t>(o, 0));
  }
  return 2 * wnum * static_cast<double>(x[0]) * positions;
}

// 2 x multiply-adds of a (batched) matrix product a[..., n, k] x b[..., k, m].
double matmul_flops(const c10::IValue& a, const c10::IValue& b) {
  std::vector<int64_t> sa, sb;
  if (!sizes_of(a, sa) || !sizes_of(b, sb) || sa.empty() || sb.empty()) return 0;
  double k = static_cast<double>(sa.back());
  double rows = prod(sa, 0, sa.size() - 1);  // batch x n
  double m = sb.size() >= 2 ? static_cast<double>(sb.back()) : 1;
  return 2 * rows * k * m;
}

// The state an XNNPACK prepacked context (optimize_for_mobile's Conv2dOpContext,
// LinearOpContext) was built from: its __getstate__, registered by def_pickle in every
// release, gives back the original weight first. An empty tuple when it is not reachable.
std::vector<c10::IValue> prepacked_state(const c10::IValue& ctx) {
  if (!ctx.isObject()) return {};
  auto obj = ctx.toObject();
  torch::jit::Function* getstate = obj->type()->findMethod("__getstate__");
  if (getstate == nullptr) return {};
  std::vector<c10::IValue> stack{ctx};
  getstate->run(stack);
  if (stack.empty() || !stack.back().isTuple()) return {};
  const auto& e = stack.back().toTupleRef().elements();
  return std::vector<c10::IValue>(e.begin(), e.end());
}

// XNNPACK's prepacked ops (torch.utils.mobile_optimizer.optimize_for_mobile) run their
// convolutions and matmuls without reaching aten::_convolution or addmm: their work is counted
// from the input and the prepacked weight. Conv2dOpContext's state is (weight, bias, stride,
// padding, dilation, groups, output_min, output_max); LinearOpContext's (weight [N, K], bias,
// output_min, output_max).
double prepacked_flops(const std::string& name, c10::ArrayRef<const c10::IValue> in) {
  if (in.size() < 2) return 0;
  std::vector<c10::IValue> st;
  try {
    st = prepacked_state(in[1]);
  } catch (const std::exception&) {
    // A context this libtorch cannot unpack: its work goes uncounted rather than failing the
    // forward the count rides on.
    return 0;
  }
  if (name == "prepacked::conv2d_clamp_run") {
    if (st.size() < 5) return 0;
    std::vector<c10::IValue> conv{in[0], st[0], st[1], st[2], st[3], st[4], c10::IValue(false)};
    return conv_flops(c10::ArrayRef<const c10::IValue>(conv.data(), conv.size()));
  }
  if (st.empty() || !st[0].isTensor()) return 0;
  // The weight is [N, K]; the input [..., K] times its transpose.
  std::vector<int64_t> x, w;
  if (!sizes_of(in[0], x) || !sizes_of(st[0], w) || x.empty() || w.size() != 2) return 0;
  return 2 * prod(x, 0, x.size()) * static_cast<double>(w[0]);
}

double op_flops(const std::string& name, c10::ArrayRef<const c10::IValue> in) {
  if (name == "aten::_convolution") return conv_flops(in);
  if (name == "prepacked::conv2d_clamp_run" || name == "prepacked::linear_clamp_run") return prepacked_flops(name, in);
  if (name == "aten::mm" || name == "aten::bmm" || name == "aten::mv" || name == "aten::dot") {
    return in.size() >= 2 ? matmul_flops(in[0], in[1]) : 0;
  }
  if (name == "aten::addmm" || name == "aten::baddbmm" || name == "aten::addbmm" || name == "aten::addmv" ||
      name == "aten::_addmm_activation") {
    return in.size() >= 3 ? matmul_flops(in[1], in[2]) : 0;
  }
  if (name == "aten::_scaled_dot_product_flash_attention_for_cpu" ||
      name == "aten::_scaled_dot_product_flash_attention") {
    // q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev]: Q K^T then P V, neither reached as bmm.
    std::vector<int64_t> q, k, v;
    if (in.size() < 3 || !sizes_of(in[0], q) || !sizes_of(in[1], k) || !sizes_of(in[2], v) || q.size() < 2 ||
        k.size() < 2 || v.empty()) {
      return 0;
    }
    double bhl = prod(q, 0, q.size() - 1), s = static_cast<double>(k[k.size() - 2]);
    return 2 * bhl * s * static_cast<double>(q.back()) + 2 * bhl * s * static_cast<double>(v.back());
  }
  return 0;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  FlopCounter* c = tl_counter;
  if (c == nullptr) return nullptr;
  std::string name = fn.name();
  double f = op_flops(name, fn.inputs());
  if (f > 0) {
    c->flops[name] += f;
    c->calls[name]++;
  }
  return nullptr;
}

// Removes the callback and clears the thread-local counter however the forward ends.
struct CallbackScope {
  at::CallbackHandle handle;
  explicit CallbackScope(FlopCounter* c) {
    tl_counter = c;
    handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start).needsInputs(true));
  }
  ~CallbackScope() {
    at::removeCallback(handle);
    tl_counter = nullptr;
  }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
};


// `ops.<namespace>.<op>`, as saved TorchScript code spells operators outside aten (the source
// importer's OpsValue); Module::define's default native resolver knows only `torch`.
struct OpsValue : torch::jit::SugaredValue {
  std::string kind() const override { return "ops"; }
  std::shared_ptr<torch::jit::SugaredValue> attr(const torch::jit::SourceRange&, torch::jit::GraphFunction&,
                                                 const std::string& field) override {
    return std::make_shared<torch::jit::BuiltinModule>(field);
  }
};

struct OpsResolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction&,
                                                          const torch::jit::SourceRange&) override {
    if (name == "torch") return std::make_shared<torch::jit::BuiltinModule>("aten");
    if (name == "ops") return std::make_shared<OpsValue>();
    return nullptr;
  }
  c10::TypePtr resolveType(const std::string&, const torch::jit::SourceRange&) override { return nullptr; }
};

}  // namespace

extern "C" {

ts_status* ts_module_define_ops(ts_module* m, const char* source) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "define_ops");
  TS_CHECK_NOT_NULL(source, "define_ops");
  m->m.define(source, std::make_shared<OpsResolver>());
  TS_API_END("define_ops")
}

ts_status* ts_module_op_flops(const ts_module* m, ts_tensor* const* inputs, size_t n, char** json) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "op_flops");
  TS_CHECK_NOT_NULL(json, "op_flops");
  auto args = tsimpl::make_inputs(inputs, n);
  auto method = m->m.get_method("forward");
  FlopCounter counter;
  {
    c10::InferenceMode guard;
    CallbackScope scope(&counter);
    method(args);
  }
  tsimpl::JsonWriter w;
  w.begin_object();
  for (const auto& kv : counter.flops)
    w.key(kv.first).begin_object().key("flops").value(kv.second).key("calls").value(counter.calls[kv.first]).end_object();
  w.end_object();
  *json = tsimpl::dup_string(w.str());
  TS_API_END("op_flops")
}

}  // extern "C"
