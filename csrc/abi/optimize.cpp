// The C entries of the load-time passes over torchspeed's ops (csrc/passes): each clones the
// module, runs the pass on the clone and returns it with the pass's counts.
#include "internal.h"
#include "passes.h"

namespace {

// A clone of m (its extra files too) for a pass to rewrite.
std::unique_ptr<ts_module> clone_of(const ts_module* m) {
  auto h = std::make_unique<ts_module>();
  h->m = m->m.clone();
  h->extra = m->extra;
  return h;
}

}  // namespace

extern "C" {

ts_status* ts_module_fast_qdq_v2(const ts_module* m, ts_module** out, int64_t* quantizes, int64_t* dequantizes,
                                 int64_t* adds) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "fast_qdq");
  TS_CHECK_NOT_NULL(out, "fast_qdq");
  TS_CHECK_ARG(quantizes != nullptr && dequantizes != nullptr && adds != nullptr, "fast_qdq",
               "a count out-parameter is NULL");
  auto h = clone_of(m);
  auto counts = tsimpl::fast_qdq(h->m);
  *quantizes = counts.quantizes;
  *dequantizes = counts.dequantizes;
  *adds = counts.adds;
  *out = h.release();
  TS_API_END("fast_qdq")
}

ts_status* ts_module_fast_linear(const ts_module* m, ts_module** out, int64_t* linears, int64_t* relus) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "fast_linear");
  TS_CHECK_NOT_NULL(out, "fast_linear");
  TS_CHECK_ARG(linears != nullptr && relus != nullptr, "fast_linear", "a count out-parameter is NULL");
  auto h = clone_of(m);
  auto counts = tsimpl::fast_linear(h->m);
  *linears = counts.swapped;
  *relus = counts.relus;
  *out = h.release();
  TS_API_END("fast_linear")
}

ts_status* ts_module_linear_bf16(const ts_module* m, ts_module** out, int64_t* linears) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "linear_bf16");
  TS_CHECK_NOT_NULL(out, "linear_bf16");
  TS_CHECK_NOT_NULL(linears, "linear_bf16");
  auto h = clone_of(m);
  *linears = tsimpl::linear_bf16(h->m);
  *out = h.release();
  TS_API_END("linear_bf16")
}

ts_status* ts_module_fast_conv(const ts_module* m, ts_module** out, int64_t* convs, int64_t* relus) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "fast_conv");
  TS_CHECK_NOT_NULL(out, "fast_conv");
  TS_CHECK_ARG(convs != nullptr && relus != nullptr, "fast_conv", "a count out-parameter is NULL");
  auto h = clone_of(m);
  auto counts = tsimpl::fast_conv(h->m);
  *convs = counts.swapped;
  *relus = counts.relus;
  *out = h.release();
  TS_API_END("fast_conv")
}

const char* ts_conv_add_unavailable(void) noexcept { return tsimpl::conv_add_unavailable(); }

ts_status* ts_module_fuse_conv_add(const ts_module* m, ts_module** out, int64_t* fused) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "fuse_conv_add");
  TS_CHECK_NOT_NULL(out, "fuse_conv_add");
  TS_CHECK_NOT_NULL(fused, "fuse_conv_add");
  auto h = clone_of(m);
  *fused = tsimpl::fuse_conv_add(h->m);
  *out = h.release();
  TS_API_END("fuse_conv_add")
}

const char* ts_mkldnn_serve_unavailable(void) noexcept { return tsimpl::mkldnn_serve_unavailable(); }

ts_status* ts_module_serve_mkldnn(const ts_module* m, ts_module** out, int64_t* constants, int64_t* others) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "serve_mkldnn");
  TS_CHECK_NOT_NULL(out, "serve_mkldnn");
  TS_CHECK_ARG(constants != nullptr && others != nullptr, "serve_mkldnn", "a count out-parameter is NULL");
  auto h = clone_of(m);
  auto counts = tsimpl::serve_mkldnn(h->m);
  *constants = counts.constants;
  *others = counts.others;
  *out = h.release();
  TS_API_END("serve_mkldnn")
}

ts_status* ts_module_channels_last_inputs(const ts_module* m, const int64_t* inputs, size_t n, ts_module** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "channels_last_inputs");
  TS_CHECK_NOT_NULL(out, "channels_last_inputs");
  TS_CHECK_ARG(inputs != nullptr || n == 0, "channels_last_inputs", "inputs is NULL");
  auto h = clone_of(m);
  std::vector<int64_t> idx(inputs, inputs + n);
  tsimpl::channels_last_inputs(h->m, idx);
  *out = h.release();
  TS_API_END("channels_last_inputs")
}

}  // extern "C"
