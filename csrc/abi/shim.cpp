// The core of the C ABI: tensors, modules and their outputs. Status objects live in common.cpp;
// libtorch's process-wide settings (threads, quantized engines) and the inference-thread
// workers in runtime.cpp.
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/passes/fold_conv_bn.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "internal.h"

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
    fail(TS_CODE_UNSUPPORTED, "output " + (path.empty() ? std::string("0") : path) + " has type " + v.tagKind() +
                                  ", which torchspeed cannot return (tensors, tuples, lists, dicts only)");
  }
}

ts_status* run_and_flatten(const torch::jit::Module& m, const char* method, ts_tensor* const* inputs, size_t n,
                           ts_outputs** out) {
  auto args = make_inputs(inputs, n);
  c10::InferenceMode guard(tl_inference_mode);
  c10::NoGradGuard no_grad;  // Triton's order: InferenceMode, then NoGradGuard (a no-op under it)
  c10::IValue result = m.get_method(method)(std::move(args));
  auto o = std::make_unique<ts_outputs>();
  flatten(result, "", *o);
  *out = o.release();
  return nullptr;
}

// Opens an archive's reader and lists its extra/NAME records, so the handle can answer later
// without the file. A reader that cannot open it (no zip directory, a truncated file, a
// version record this libtorch cannot read) means a corrupt or foreign archive.
template <typename MakeReader>
void open_archive(MakeReader make, torch::jit::ExtraFilesMap& wanted) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = make();
  } catch (const c10::Error& e) {
    fail(TS_CODE_CORRUPT, e.what_without_backtrace());
  }
  for (const auto& rec : reader->getAllRecords()) {
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
  // A const reference is enough: set_data changes the TensorImpl the module shares, not the handle.
  auto convert = [&](const at::Tensor& t) {
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

// A copy of one state value that shares no tensor with the original. Each tensor is cloned on
// its own: IValue::deepcopy's memo keys tensors by storage, so two views of one storage (an
// LSTM's flattened weights) would both come back as copies of the first view.
c10::IValue copy_state_value(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return v;
    at::Tensor c = t.detach().clone();
    if (t.requires_grad()) c.set_requires_grad(true);
    return c;
  }
  if (v.isList()) {
    c10::List<c10::IValue> src = v.toList();
    c10::impl::GenericList dst(src.elementType());
    dst.reserve(src.size());
    for (size_t i = 0; i < src.size(); i++) dst.push_back(copy_state_value(src.get(i)));
    return dst;
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> elems;
    for (const auto& e : v.toTupleRef().elements()) elems.push_back(copy_state_value(e));
    return c10::ivalue::Tuple::create(std::move(elems));
  }
  if (v.isGenericDict()) {
    c10::Dict<c10::IValue, c10::IValue> src = v.toGenericDict();
    c10::impl::GenericDict dst(src.keyType(), src.valueType());
    dst.reserve(src.size());
    for (const auto& kv : src) dst.insert(kv.key(), copy_state_value(kv.value()));
    return dst;
  }
  return v.deepcopy();
}

}  // namespace

extern "C" {

// ---- tensors ----

ts_status* ts_tensor_new(const void* data, size_t nbytes, int32_t dtype, const int64_t* shape, size_t ndim,
                         ts_tensor** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(out, "tensor_new");
  TS_CHECK_ARG(shape != nullptr || ndim == 0, "tensor_new", "shape is NULL");
  TS_CHECK_ARG(data != nullptr || nbytes == 0, "tensor_new", "data is NULL");
  auto st = to_scalar_type(dtype);
  std::vector<int64_t> sizes(shape, shape + ndim);
  // Overflow-checked: a hostile shape must not wrap to a small allocation.
  size_t want = c10::elementSize(st);
  for (size_t i = 0; i < ndim; i++) {
    TS_CHECK_ARG(sizes[i] >= 0, "tensor_new", "negative dimension " + std::to_string(sizes[i]));
    if (sizes[i] != 0 && want > SIZE_MAX / static_cast<size_t>(sizes[i]))
      return make_status(TS_CODE_INVALID_ARGUMENT, "tensor_new", "shape's byte size overflows");
    want *= static_cast<size_t>(sizes[i]);
  }
  TS_CHECK_ARG(want == nbytes, "tensor_new",
               "shape needs " + std::to_string(want) + " bytes, data has " + std::to_string(nbytes));
  auto t = at::empty(sizes, at::TensorOptions().dtype(st));
  if (nbytes > 0) std::memcpy(t.data_ptr(), data, nbytes);
  auto h = std::make_unique<ts_tensor>(ts_tensor{t});
  *out = h.release();
  TS_API_END("tensor_new")
}

void ts_tensor_free(ts_tensor* t) noexcept { delete t; }
int32_t ts_tensor_dtype(const ts_tensor* t) noexcept { return t == nullptr ? -1 : from_scalar_type(t->t.scalar_type()); }
size_t ts_tensor_ndim(const ts_tensor* t) noexcept { return t == nullptr ? 0 : static_cast<size_t>(t->t.dim()); }
void ts_tensor_shape(const ts_tensor* t, int64_t* shape, size_t cap) noexcept {
  if (t == nullptr || shape == nullptr) return;
  auto s = t->t.sizes();
  for (size_t i = 0; i < cap && i < s.size(); i++) shape[i] = s[i];
}
int64_t ts_tensor_numel(const ts_tensor* t) noexcept { return t == nullptr ? 0 : t->t.numel(); }

ts_status* ts_tensor_copy_to(const ts_tensor* t, void* dst, size_t nbytes) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(t, "tensor_copy_to");
  TS_CHECK_ARG(dst != nullptr || nbytes == 0, "tensor_copy_to", "dst is NULL");
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
                             int64_t* axis) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(t, "tensor_qparams");
  TS_CHECK_ARG(scales != nullptr && zero_points != nullptr && n != nullptr && axis != nullptr, "tensor_qparams",
               "an out-parameter is NULL");
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
  auto* sp = static_cast<double*>(std::malloc(sizeof(double) * (s.empty() ? 1 : s.size())));
  auto* zpp = static_cast<int64_t*>(std::malloc(sizeof(int64_t) * (z.empty() ? 1 : z.size())));
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

ts_status* ts_tensor_to_float(const ts_tensor* t, ts_tensor** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(t, "tensor_to_float");
  TS_CHECK_NOT_NULL(out, "tensor_to_float");
  at::Tensor f = t->t.is_quantized() ? t->t.dequantize() : t->t.to(at::kFloat);
  auto h = std::make_unique<ts_tensor>(ts_tensor{f.contiguous()});
  *out = h.release();
  TS_API_END("tensor_to_float")
}

ts_status* ts_tensor_channels_last(const ts_tensor* t, ts_tensor** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(t, "tensor_channels_last");
  TS_CHECK_NOT_NULL(out, "tensor_channels_last");
  at::Tensor f;
  if (t->t.dim() == 4) {
    f = t->t.contiguous(at::MemoryFormat::ChannelsLast);
  } else if (t->t.dim() == 5) {
    f = t->t.contiguous(at::MemoryFormat::ChannelsLast3d);
  } else {
    return make_status(TS_CODE_INVALID_ARGUMENT, "tensor_channels_last",
                       "channels-last needs a 4-D or 5-D tensor, got " + std::to_string(t->t.dim()) + "-D");
  }
  auto h = std::make_unique<ts_tensor>(ts_tensor{f});
  *out = h.release();
  TS_API_END("tensor_channels_last")
}

// ---- modules ----

ts_status* ts_load_library(const char* path) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(path, "load_library");
  // A name without a slash is searched for as dlopen does (LD_LIBRARY_PATH, the cache).
  if (std::strchr(path, '/') != nullptr) {
    struct stat st;
    if (::stat(path, &st) != 0) {
      int err = errno;
      return make_status(TS_CODE_NOT_FOUND, "load_library", "\"" + clip(path) + "\": " + std::strerror(err));
    }
  }
  // RTLD_GLOBAL: the operators a library registers may call into libraries it brings along;
  // RTLD_NOW: a missing symbol fails here, not in the middle of a model's call. The handle is
  // never closed, since libtorch keeps pointers to the operators it registered.
  void* h = ::dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    const char* why = ::dlerror();
    return make_status(TS_CODE_INVALID_ARGUMENT, "load_library", why != nullptr ? std::string(why) : clip(path) + ": dlopen failed");
  }
  TS_API_END("load_library")
}

ts_status* ts_module_load(const char* path, ts_module** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(path, "load");
  TS_CHECK_NOT_NULL(out, "load");
  torch::jit::ExtraFilesMap extra;
  open_archive([&] { return std::make_unique<caffe2::serialize::PyTorchStreamReader>(std::string(path)); }, extra);
  auto h = std::make_unique<ts_module>();
  h->m = torch::jit::load(std::string(path), c10::Device(c10::kCPU), extra);
  h->extra.insert(extra.begin(), extra.end());
  *out = h.release();
  TS_API_END("load")
}

ts_status* ts_module_load_bytes(const void* data, size_t len, ts_module** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_ARG(data != nullptr || len == 0, "load_bytes", "data is NULL");
  TS_CHECK_NOT_NULL(out, "load_bytes");
  auto adapter = std::make_shared<BufferAdapter>(std::string(static_cast<const char*>(data), len));
  torch::jit::ExtraFilesMap extra;
  open_archive([&] { return std::make_unique<caffe2::serialize::PyTorchStreamReader>(adapter); }, extra);
  auto h = std::make_unique<ts_module>();
  h->m = torch::jit::load(adapter, c10::Device(c10::kCPU), extra);
  h->extra.insert(extra.begin(), extra.end());
  *out = h.release();
  TS_API_END("load_bytes")
}

void ts_module_free(ts_module* m) noexcept { delete m; }

ts_status* ts_module_save(const ts_module* m, const char* path, const char* const* names,
                          const char* const* contents, const size_t* lens, size_t n) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "save");
  TS_CHECK_NOT_NULL(path, "save");
  TS_CHECK_ARG(n == 0 || (names != nullptr && contents != nullptr && lens != nullptr), "save",
               "extra file arrays are NULL with n = " + std::to_string(n));
  torch::jit::ExtraFilesMap extra;
  for (size_t i = 0; i < n; i++) {
    TS_CHECK_ARG(names[i] != nullptr && (contents[i] != nullptr || lens[i] == 0), "save",
                 "extra file " + std::to_string(i) + " is NULL");
    extra[names[i]] = std::string(contents[i], lens[i]);
  }
  // Serialize to memory first: libtorch's zip writer finishes the archive in its destructor,
  // and a write error there (a full disk) throws from a destructor, which terminates the
  // process. Writing the bytes ourselves turns that into an error status.
  std::ostringstream buf;
  m->m.save(buf, extra);
  const std::string bytes = buf.str();
  std::FILE* f = std::fopen(path, "wb");
  if (f == nullptr) {
    int err = errno;
    return io_status("save", std::string("cannot open ") + path + ": " + std::strerror(err), err);
  }
  size_t wrote = std::fwrite(bytes.data(), 1, bytes.size(), f);
  int flushed = std::fflush(f);
  int err = errno;
  int closed = std::fclose(f);
  if (wrote != bytes.size() || flushed != 0 || closed != 0) {
    if (err == 0) err = errno;
    return io_status("save",
                     std::string("writing ") + path + " failed after " + std::to_string(wrote) + " of " +
                         std::to_string(bytes.size()) + " bytes: " + std::strerror(err),
                     err);
  }
  TS_API_END("save")
}

ts_status* ts_module_extra_names(const ts_module* m, char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "extra_names");
  TS_CHECK_NOT_NULL(out, "extra_names");
  std::string s;
  for (const auto& kv : m->extra) s += kv.first + "\n";
  *out = dup_string(s);
  TS_API_END("extra_names")
}

ts_status* ts_module_extra_file(const ts_module* m, const char* name, char** out, size_t* len) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "extra_file");
  TS_CHECK_NOT_NULL(name, "extra_file");
  TS_CHECK_ARG(out != nullptr && len != nullptr, "extra_file", "an out-parameter is NULL");
  auto it = m->extra.find(name);
  if (it == m->extra.end())
    return make_status(TS_CODE_NOT_FOUND, "extra_file", "archive has no extra file \"" + clip(name) + "\"");
  char* p = static_cast<char*>(std::malloc(it->second.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  // Bytes of a stated length, not a C string (torchspeed.h says so); the extra byte only keeps an
  // empty file from asking malloc for 0 bytes.
  std::memcpy(p, it->second.data(), it->second.size());  // NOLINT(bugprone-not-null-terminated-result)
  *len = it->second.size();
  *out = p;
  TS_API_END("extra_file")
}

ts_status* ts_module_clone(const ts_module* m, ts_module** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "clone");
  TS_CHECK_NOT_NULL(out, "clone");
  auto h = std::make_unique<ts_module>();
  h->m = m->m.deepcopy();
  h->extra = m->extra;
  *out = h.release();
  TS_API_END("clone")
}

ts_status* ts_module_clone_state(const ts_module* m, const char* const* attrs, size_t n, ts_module** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "clone_state");
  TS_CHECK_NOT_NULL(out, "clone_state");
  TS_CHECK_ARG(n == 0 || attrs != nullptr, "clone_state", "attrs is NULL with n = " + std::to_string(n));
  using ObjectPtr = c10::intrusive_ptr<c10::ivalue::Object>;
  ObjectPtr root = m->m._ivalue()->copy();
  // The objects copied so far, by the original's address and by their own, so that two paths
  // through one submodule copy it once.
  std::map<const c10::ivalue::Object*, ObjectPtr> copies{{m->m._ivalue().get(), root}, {root.get(), root}};
  for (size_t i = 0; i < n; i++) {
    TS_CHECK_ARG(attrs[i] != nullptr, "clone_state", "attribute name " + std::to_string(i) + " is NULL");
    const std::string path = attrs[i];
    ObjectPtr obj = root;
    std::string walked;
    size_t start = 0;
    for (;;) {
      size_t dot = path.find('.', start);
      std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      walked += (walked.empty() ? "" : ".") + part;
      auto slot = obj->type()->findAttributeSlot(part);
      if (!slot)
        throw CodedError(TS_CODE_NOT_FOUND, "module has no attribute \"" + clip(walked) + "\" (state attribute \"" +
                                                clip(path) + "\")");
      c10::IValue v = obj->getSlot(*slot);
      if (dot == std::string::npos) {
        obj->setSlot(*slot, copy_state_value(v));
        break;
      }
      if (!v.isObject())
        throw CodedError(TS_CODE_NOT_FOUND, "attribute \"" + clip(walked) + "\" is not a module (state attribute \"" +
                                                clip(path) + "\")");
      ObjectPtr child = v.toObject();
      auto it = copies.find(child.get());
      if (it == copies.end()) {
        ObjectPtr c = child->copy();
        it = copies.emplace(child.get(), c).first;
        copies.emplace(c.get(), c);
      }
      obj->setSlot(*slot, it->second);
      obj = it->second;
      start = dot + 1;
    }
  }
  auto h = std::make_unique<ts_module>();
  h->m = torch::jit::Module(root);
  h->extra = m->extra;
  *out = h.release();
  TS_API_END("clone_state")
}

ts_status* ts_module_eval(ts_module* m) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "eval");
  m->m.eval();
  TS_API_END("eval")
}

ts_status* ts_module_freeze(const ts_module* m, const char* const* preserved, size_t n, ts_module** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "freeze");
  TS_CHECK_NOT_NULL(out, "freeze");
  TS_CHECK_ARG(n == 0 || preserved != nullptr, "freeze", "preserved is NULL with n = " + std::to_string(n));
  std::vector<std::string> keep;
  for (size_t i = 0; i < n; i++) {
    TS_CHECK_ARG(preserved[i] != nullptr, "freeze", "preserved name " + std::to_string(i) + " is NULL");
    keep.emplace_back(preserved[i]);
  }
  auto h = std::make_unique<ts_module>();
  torch::jit::Module src = m->m;  // freeze requires eval mode; it clones internally
  h->m = torch::jit::freeze(src, keep.empty() ? c10::nullopt : c10::optional<std::vector<std::string>>(keep));
  h->extra = m->extra;
  *out = h.release();
  TS_API_END("freeze")
}

ts_status* ts_module_fold_conv_bn(const ts_module* m, ts_module** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "fold_conv_bn");
  TS_CHECK_NOT_NULL(out, "fold_conv_bn");
  auto h = std::make_unique<ts_module>();
  h->m = torch::jit::FoldConvBatchNorm(m->m);
  h->extra = m->extra;
  *out = h.release();
  TS_API_END("fold_conv_bn")
}

ts_status* ts_module_optimize_for_inference(const ts_module* m, ts_module** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "optimize_for_inference");
  TS_CHECK_NOT_NULL(out, "optimize_for_inference");
  auto h = std::make_unique<ts_module>();
  torch::jit::Module src = m->m.clone();
  h->m = torch::jit::optimize_for_inference(src);
  h->extra = m->extra;
  *out = h.release();
  TS_API_END("optimize_for_inference")
}

ts_status* ts_module_channels_last(ts_module* m, int64_t* converted) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "channels_last");
  TS_CHECK_NOT_NULL(converted, "channels_last");
  int64_t n = channels_last_in_place(m->m);
  *converted = n;
  TS_API_END("channels_last")
}

ts_status* ts_module_forward(const ts_module* m, ts_tensor* const* inputs, size_t n, ts_outputs** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "forward");
  TS_CHECK_NOT_NULL(out, "forward");
  return run_and_flatten(m->m, "forward", inputs, n, out);
  TS_API_END("forward")
}

ts_status* ts_module_forward_single(const ts_module* m, ts_tensor* const* inputs, size_t n, ts_outputs** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "forward");
  TS_CHECK_NOT_NULL(out, "forward");
  tsimpl::OneThreadTeam one;
  return run_and_flatten(m->m, "forward", inputs, n, out);
  TS_API_END("forward")
}

ts_status* ts_module_run_method(const ts_module* m, const char* method, ts_tensor* const* inputs, size_t n,
                                ts_outputs** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "run_method");
  TS_CHECK_NOT_NULL(method, "run_method");
  TS_CHECK_NOT_NULL(out, "run_method");
  if (!m->m.find_method(method).has_value())
    return make_status(TS_CODE_NOT_FOUND, "run_method", "module has no method \"" + clip(method, 80) + "\"");
  return run_and_flatten(m->m, method, inputs, n, out);
  TS_API_END("run_method")
}

ts_status* ts_module_define(ts_module* m, const char* source) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "define");
  TS_CHECK_NOT_NULL(source, "define");
  m->m.define(source);
  TS_API_END("define")
}

ts_status* ts_module_schema(const ts_module* m, char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "schema");
  TS_CHECK_NOT_NULL(out, "schema");
  std::ostringstream os;
  os << m->m.get_method("forward").function().getSchema();
  *out = dup_string(os.str());
  TS_API_END("schema")
}

ts_status* ts_module_num_inputs(const ts_module* m, int64_t* out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "num_inputs");
  TS_CHECK_NOT_NULL(out, "num_inputs");
  const auto& schema = m->m.get_method("forward").function().getSchema();
  int64_t n = static_cast<int64_t>(schema.arguments().size());
  *out = n > 0 ? n - 1 : 0;  // not counting self
  TS_API_END("num_inputs")
}

ts_status* ts_module_graph(const ts_module* m, char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "graph");
  TS_CHECK_NOT_NULL(out, "graph");
  *out = dup_string(inlined_forward(m->m)->toString());
  TS_API_END("graph")
}

ts_status* ts_module_node_counts(const ts_module* m, char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "node_counts");
  TS_CHECK_NOT_NULL(out, "node_counts");
  std::map<std::string, int64_t> counts;
  count_nodes(inlined_forward(m->m)->block(), counts);
  JsonWriter w;
  w.begin_object();
  for (const auto& kv : counts) w.key(kv.first).value(kv.second);
  w.end_object();
  *out = dup_string(w.str());
  TS_API_END("node_counts")
}

ts_status* ts_module_submodules(const ts_module* m, char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "submodules");
  TS_CHECK_NOT_NULL(out, "submodules");
  std::string s;
  for (const auto& nm : m->m.named_modules()) {
    if (nm.name.empty()) continue;
    s += nm.name + "\t" + nm.value.type()->name().value_or(c10::QualifiedName("?")).qualifiedName() + "\n";
  }
  *out = dup_string(s);
  TS_API_END("submodules")
}

ts_status* ts_module_time_forward(const ts_module* m, ts_tensor* const* inputs, size_t n, int64_t runs,
                                  int64_t* ns) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "time_forward");
  TS_CHECK_ARG(runs >= 0, "time_forward", "runs must be >= 0");
  TS_CHECK_ARG(ns != nullptr || runs == 0, "time_forward", "ns is NULL");
  auto args = make_inputs(inputs, n);
  auto method = m->m.get_method("forward");
  // Times go to a local vector and reach the caller's buffer only once every run succeeded.
  std::vector<int64_t> times(static_cast<size_t>(runs));
  {
    c10::InferenceMode guard;
    for (int64_t i = 0; i < runs; i++) {
      auto t0 = std::chrono::steady_clock::now();
      auto r = method(args);
      auto t1 = std::chrono::steady_clock::now();
      times[static_cast<size_t>(i)] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    }
  }
  std::copy(times.begin(), times.end(), ns);
  TS_API_END("time_forward")
}

// ---- outputs ----

size_t ts_outputs_size(const ts_outputs* o) noexcept { return o == nullptr ? 0 : o->names.size(); }
const char* ts_outputs_name(const ts_outputs* o, size_t i) noexcept {
  return o != nullptr && i < o->names.size() ? o->names[i].c_str() : "";
}
ts_status* ts_outputs_get(const ts_outputs* o, size_t i, ts_tensor** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(o, "outputs_get");
  TS_CHECK_NOT_NULL(out, "outputs_get");
  TS_CHECK_ARG(i < o->tensors.size(), "outputs_get",
               "index " + std::to_string(i) + " out of range (" + std::to_string(o->tensors.size()) + " outputs)");
  auto h = std::make_unique<ts_tensor>(ts_tensor{o->tensors[i]});
  *out = h.release();
  TS_API_END("outputs_get")
}
ts_status* ts_outputs_take_all(const ts_outputs* o, ts_tensor** tensors, const char** names, size_t cap) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(o, "outputs_take_all");
  TS_CHECK_ARG(cap == 0 || (tensors != nullptr && names != nullptr), "outputs_take_all", "tensors or names is NULL");
  size_t k = std::min(cap, o->tensors.size());
  // Every handle is made before any reaches the caller's buffer.
  std::vector<std::unique_ptr<ts_tensor>> hs;
  hs.reserve(k);
  for (size_t i = 0; i < k; i++) hs.push_back(std::make_unique<ts_tensor>(ts_tensor{o->tensors[i]}));
  for (size_t i = 0; i < k; i++) {
    tensors[i] = hs[i].release();
    names[i] = o->names[i].c_str();
  }
  TS_API_END("outputs_take_all")
}
void ts_outputs_free(ts_outputs* o) noexcept { delete o; }

}  // extern "C"
