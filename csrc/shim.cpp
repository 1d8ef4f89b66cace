// The core of the C ABI: status, tensors, modules, runtime settings.
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/passes/fold_conv_bn.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>
#include <torch/version.h>

#include <dlfcn.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "internal.h"

namespace tsimpl {

ts_status* make_status(std::string msg) {
  // Allocation failure here would throw out of a catch block; an empty message is the fallback.
  try {
    return new ts_status{std::move(msg)};
  } catch (...) {
    static ts_status oom{"out of memory while reporting an error"};
    return &oom;
  }
}

char* dup_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

at::ScalarType to_scalar_type(int32_t code) {
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
    default: throw std::invalid_argument("unknown dtype code " + std::to_string(code));
  }
}

int32_t from_scalar_type(at::ScalarType st) {
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

std::vector<c10::IValue> make_inputs(ts_tensor* const* inputs, size_t n) {
  std::vector<c10::IValue> v;
  v.reserve(n);
  for (size_t i = 0; i < n; i++) {
    if (inputs[i] == nullptr) throw std::invalid_argument("input " + std::to_string(i) + " is NULL");
    v.emplace_back(inputs[i]->t);
  }
  return v;
}

std::string engine_name(at::QEngine e) {
  switch (e) {
    case at::QEngine::NoQEngine: return "none";
    case at::QEngine::FBGEMM: return "fbgemm";
    case at::QEngine::QNNPACK: return "qnnpack";
#if TORCH_VERSION_MAJOR > 1 || (TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR >= 13)
    case at::QEngine::ONEDNN: return "onednn";
    case at::QEngine::X86: return "x86";
#endif
  }
  return "unknown";
}

void select_engine(const std::string& want) {
  std::string have;
  for (auto e : at::globalContext().supportedQEngines()) {
    if (engine_name(e) == want) {
      at::globalContext().setQEngine(e);
      return;
    }
    have += (have.empty() ? "" : ", ") + engine_name(e);
  }
  throw std::invalid_argument("engine \"" + want + "\" is not supported by this libtorch build (supported: " + have +
                              ")");
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

}  // namespace tsimpl

using namespace tsimpl;

namespace {


// Flattens a forward result into named tensors. Paths join with "."; a lone tensor is "0".
void flatten(const c10::IValue& v, const std::string& path, ts_outputs& out) {
  auto child = [&](const std::string& key) { return path.empty() ? key : path + "." + key; };
  if (v.isTensor()) {
    out.names.push_back(path.empty() ? "0" : path);
    out.tensors.push_back(v.toTensor());
  } else if (v.isTuple()) {
    const auto& elems = v.toTupleRef().elements();
    for (size_t i = 0; i < elems.size(); i++) flatten(elems[i], child(std::to_string(i)), out);
  } else if (v.isList()) {
    auto list = v.toListRef();
    for (size_t i = 0; i < list.size(); i++) flatten(list[i], child(std::to_string(i)), out);
  } else if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict()) {
      std::string key = kv.key().isString() ? kv.key().toStringRef() : kv.key().tagKind() + "?";
      if (kv.key().isInt()) key = std::to_string(kv.key().toInt());
      flatten(kv.value(), child(key), out);
    }
  } else if (v.isNone()) {
    // Optional outputs that are absent: nothing to return.
  } else if (v.isScalar()) {
    out.names.push_back(path.empty() ? "0" : path);
    out.tensors.push_back(at::scalar_tensor(v.toScalar()));
  } else {
    throw std::runtime_error("output " + (path.empty() ? std::string("0") : path) + " has type " +
                             v.tagKind() + ", which torchspeed cannot return (tensors, tuples, lists, dicts only)");
  }
}

ts_status* run_and_flatten(const torch::jit::Module& m, const char* method, ts_tensor* const* inputs, size_t n,
                           ts_outputs** out) {
  auto args = make_inputs(inputs, n);
  c10::InferenceMode guard;
  c10::IValue result = m.get_method(method)(std::move(args));
  auto o = std::make_unique<ts_outputs>();
  flatten(result, "", *o);
  *out = o.release();
  return nullptr;
}

// Reads every extra/NAME record of an archive so the handle can answer later without the file.
void read_extra_files(caffe2::serialize::PyTorchStreamReader& reader, torch::jit::ExtraFilesMap& wanted) {
  for (const auto& rec : reader.getAllRecords()) {
    const std::string prefix = "extra/";
    if (rec.compare(0, prefix.size(), prefix) == 0) wanted[rec.substr(prefix.size())] = "";
  }
}

// A read adapter over a caller's buffer, copied so the module never points at Go memory.
class BufferAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BufferAdapter(std::string data) : data_(std::move(data)) {}
  size_t size() const override { return data_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= data_.size()) return 0;
    size_t k = std::min<size_t>(n, data_.size() - pos);
    std::memcpy(buf, data_.data() + pos, k);
    return k;
  }

 private:
  std::string data_;
};

int64_t channels_last_in_place(torch::jit::Module& m) {
  int64_t changed = 0;
  c10::NoGradGuard ng;
  auto convert = [&](at::Tensor t) {
    if (t.dim() == 4 && !t.is_quantized()) {
      t.set_data(t.contiguous(at::MemoryFormat::ChannelsLast));
      changed++;
    } else if (t.dim() == 5 && !t.is_quantized()) {
      t.set_data(t.contiguous(at::MemoryFormat::ChannelsLast3d));
      changed++;
    }
  };
  for (const auto& p : m.parameters(/*recurse=*/true)) convert(p);
  for (const auto& b : m.buffers(/*recurse=*/true)) convert(b);
  return changed;
}

void count_nodes(torch::jit::Block* block, std::map<std::string, int64_t>& counts) {
  for (auto* node : block->nodes()) {
    counts[node->kind().toQualString()]++;
    for (auto* sub : node->blocks()) count_nodes(sub, counts);
  }
}

std::shared_ptr<torch::jit::Graph> inlined_forward(const torch::jit::Module& m) {
  auto graph = m.get_method("forward").graph();
  // Some graphs (dynamic-quantized LSTMs) fail Graph::copy()'s scope check; their nodes are
  // still worth counting, uninlined.
  try {
    auto copy = graph->copy();
    torch::jit::Inline(*copy);
    return copy;
  } catch (const std::exception&) {
    return graph;
  }
}


}  // namespace

extern "C" {

const char* ts_status_message(const ts_status* s) { return s == nullptr ? "" : s->msg.c_str(); }
void ts_status_free(ts_status* s) {
  if (s != nullptr && s->msg != "out of memory while reporting an error") delete s;
}
void ts_free(void* p) { std::free(p); }

int32_t ts_api_version(void) { return TS_API_VERSION; }
const char* ts_libtorch_version(void) { return TORCH_VERSION; }

ts_status* ts_show_config(char** out) {
  TS_API_BEGIN
  *out = dup_string(at::show_config());
  TS_API_END("show_config")
}

ts_status* ts_parallel_info(char** out) {
  TS_API_BEGIN
  *out = dup_string(at::get_parallel_info());
  TS_API_END("parallel_info")
}

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

ts_status* ts_set_num_threads(int32_t n) {
  TS_API_BEGIN
  TS_CHECK_ARG(n > 0, "set_num_threads", "thread count must be > 0, got " + std::to_string(n));
  at::set_num_threads(n);
  // at::set_num_threads sets OpenMP's and MKL's counts, not OpenBLAS's.
  if (openblas().set_num_threads != nullptr) openblas().set_num_threads(n);
  TS_API_END("set_num_threads")
}

ts_status* ts_blas_info(char** out) {
  TS_API_BEGIN
  const OpenBLAS& b = openblas();
  std::string json = "{\"library\":\"\"}";
  if (b.get_num_threads != nullptr) {
    const char* threading = "unknown";
    if (b.get_parallel != nullptr) {
      switch (b.get_parallel()) {
        case 0: threading = "sequential"; break;
        case 1: threading = "pthreads"; break;
        case 2: threading = "openmp"; break;
      }
    }
    const char* config = b.get_config != nullptr ? b.get_config() : nullptr;
    json = std::string("{\"library\":\"openblas\",\"config\":\"") + json_escape(config != nullptr ? config : "") +
           "\",\"threading\":\"" + threading + "\",\"threads\":" + std::to_string(b.get_num_threads()) + "}";
  }
  *out = dup_string(json);
  TS_API_END("blas_info")
}
int32_t ts_get_num_threads(void) { return at::get_num_threads(); }

ts_status* ts_set_num_interop_threads(int32_t n) {
  TS_API_BEGIN
  TS_CHECK_ARG(n > 0, "set_num_interop_threads", "thread count must be > 0, got " + std::to_string(n));
  // libtorch 2.x returns size_t here, 1.13 int: compare as int64_t on both.
  if (static_cast<int64_t>(at::get_num_interop_threads()) == n) return nullptr;
  at::set_num_interop_threads(n);
  TS_API_END("set_num_interop_threads")
}
int32_t ts_get_num_interop_threads(void) { return static_cast<int32_t>(at::get_num_interop_threads()); }

ts_status* ts_supported_qengines(char** out) {
  TS_API_BEGIN
  std::string s;
  for (auto e : at::globalContext().supportedQEngines()) {
    if (!s.empty()) s += ",";
    s += engine_name(e);
  }
  *out = dup_string(s);
  TS_API_END("supported_qengines")
}

ts_status* ts_get_qengine(char** out) {
  TS_API_BEGIN
  *out = dup_string(engine_name(at::globalContext().qEngine()));
  TS_API_END("get_qengine")
}

ts_status* ts_set_qengine(const char* name) {
  TS_API_BEGIN
  TS_CHECK_ARG(name != nullptr, "set_qengine", "engine name is NULL");
  select_engine(name);
  TS_API_END("set_qengine")
}

void ts_manual_seed(uint64_t seed) {
  try {
    torch::manual_seed(seed);
  } catch (...) {
  }
}

// ---- tensors ----

ts_status* ts_tensor_new(const void* data, size_t nbytes, int32_t dtype, const int64_t* shape, size_t ndim,
                         ts_tensor** out) {
  TS_API_BEGIN
  auto st = to_scalar_type(dtype);
  std::vector<int64_t> sizes(shape, shape + ndim);
  int64_t numel = 1;
  for (size_t i = 0; i < ndim; i++) {
    TS_CHECK_ARG(sizes[i] >= 0, "tensor_new", "negative dimension " + std::to_string(sizes[i]));
    numel *= sizes[i];
  }
  size_t want = static_cast<size_t>(numel) * c10::elementSize(st);
  TS_CHECK_ARG(want == nbytes, "tensor_new",
               "shape needs " + std::to_string(want) + " bytes, data has " + std::to_string(nbytes));
  auto t = at::empty(sizes, at::TensorOptions().dtype(st));
  if (nbytes > 0) {
    TS_CHECK_ARG(data != nullptr, "tensor_new", "data is NULL");
    std::memcpy(t.data_ptr(), data, nbytes);
  }
  auto h = std::make_unique<ts_tensor>(ts_tensor{t});
  *out = h.release();
  TS_API_END("tensor_new")
}

void ts_tensor_free(ts_tensor* t) { delete t; }
int32_t ts_tensor_dtype(const ts_tensor* t) { return from_scalar_type(t->t.scalar_type()); }
size_t ts_tensor_ndim(const ts_tensor* t) { return static_cast<size_t>(t->t.dim()); }
void ts_tensor_shape(const ts_tensor* t, int64_t* shape, size_t cap) {
  auto s = t->t.sizes();
  for (size_t i = 0; i < cap && i < s.size(); i++) shape[i] = s[i];
}
int64_t ts_tensor_numel(const ts_tensor* t) { return t->t.numel(); }

ts_status* ts_tensor_copy_to(const ts_tensor* t, void* dst, size_t nbytes) {
  TS_API_BEGIN
  at::Tensor src = t->t;
  if (src.is_quantized()) src = src.int_repr();
  src = src.contiguous();
  size_t have = static_cast<size_t>(src.numel()) * src.element_size();
  TS_CHECK_ARG(have == nbytes, "tensor_copy_to",
               "tensor holds " + std::to_string(have) + " bytes, destination has " + std::to_string(nbytes));
  if (nbytes > 0) std::memcpy(dst, src.data_ptr(), nbytes);
  TS_API_END("tensor_copy_to")
}

ts_status* ts_tensor_qparams(const ts_tensor* t, double** scales, int64_t** zero_points, size_t* n,
                             int64_t* axis) {
  TS_API_BEGIN
  const at::Tensor& q = t->t;
  TS_CHECK_ARG(q.is_quantized(), "tensor_qparams", "tensor is not quantized");
  std::vector<double> s;
  std::vector<int64_t> z;
  int64_t ax = -1;
  if (q.qscheme() == at::kPerTensorAffine || q.qscheme() == at::kPerTensorSymmetric) {
    s.push_back(q.q_scale());
    z.push_back(q.q_zero_point());
  } else {
    auto sc = q.q_per_channel_scales().to(at::kDouble).contiguous();
    auto zp = q.q_per_channel_zero_points().to(at::kLong).contiguous();
    s.assign(sc.data_ptr<double>(), sc.data_ptr<double>() + sc.numel());
    z.assign(zp.data_ptr<int64_t>(), zp.data_ptr<int64_t>() + zp.numel());
    ax = q.q_per_channel_axis();
  }
  auto* sp = static_cast<double*>(std::malloc(sizeof(double) * (s.size() ? s.size() : 1)));
  auto* zpp = static_cast<int64_t*>(std::malloc(sizeof(int64_t) * (z.size() ? z.size() : 1)));
  if (sp == nullptr || zpp == nullptr) {
    std::free(sp);
    std::free(zpp);
    throw std::bad_alloc();
  }
  std::copy(s.begin(), s.end(), sp);
  std::copy(z.begin(), z.end(), zpp);
  *n = s.size();
  *axis = ax;
  *zero_points = zpp;
  *scales = sp;
  TS_API_END("tensor_qparams")
}

ts_status* ts_tensor_to_float(const ts_tensor* t, ts_tensor** out) {
  TS_API_BEGIN
  at::Tensor f = t->t.is_quantized() ? t->t.dequantize() : t->t.to(at::kFloat);
  auto h = std::make_unique<ts_tensor>(ts_tensor{f.contiguous()});
  *out = h.release();
  TS_API_END("tensor_to_float")
}

ts_status* ts_tensor_channels_last(const ts_tensor* t, ts_tensor** out) {
  TS_API_BEGIN
  at::Tensor f;
  if (t->t.dim() == 4) {
    f = t->t.contiguous(at::MemoryFormat::ChannelsLast);
  } else if (t->t.dim() == 5) {
    f = t->t.contiguous(at::MemoryFormat::ChannelsLast3d);
  } else {
    return make_status("tensor_channels_last: channels-last needs a 4-D or 5-D tensor, got " +
                       std::to_string(t->t.dim()) + "-D");
  }
  auto h = std::make_unique<ts_tensor>(ts_tensor{f});
  *out = h.release();
  TS_API_END("tensor_channels_last")
}

// ---- modules ----

ts_status* ts_module_load(const char* path, ts_module** out) {
  TS_API_BEGIN
  TS_CHECK_ARG(path != nullptr, "load", "path is NULL");
  torch::jit::ExtraFilesMap extra;
  {
    caffe2::serialize::PyTorchStreamReader reader{std::string(path)};
    read_extra_files(reader, extra);
  }
  auto h = std::make_unique<ts_module>();
  h->m = torch::jit::load(std::string(path), c10::Device(c10::kCPU), extra);
  h->extra.insert(extra.begin(), extra.end());
  *out = h.release();
  TS_API_END("load")
}

ts_status* ts_module_load_bytes(const void* data, size_t len, ts_module** out) {
  TS_API_BEGIN
  TS_CHECK_ARG(data != nullptr || len == 0, "load_bytes", "data is NULL");
  auto adapter = std::make_shared<BufferAdapter>(std::string(static_cast<const char*>(data), len));
  torch::jit::ExtraFilesMap extra;
  {
    caffe2::serialize::PyTorchStreamReader reader{adapter};
    read_extra_files(reader, extra);
  }
  auto h = std::make_unique<ts_module>();
  h->m = torch::jit::load(adapter, c10::Device(c10::kCPU), extra);
  h->extra.insert(extra.begin(), extra.end());
  *out = h.release();
  TS_API_END("load_bytes")
}

void ts_module_free(ts_module* m) { delete m; }

ts_status* ts_module_save(const ts_module* m, const char* path, const char* const* names,
                          const char* const* contents, const size_t* lens, size_t n) {
  TS_API_BEGIN
  TS_CHECK_ARG(path != nullptr, "save", "path is NULL");
  torch::jit::ExtraFilesMap extra;
  for (size_t i = 0; i < n; i++) extra[names[i]] = std::string(contents[i], lens[i]);
  // Serialize to memory first: libtorch's zip writer finishes the archive in its destructor,
  // and a write error there (a full disk) throws from a destructor, which terminates the
  // process. Writing the bytes ourselves turns that into an error status.
  std::ostringstream buf;
  m->m.save(buf, extra);
  const std::string bytes = buf.str();
  std::FILE* f = std::fopen(path, "wb");
  if (f == nullptr) return make_status(std::string("save: cannot open ") + path + ": " + std::strerror(errno));
  size_t wrote = std::fwrite(bytes.data(), 1, bytes.size(), f);
  int flushed = std::fflush(f);
  int err = errno;
  int closed = std::fclose(f);
  if (wrote != bytes.size() || flushed != 0 || closed != 0)
    return make_status(std::string("save: writing ") + path + " failed after " + std::to_string(wrote) + " of " +
                       std::to_string(bytes.size()) + " bytes: " + std::strerror(err != 0 ? err : errno));
  TS_API_END("save")
}

ts_status* ts_module_extra_names(const ts_module* m, char** out) {
  TS_API_BEGIN
  std::string s;
  for (const auto& kv : m->extra) s += kv.first + "\n";
  *out = dup_string(s);
  TS_API_END("extra_names")
}

ts_status* ts_module_extra_file(const ts_module* m, const char* name, char** out, size_t* len) {
  TS_API_BEGIN
  auto it = m->extra.find(name);
  if (it == m->extra.end()) return make_status(std::string("extra_file: archive has no extra file \"") + name + "\"");
  char* p = static_cast<char*>(std::malloc(it->second.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, it->second.data(), it->second.size());
  *len = it->second.size();
  *out = p;
  TS_API_END("extra_file")
}

ts_status* ts_module_clone(const ts_module* m, ts_module** out) {
  TS_API_BEGIN
  auto h = std::make_unique<ts_module>();
  h->m = m->m.deepcopy();
  h->extra = m->extra;
  *out = h.release();
  TS_API_END("clone")
}

ts_status* ts_module_eval(ts_module* m) {
  TS_API_BEGIN
  m->m.eval();
  TS_API_END("eval")
}

ts_status* ts_module_freeze(const ts_module* m, const char* const* preserved, size_t n, ts_module** out) {
  TS_API_BEGIN
  std::vector<std::string> keep;
  for (size_t i = 0; i < n; i++) keep.emplace_back(preserved[i]);
  auto h = std::make_unique<ts_module>();
  torch::jit::Module src = m->m;  // freeze requires eval mode; it clones internally
  h->m = torch::jit::freeze(src, keep.empty() ? c10::nullopt : c10::optional<std::vector<std::string>>(keep));
  h->extra = m->extra;
  *out = h.release();
  TS_API_END("freeze")
}

ts_status* ts_module_fold_conv_bn(const ts_module* m, ts_module** out) {
  TS_API_BEGIN
  auto h = std::make_unique<ts_module>();
  h->m = torch::jit::FoldConvBatchNorm(m->m);
  h->extra = m->extra;
  *out = h.release();
  TS_API_END("fold_conv_bn")
}

ts_status* ts_module_optimize_for_inference(const ts_module* m, ts_module** out) {
  TS_API_BEGIN
  auto h = std::make_unique<ts_module>();
  torch::jit::Module src = m->m.clone();
  h->m = torch::jit::optimize_for_inference(src);
  h->extra = m->extra;
  *out = h.release();
  TS_API_END("optimize_for_inference")
}

ts_status* ts_module_channels_last(ts_module* m, int64_t* converted) {
  TS_API_BEGIN
  int64_t n = channels_last_in_place(m->m);
  *converted = n;
  TS_API_END("channels_last")
}

ts_status* ts_module_forward(const ts_module* m, ts_tensor* const* inputs, size_t n, ts_outputs** out) {
  TS_API_BEGIN
  return run_and_flatten(m->m, "forward", inputs, n, out);
  TS_API_END("forward")
}

ts_status* ts_module_run_method(const ts_module* m, const char* method, ts_tensor* const* inputs, size_t n,
                                ts_outputs** out) {
  TS_API_BEGIN
  TS_CHECK_ARG(method != nullptr, "run_method", "method name is NULL");
  TS_CHECK_ARG(m->m.find_method(method).has_value(), "run_method",
               std::string("module has no method \"") + method + "\"");
  return run_and_flatten(m->m, method, inputs, n, out);
  TS_API_END("run_method")
}

ts_status* ts_module_define(ts_module* m, const char* source) {
  TS_API_BEGIN
  TS_CHECK_ARG(source != nullptr, "define", "source is NULL");
  m->m.define(source);
  TS_API_END("define")
}

ts_status* ts_module_schema(const ts_module* m, char** out) {
  TS_API_BEGIN
  std::ostringstream os;
  os << m->m.get_method("forward").function().getSchema();
  *out = dup_string(os.str());
  TS_API_END("schema")
}

ts_status* ts_module_num_inputs(const ts_module* m, int64_t* out) {
  TS_API_BEGIN
  const auto& schema = m->m.get_method("forward").function().getSchema();
  int64_t n = static_cast<int64_t>(schema.arguments().size());
  *out = n > 0 ? n - 1 : 0;  // not counting self
  TS_API_END("num_inputs")
}

ts_status* ts_module_graph(const ts_module* m, char** out) {
  TS_API_BEGIN
  *out = dup_string(inlined_forward(m->m)->toString());
  TS_API_END("graph")
}

ts_status* ts_module_node_counts(const ts_module* m, char** out) {
  TS_API_BEGIN
  std::map<std::string, int64_t> counts;
  count_nodes(inlined_forward(m->m)->block(), counts);
  std::string s = "{";
  for (const auto& kv : counts) {
    if (s.size() > 1) s += ",";
    s += "\"" + json_escape(kv.first) + "\":" + std::to_string(kv.second);
  }
  s += "}";
  *out = dup_string(s);
  TS_API_END("node_counts")
}

ts_status* ts_module_submodules(const ts_module* m, char** out) {
  TS_API_BEGIN
  std::string s;
  for (const auto& nm : m->m.named_modules()) {
    if (nm.name.empty()) continue;
    s += nm.name + "\t" + nm.value.type()->name().value_or(c10::QualifiedName("?")).qualifiedName() + "\n";
  }
  *out = dup_string(s);
  TS_API_END("submodules")
}

ts_status* ts_module_time_forward(const ts_module* m, ts_tensor* const* inputs, size_t n, int64_t runs,
                                  int64_t* ns) {
  TS_API_BEGIN
  TS_CHECK_ARG(runs >= 0, "time_forward", "runs must be >= 0");
  auto args = make_inputs(inputs, n);
  auto method = m->m.get_method("forward");
  c10::InferenceMode guard;
  for (int64_t i = 0; i < runs; i++) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = method(args);
    auto t1 = std::chrono::steady_clock::now();
    ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }
  TS_API_END("time_forward")
}

// ---- outputs ----

size_t ts_outputs_size(const ts_outputs* o) { return o->names.size(); }
const char* ts_outputs_name(const ts_outputs* o, size_t i) { return i < o->names.size() ? o->names[i].c_str() : ""; }
ts_status* ts_outputs_get(const ts_outputs* o, size_t i, ts_tensor** out) {
  TS_API_BEGIN
  TS_CHECK_ARG(i < o->tensors.size(), "outputs_get", "index out of range");
  auto h = std::make_unique<ts_tensor>(ts_tensor{o->tensors[i]});
  *out = h.release();
  TS_API_END("outputs_get")
}
void ts_outputs_free(ts_outputs* o) { delete o; }

}  // extern "C"
