// libtorch's process and runtime side of the C ABI: versions and build configuration, thread
// counts (libtorch's and OpenBLAS's), quantized engines, the execution settings, and the
// per-op work counts the roofline reads (with the `ops.` resolver for define_ops), and the
// inference threads: workers that run forwards handed over from other threads, and the calling
// thread's OpenMP team.
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/record_function.h>
#include <caffe2/serialize/versions.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <time.h>

#include "internal.h"
#include "spin.h"

// ---- versions, threads, quantized engines ----

extern "C" {

int32_t ts_api_version(void) noexcept { return TS_API_VERSION; }
const char* ts_libtorch_version(void) noexcept { return TORCH_VERSION; }

ts_status* ts_show_config(char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(out, "show_config");
  *out = tsimpl::dup_string(at::show_config());
  TS_API_END("show_config")
}

ts_status* ts_parallel_info(char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(out, "parallel_info");
  *out = tsimpl::dup_string(at::get_parallel_info());
  TS_API_END("parallel_info")
}

}  // extern "C"

// Outside extern "C": a C++ helper returning a C++ type (clang: -Wreturn-type-c-linkage).
namespace {
// OpenBLAS's C API, looked up at run time: libtorch may use MKL, OpenBLAS or no BLAS, and
// the shim links none of them itself.
struct OpenBLAS {
  void (*set_num_threads)(int) = nullptr;
  int (*get_num_threads)() = nullptr;
  int (*get_parallel)() = nullptr;  // 0 sequential, 1 pthreads, 2 OpenMP
  char* (*get_config)() = nullptr;
};

const OpenBLAS& openblas() {
  static const OpenBLAS api = [] {
    OpenBLAS a;
    a.set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    a.get_num_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    a.get_parallel = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
    a.get_config = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
    return a;
  }();
  return api;
}
}  // namespace

extern "C" {

ts_status* ts_blas_info(char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(out, "blas_info");
  const OpenBLAS& b = openblas();
  tsimpl::JsonWriter w;
  w.begin_object();
  if (b.get_num_threads == nullptr) {
    w.key("library").value("");
  } else {
    const char* threading = "unknown";
    if (b.get_parallel != nullptr) {
      switch (b.get_parallel()) {
        case 0: threading = "sequential"; break;
        case 1: threading = "pthreads"; break;
        case 2: threading = "openmp"; break;
      }
    }
    const char* config = b.get_config != nullptr ? b.get_config() : nullptr;
    w.key("library").value("openblas").key("config").value(config);
    w.key("threading").value(threading).key("threads").value(static_cast<int64_t>(b.get_num_threads()));
  }
  w.end_object();
  *out = tsimpl::dup_string(w.str());
  TS_API_END("blas_info")
}
int32_t ts_get_num_threads(void) noexcept { return at::get_num_threads(); }

ts_status* ts_set_num_interop_threads(int32_t n) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(n > 0, "set_num_interop_threads", "thread count must be > 0, got " + std::to_string(n));
  // libtorch 2.x returns size_t here, 1.13 int: compare as int64_t on both.
  if (static_cast<int64_t>(at::get_num_interop_threads()) == n) return nullptr;
  at::set_num_interop_threads(n);
  TS_API_END("set_num_interop_threads")
}
int32_t ts_get_num_interop_threads(void) noexcept { return static_cast<int32_t>(at::get_num_interop_threads()); }

ts_status* ts_supported_qengines(char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(out, "supported_qengines");
  std::string s;
  for (auto e : at::globalContext().supportedQEngines()) {
    if (!s.empty()) s += ",";
    s += tsimpl::engine_name(e);
  }
  *out = tsimpl::dup_string(s);
  TS_API_END("supported_qengines")
}

ts_status* ts_get_qengine(char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(out, "get_qengine");
  *out = tsimpl::dup_string(tsimpl::engine_name(at::globalContext().qEngine()));
  TS_API_END("get_qengine")
}

ts_status* ts_set_qengine(const char* name) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(name, "set_qengine");
  tsimpl::select_engine(name);
  TS_API_END("set_qengine")
}

int64_t ts_max_file_format_version(void) noexcept {
  return static_cast<int64_t>(caffe2::serialize::kMaxSupportedFileFormatVersion);
}

}  // extern "C"

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

// ---- execution settings (here rather than a TU of their own: each TU with torch headers adds to the build) ----
// How a module's methods execute, set the way Triton's PyTorch backend sets them before each
// execution (pytorch_backend src/pt/model_instance_state.cc, ModelInstanceState::Execute):
// torch::jit::setGraphExecutorOptimize, c10::InferenceMode under a NoGradGuard, and the JIT's
// executor and profiling modes.

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

// ---- workers ----
// A forward handed to a worker: it lives on the caller's stack for the length of
// ts_worker_forward; the serving thread fills st/out, reads waiting and then sets done (under the
// worker's mutex), and touches it no more: a spinning caller may return the moment done is set.
struct ts_worker_job {
  const ts_module* m = nullptr;
  ts_tensor* const* inputs = nullptr;
  size_t n = 0;
  ts_outputs* out = nullptr;
  ts_status* st = nullptr;
  std::atomic<bool> done{false};  // release-stored by the serving thread, after out and st
  bool waiting = false;           // under the mutex: the caller sleeps on ts_worker::done
};

// Both sides of a hand-off spin briefly before they sleep. Waking a sleeping thread costs a futex
// call on one side and a scheduler wake-up on the other; on a VM the wake-up of an idle vCPU
// is an interrupt through the hypervisor, measured at 20-90 us per call (2 vCPUs, Zen 5) on
// models that run in 50-300 us. The serving thread spins for the next job after each short one (a
// closed loop of calls, or a server under load, posts it within microseconds); a caller spins
// for its result only when the serving thread's last forward was shorter than its bound and its
// OpenMP team is smaller than the CPUs the process may use, so that it never takes a CPU from
// the forward's team. Process-wide, set by ts_set_handoff_spin.
namespace {
std::atomic<int64_t> g_serve_spin_ns{100000};
std::atomic<int64_t> g_wait_spin_ns{500000};
}  // namespace

// Notifications go out after the mutex is released, so that the woken thread does not wake
// only to wait for the mutex (a second context switch on every call), and only to a thread
// that sleeps: a spinning one sees the change by itself.
struct ts_worker {
  std::mutex mu;
  std::condition_variable work;  // the serving thread waits here for a job, a kick or close
  std::condition_variable done;  // callers wait here for their job
  std::deque<ts_worker_job*> jobs;
  bool kicked = false;
  bool closed = false;
  bool asleep = false;                  // under mu: the serving thread waits on work
  std::atomic<uint64_t> posted{0};      // bumped under mu by each job, kick and close: the serving thread's spin watches it
  std::atomic<int64_t> last_ns{-1};     // the serving thread's last forward; -1 before the first
  std::atomic<int32_t> spinners{0};     // callers spinning for their result
  std::atomic<int32_t> team{0};         // the serving thread's OpenMP team size, read as it starts serving
  tsimpl::Backoff serve_backoff;                // the serving thread's spins for a next job
  tsimpl::Backoff wait_backoff;                 // callers' spins for a result
};

// post runs f (which changes what the serving thread waits for) under the mutex, then wakes the
// serving thread if it sleeps.
namespace {
template <class F>
void post(ts_worker* w, F f) {
  bool wake;
  {
    std::lock_guard<std::mutex> lk(w->mu);
    f();
    w->posted.fetch_add(1, std::memory_order_relaxed);
    wake = w->asleep;
  }
  if (wake) w->work.notify_one();
}
}  // namespace

extern "C" {

ts_status* ts_worker_new(ts_worker** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(out, "worker_new");
  *out = std::make_unique<ts_worker>().release();
  TS_API_END("worker_new")
}

void ts_worker_free(ts_worker* w) noexcept { delete w; }

ts_status* ts_set_handoff_spin(int64_t serve_ns, int64_t wait_ns) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(serve_ns >= 0 && wait_ns >= 0, "set_handoff_spin",
               "spin times must be >= 0 ns, got " + std::to_string(serve_ns) + " and " + std::to_string(wait_ns));
  g_serve_spin_ns.store(serve_ns, std::memory_order_relaxed);
  g_wait_spin_ns.store(wait_ns, std::memory_order_relaxed);
  TS_API_END("set_handoff_spin")
}

void ts_get_handoff_spin(int64_t* serve_ns, int64_t* wait_ns) noexcept {
  if (serve_ns != nullptr) *serve_ns = g_serve_spin_ns.load(std::memory_order_relaxed);
  if (wait_ns != nullptr) *wait_ns = g_wait_spin_ns.load(std::memory_order_relaxed);
}

// The loop reads the monotonic clock back to back; a read that comes more than threshold_ns
// after the previous one means the thread did not run in between. Nothing else happens in the
// loop (no allocation, no system call besides the clock's, which is the vDSO's on Linux), so
// what it records is what the machine takes from any thread on that CPU.
ts_status* ts_measure_gaps(int64_t duration_ns, int64_t threshold_ns, int64_t* at_ns, int64_t* len_ns, size_t cap,
                           ts_gap_totals* totals) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(duration_ns > 0 && duration_ns <= 60000000000LL, "measure_gaps",
               "duration must be in (0, 60 s], got " + std::to_string(duration_ns) + " ns");
  TS_CHECK_ARG(threshold_ns > 0, "measure_gaps", "threshold must be > 0 ns, got " + std::to_string(threshold_ns));
  TS_CHECK_ARG(cap == 0 || (at_ns != nullptr && len_ns != nullptr), "measure_gaps",
               "at_ns and len_ns must hold cap entries");
  TS_CHECK_NOT_NULL(totals, "measure_gaps");
  auto now = [] {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec;
  };
  const int64_t start = now();
  const int64_t end = start + duration_ns;
  int64_t prev = start, reads = 0, count = 0, lost = 0, longest = 0;
  size_t kept = 0;
  for (;;) {
    const int64_t t = now();
    ++reads;
    const int64_t gap = t - prev;
    if (gap > threshold_ns) {
      ++count;
      lost += gap;
      longest = std::max(longest, gap);
      if (kept < cap) {
        at_ns[kept] = prev - start;
        len_ns[kept] = gap;
        ++kept;
      }
    }
    prev = t;
    if (t >= end) break;
  }
  totals->elapsed_ns = prev - start;
  totals->reads = reads;
  totals->count = count;
  totals->kept = static_cast<int64_t>(kept);
  totals->lost_ns = lost;
  totals->longest_ns = longest;
  TS_API_END("measure_gaps")
}

int32_t ts_worker_serve(ts_worker* w) noexcept {
  if (w == nullptr) return 0;
  tsimpl::tl_inference_thread = true;
  // Set between calls (ts_worker_kick hands the thread back to its owner, who may set it).
  w->team.store(static_cast<int32_t>(at::get_num_threads()), std::memory_order_relaxed);
  std::unique_lock<std::mutex> lk(w->mu);
  auto ready = [w] { return !w->jobs.empty() || w->kicked || w->closed; };
  for (;;) {
    if (!ready()) {
      // Not after a forward that took ten times the spin or more: a wake-up saves a few percent
      // of it at best, and the spin holds a CPU the caller's next call may need (measured, INT8
      // resnet18 at 2 threads on 2 vCPUs, load 6: 1.19x slower with it, interval 1.03-1.40).
      const int64_t spin = g_serve_spin_ns.load(std::memory_order_relaxed);
      const int64_t last = w->last_ns.load(std::memory_order_relaxed);
      if (spin > 0 && last < 10 * spin && w->serve_backoff.allow()) {
        const uint64_t seen = w->posted.load(std::memory_order_relaxed);
        lk.unlock();
        w->serve_backoff.record(
            tsimpl::spin_until([w, seen] { return w->posted.load(std::memory_order_relaxed) != seen; }, spin));
        lk.lock();
      }
      // Set and cleared under mu around the wait: a poster reads it under mu, so it either sees
      // it set (and notifies) or posts before the predicate below is checked.
      w->asleep = true;
      w->work.wait(lk, ready);
      w->asleep = false;
    }
    if (w->jobs.empty()) {
      if (!w->kicked) return 0;  // closed, every job posted before it served
      w->kicked = false;
      return 1;
    }
    ts_worker_job* j = w->jobs.front();
    w->jobs.pop_front();
    lk.unlock();
    ts_outputs* out = nullptr;
    const int64_t t0 = tsimpl::now_ns();
    ts_status* st = ts_module_forward(j->m, j->inputs, j->n, &out);
    w->last_ns.store(tsimpl::now_ns() - t0, std::memory_order_relaxed);
    lk.lock();
    const bool notify = j->waiting;
    j->out = out;
    j->st = st;
    j->done.store(true, std::memory_order_release);  // from here on the caller may return: j is not touched again
    if (notify) {
      lk.unlock();
      w->done.notify_all();
      lk.lock();
    }
  }
}

void ts_worker_kick(ts_worker* w) noexcept {
  if (w == nullptr) return;
  post(w, [w] { w->kicked = true; });
}

void ts_worker_close(ts_worker* w) noexcept {
  if (w == nullptr) return;
  post(w, [w] { w->closed = true; });
}

ts_status* ts_worker_forward(ts_worker* w, const ts_module* m, ts_tensor* const* inputs, size_t n,
                             ts_outputs** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(w, "worker_forward");
  TS_CHECK_NOT_NULL(m, "worker_forward");
  TS_CHECK_NOT_NULL(out, "worker_forward");
  ts_worker_job j;
  j.m = m;
  j.inputs = inputs;
  j.n = n;
  bool wake;
  {
    std::lock_guard<std::mutex> lk(w->mu);
    if (w->closed) return tsimpl::make_status(TS_CODE_INVALID_ARGUMENT, "worker_forward", "the worker is closed");
    w->jobs.push_back(&j);
    w->posted.fetch_add(1, std::memory_order_relaxed);
    wake = w->asleep;
  }
  if (wake) w->work.notify_one();
  const int64_t spin = g_wait_spin_ns.load(std::memory_order_relaxed);
  const int64_t last = w->last_ns.load(std::memory_order_relaxed);
  // A caller spins only while the forward's OpenMP team leaves it a CPU, for about as long as
  // the last forward took plus a margin, and at most one caller per worker: callers queued
  // behind it would wait longer than the bound anyway.
  if (spin > 0 && last >= 0 && last < spin && w->team.load(std::memory_order_relaxed) < tsimpl::affinity_cpus()) {
    if (w->spinners.fetch_add(1, std::memory_order_relaxed) == 0 && w->wait_backoff.allow()) {
      const int64_t budget = std::min(spin, last + last / 2 + 20000);
      w->wait_backoff.record(tsimpl::spin_until([&j] { return j.done.load(std::memory_order_acquire); }, budget));
    }
    w->spinners.fetch_sub(1, std::memory_order_relaxed);
  }
  if (!j.done.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lk(w->mu);
    j.waiting = true;
    w->done.wait(lk, [&j] { return j.done.load(std::memory_order_relaxed); });
  }
  if (j.st != nullptr) return j.st;
  *out = j.out;
  TS_API_END("worker_forward")
}

}  // extern "C"

// ---- the calling thread's OpenMP team ----
// libgomp keeps a pool of worker threads for each thread that runs a parallel region, counts the
// threads of every pool, and once they outnumber the CPUs it cuts the time its idle threads poll
// for work from ~300,000 spins to 100, in every pool: the inference pool's threads then fall
// asleep between forwards and each forward starts by waking them. So work that runs off the
// inference threads (copies, loads, graph passes, quantization) runs with a team of one and
// leaves no pool. Measured (digits INT8, 2 threads, 2 CPUs): 95 us per forward with a second
// pool alive, 57 us without; optimize of mobilenet_v2 timed FP32 at 2 threads 10.6-11.5 ms with
// three extra pools (made by channels-last input copies on Go threads), ~6.4 ms without.
//
// OpenMP's calls are looked up at run time, as OpenBLAS's are: the shim links no OpenMP runtime.
namespace {
struct OmpApi {
  int (*get_max_threads)() = nullptr;
  void (*set_num_threads)(int) = nullptr;
};
const OmpApi& omp_api() {
  static const OmpApi api = [] {
    OmpApi a;
    a.get_max_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    a.set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    if (a.get_max_threads == nullptr || a.set_num_threads == nullptr) a = OmpApi{};
    return a;
  }();
  return api;
}

// Sets the calling thread's OpenMP count to 1 and returns the count it had (0 without an
// OpenMP runtime). ATen sets a thread's OpenMP count on that thread's first parallel
// region, to the count at::set_num_threads last set for the process: a count set here before
// that would be overwritten there (measured: bench --runtime torchspeed, which sets the count
// early, left two OpenMP workers on 2 CPUs and ran mobilenet_v2 INT8 3.9 ms instead of 2.7).
// at::get_num_threads runs that first-time setting now.
int one_thread_here() {
  (void)at::get_num_threads();
  const OmpApi& a = omp_api();
  if (a.get_max_threads == nullptr) return 0;
  int was = a.get_max_threads();
  if (was > 1) a.set_num_threads(1);
  return was;
}
}  // namespace

namespace tsimpl {
thread_local bool tl_inference_thread = false;

OneThreadTeam::OneThreadTeam() {
  if (tl_inference_thread) return;
  int was = one_thread_here();
  if (was > 1) prev_ = was;
}

OneThreadTeam::~OneThreadTeam() {
  if (prev_ > 0) omp_api().set_num_threads(prev_);
}
}  // namespace tsimpl

// ---- thread counts ----
// at::set_num_threads does more than set a count: it also replaces libtorch's pthreadpool (the
// one QNNPACK runs on) with a new one, whose threads then spin for ~20 ms waiting for work that
// never comes; and every OS thread that first runs ATen's parallel code afterwards calls it
// again. Measured on 2 vCPUs: a loop that set the count before each block of five resnet18 INT8
// forwards (optimize's thread choice) had 26 such threads a second spinning beside the OpenMP
// team, and 2 threads ran at 7.0-7.4 ms in half the blocks against 3.3-3.5 ms in the others
// and 3.1-3.4 ms without it; optimize, which timed its thread choice that way, kept 1 thread
// for resnet18 INT8 in two runs on a quiet machine, where 2 threads are 1.6x faster.
// So ATen's process-wide count is set once per change, and a thread's own count with OpenMP
// alone (the count OpenMP regions and oneDNN read on that thread).
namespace {
std::atomic<int> g_aten_threads{0};  // the count at::set_num_threads last got from here; 0: never

// Sets the calling thread's OpenMP count to n; falls back on at::set_num_threads without an
// OpenMP runtime to call.
void set_threads_here(int n) {
  (void)at::get_num_threads();  // ATen's first-use setting of this thread's count, before ours
  const OmpApi& a = omp_api();
  if (a.get_max_threads == nullptr) {
    at::set_num_threads(n);
    return;
  }
  if (a.get_max_threads() != n) a.set_num_threads(n);
}

// OpenBLAS's count is process-wide; setting it to the count it has still takes its lock.
void set_openblas_threads(int n) {
  const OpenBLAS& b = openblas();
  if (b.set_num_threads == nullptr) return;
  if (b.get_num_threads != nullptr && b.get_num_threads() == n) return;
  b.set_num_threads(n);
}
}  // namespace

extern "C" {

ts_status* ts_set_num_threads(int32_t n) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(n > 0, "set_num_threads", "thread count must be > 0, got " + std::to_string(n));
  // The process-wide count (threads that start later take it; QNNPACK's pool follows it) only
  // when it changes; the calling thread's own count either way.
  if (g_aten_threads.exchange(n) != n) {
    at::set_num_threads(n);
  } else {
    set_threads_here(n);
  }
  // at::set_num_threads sets OpenMP's and MKL's counts, not OpenBLAS's.
  set_openblas_threads(n);
  TS_API_END("set_num_threads")
}

ts_status* ts_set_num_threads_here(int32_t n) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(n > 0, "set_num_threads_here", "thread count must be > 0, got " + std::to_string(n));
  set_threads_here(n);
  set_openblas_threads(n);
  TS_API_END("set_num_threads_here")
}

}  // extern "C"
