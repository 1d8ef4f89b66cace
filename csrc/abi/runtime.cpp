// libtorch's process and runtime side of the C ABI: versions and build configuration, thread
// counts (libtorch's and OpenBLAS's), quantized engines, the execution settings and the calling
// thread's OpenMP team. The per-op work counts are in flops.cpp, the inference threads (workers)
// and the gap measurement in worker.cpp.
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <caffe2/serialize/versions.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "internal.h"

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

// ---- execution settings ----
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
