// The test-only entry points of ts_testing.h, over the kernels' and passes' static libraries. Its
// own library (libtorchspeed_testing.so), loaded beside libtorchspeed.so: the ts_tensor and
// ts_status objects it returns are freed there (same layout, same allocator; the out-of-memory
// status is recognised by its flag).
#include <ATen/core/dispatch/Dispatcher.h>

#include "fastconvsmall.h"
#include "fastlinear.h"
#include "fastq.h"
#include "internal.h"
#include "passes.h"
#ifdef TS_HAVE_CONV_ADD
#include "fastqconv.h"
#endif
#include "ts_testing.h"

using tsfast::Isa;
using tsimpl::fail;

namespace {

using tsimpl::plain_float;

// The kernel a ts_kernel names, for the entries that take torchspeed's (not ATEN). FAST is the
// widest this CPU has; a forced one it lacks fails (TS_CODE_UNSUPPORTED).
Isa isa_of(ts_kernel kernel) {
  switch (kernel) {
    case TS_KERNEL_FAST: return tsfast::cpu_isa();
    case TS_KERNEL_SCALAR: return tsfast::resolve(Isa::Scalar);
    case TS_KERNEL_AVX2: return tsfast::resolve(Isa::Avx2);
    case TS_KERNEL_AVX512: return tsfast::resolve(Isa::Avx512);
    default: fail(TS_CODE_INVALID_ARGUMENT, "unknown kernel " + std::to_string(kernel));
  }
}

c10::optional<at::Tensor> optional_of(const ts_tensor* t) {
  if (t == nullptr) return c10::nullopt;
  return t->t;
}

}  // namespace

extern "C" {

ts_status* ts_test_quantize_per_tensor(const ts_tensor* t, double scale, int64_t zero_point, int32_t dtype,
                                       ts_kernel kernel, ts_tensor** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(t, "quantize_per_tensor");
  TS_CHECK_NOT_NULL(out, "quantize_per_tensor");
  at::ScalarType st;
  switch (dtype) {
    case TS_QUINT8: st = at::kQUInt8; break;
    case TS_QINT8: st = at::kQInt8; break;
    case TS_QINT32: st = at::kQInt32; break;
    default: fail(TS_CODE_INVALID_ARGUMENT, "dtype code " + std::to_string(dtype) + " is not a quantized type");
  }
  c10::InferenceMode guard;
  auto r = kernel == TS_KERNEL_ATEN ? at::quantize_per_tensor(t->t, scale, zero_point, st)
                                    : tsfast::quantize_per_tensor_with(isa_of(kernel), t->t, scale, zero_point, st);
  *out = new ts_tensor{std::move(r)};
  TS_API_END("quantize_per_tensor")
}

ts_status* ts_test_dequantize(const ts_tensor* t, ts_kernel kernel, ts_tensor** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(t, "dequantize");
  TS_CHECK_NOT_NULL(out, "dequantize");
  c10::InferenceMode guard;
  auto r = kernel == TS_KERNEL_ATEN ? at::dequantize(t->t) : tsfast::dequantize_with(isa_of(kernel), t->t);
  *out = new ts_tensor{std::move(r)};
  TS_API_END("dequantize")
}

ts_status* ts_test_qadd(const ts_tensor* a, const ts_tensor* b, double scale, int64_t zero_point, int32_t relu,
                        ts_kernel kernel, ts_tensor** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(a, "qadd");
  TS_CHECK_NOT_NULL(b, "qadd");
  TS_CHECK_NOT_NULL(out, "qadd");
  TS_CHECK_ARG(relu == 0 || relu == 1, "qadd", "relu is " + std::to_string(relu) + ", want 0 or 1");
  c10::InferenceMode guard;
  auto r = kernel == TS_KERNEL_ATEN ? tsfast::aten_add(relu != 0, a->t, b->t, scale, zero_point)
                                    : tsfast::add_with(isa_of(kernel), relu != 0, a->t, b->t, scale, zero_point);
  *out = new ts_tensor{std::move(r)};
  TS_API_END("qadd")
}

ts_status* ts_test_linear(const ts_tensor* x, const ts_tensor* w, const ts_tensor* b, int32_t relu, ts_kernel kernel,
                          ts_tensor** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(x, "linear");
  TS_CHECK_NOT_NULL(w, "linear");
  TS_CHECK_NOT_NULL(out, "linear");
  TS_CHECK_ARG(kernel != TS_KERNEL_SCALAR, "linear", "linear has no scalar kernel (ATen's runs there)");
  TS_CHECK_ARG(relu == 0 || relu == 1, "linear", "relu is " + std::to_string(relu) + ", want 0 or 1");
  TS_CHECK_ARG(w->t.dim() == 2, "linear", "the weight has " + std::to_string(w->t.dim()) + " dimensions, want 2");
  c10::InferenceMode guard;
  auto bias = optional_of(b);
  at::Tensor r;
  if (kernel == TS_KERNEL_ATEN || !plain_float(w->t)) {  // ATen's, or its error for a weight of another type
    r = at::linear(x->t, w->t, bias);
    if (relu) r = at::relu(r);
  } else {
    // A forced kernel runs at every row count; FAST is the graph op, fallbacks and all.
    r = tsimpl::linear_packed_with(isa_of(kernel), x->t, tsimpl::pack_linear_weight(w->t), bias, w->t.size(0),
                                   relu != 0, kernel != TS_KERNEL_FAST);
  }
  *out = new ts_tensor{std::move(r)};
  TS_API_END("linear")
}

ts_status* ts_test_linear_bf16(const ts_tensor* x, const ts_tensor* w, const ts_tensor* b, int32_t relu,
                               ts_kernel kernel, ts_tensor** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(x, "linear_bf16");
  TS_CHECK_NOT_NULL(w, "linear_bf16");
  TS_CHECK_NOT_NULL(out, "linear_bf16");
  TS_CHECK_ARG(relu == 0 || relu == 1, "linear_bf16", "relu is " + std::to_string(relu) + ", want 0 or 1");
  TS_CHECK_ARG(w->t.dim() == 2 && plain_float(w->t), "linear_bf16",
               "the weight is not a 2-D float32 CPU tensor (" + std::to_string(w->t.dim()) + " dimensions)");
  c10::InferenceMode guard;
  auto bias = optional_of(b);
  using tsimpl::Bf16Path;
  at::Tensor r;
  if (kernel == TS_KERNEL_ATEN) {
    r = at::linear(x->t, w->t, bias);
    if (relu) r = at::relu(r);
  } else {
    Bf16Path path = tsimpl::bf16_path();
    switch (kernel) {
      case TS_KERNEL_FAST: break;
      case TS_KERNEL_SCALAR: path = Bf16Path::Aten; break;
      case TS_KERNEL_AVX2: path = tsimpl::bf16_resolve(Bf16Path::Avx2); break;
      case TS_KERNEL_AVX512: path = tsimpl::bf16_resolve(Bf16Path::Avx512); break;
      case TS_KERNEL_AVX512BF16: path = tsimpl::bf16_resolve(Bf16Path::Dot); break;
      default: fail(TS_CODE_INVALID_ARGUMENT, "unknown kernel " + std::to_string(kernel));
    }
    r = tsimpl::linear_bf16_with(path, x->t, tsimpl::pack_linear_weight_bf16(w->t), bias, w->t.size(0), relu != 0,
                                 kernel != TS_KERNEL_FAST);
  }
  *out = new ts_tensor{std::move(r)};
  TS_API_END("linear_bf16")
}

ts_status* ts_test_linear_pack(const ts_tensor* w, ts_tensor** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(w, "linear_pack");
  TS_CHECK_NOT_NULL(out, "linear_pack");
  TS_CHECK_ARG(w->t.dim() == 2 && plain_float(w->t), "linear_pack",
               "the weight is not a 2-D float32 CPU tensor (" + std::to_string(w->t.dim()) + " dimensions)");
  c10::InferenceMode guard;
  *out = new ts_tensor{tsimpl::pack_linear_weight(w->t)};
  TS_API_END("linear_pack")
}

ts_status* ts_test_linear_packed(const ts_tensor* x, const ts_tensor* packed, const ts_tensor* b, int64_t n,
                                 int32_t relu, ts_kernel kernel, ts_tensor** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(x, "linear_packed");
  TS_CHECK_NOT_NULL(packed, "linear_packed");
  TS_CHECK_NOT_NULL(out, "linear_packed");
  TS_CHECK_ARG(kernel == TS_KERNEL_FAST || kernel == TS_KERNEL_AVX2 || kernel == TS_KERNEL_AVX512, "linear_packed",
               "kernel " + std::to_string(kernel) + " is not FAST, AVX2 or AVX512");
  TS_CHECK_ARG(relu == 0 || relu == 1, "linear_packed", "relu is " + std::to_string(relu) + ", want 0 or 1");
  c10::InferenceMode guard;
  *out = new ts_tensor{tsimpl::linear_packed_with(isa_of(kernel), x->t, packed->t, optional_of(b), n, relu != 0,
                                                  kernel != TS_KERNEL_FAST)};
  TS_API_END("linear_packed")
}

ts_status* ts_test_conv2d(const ts_tensor* x, const ts_tensor* w, const ts_tensor* b, const ts_test_conv2d_args* args,
                          ts_kernel kernel, ts_tensor** out, int32_t* fast) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(x, "conv2d");
  TS_CHECK_NOT_NULL(w, "conv2d");
  TS_CHECK_NOT_NULL(args, "conv2d");
  TS_CHECK_NOT_NULL(out, "conv2d");
  TS_CHECK_ARG(kernel == TS_KERNEL_ATEN || kernel == TS_KERNEL_FAST, "conv2d",
               "kernel " + std::to_string(kernel) + " is not ATEN or FAST");
  TS_CHECK_ARG(args->relu == 0 || args->relu == 1, "conv2d", "relu is " + std::to_string(args->relu) + ", want 0 or 1");
  c10::InferenceMode guard;
  auto bias = optional_of(b);
  const std::vector<int64_t> stride{args->stride[0], args->stride[1]}, padding{args->padding[0], args->padding[1]},
      dilation{args->dilation[0], args->dilation[1]};
  bool ran_fast = false;
  at::Tensor r;
  // ATen's, or what the fast_conv pass leaves to it (groups > 1 but depthwise), or its error for a
  // weight the pass would not pack.
  const bool dw = plain_float(w->t) && w->t.dim() == 4 && args->groups > 1 && w->t.size(0) == args->groups &&
                  w->t.size(1) == 1;
  if (kernel == TS_KERNEL_FAST && dw) {
    r = tsimpl::conv_dw_impl(x->t, w->t, tsimpl::pack_dw_weight(w->t), bias, stride, padding, dilation,
                             args->relu != 0, &ran_fast);
  } else if (kernel == TS_KERNEL_ATEN || args->groups != 1 || !plain_float(w->t) || w->t.dim() != 4 ||
             w->t.size(0) == 0) {
    r = at::conv2d(x->t, w->t, bias, stride, padding, dilation, args->groups);
    if (args->relu) r = at::relu(r);
  } else {
    r = tsimpl::conv2d_gemm_impl(x->t, w->t, tsimpl::pack_conv_weight(w->t), bias, stride, padding, dilation,
                                 args->relu != 0, &ran_fast);
  }
  if (fast != nullptr) *fast = ran_fast ? 1 : 0;
  *out = new ts_tensor{std::move(r)};
  TS_API_END("conv2d")
}

ts_status* ts_test_conv2d_pool(const ts_tensor* x, const ts_tensor* w, const ts_tensor* b,
                               const ts_test_conv2d_args* args, const ts_test_pool_args* pool, ts_kernel kernel,
                               ts_tensor** out, int32_t* fast) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(x, "conv2d_pool");
  TS_CHECK_NOT_NULL(w, "conv2d_pool");
  TS_CHECK_NOT_NULL(args, "conv2d_pool");
  TS_CHECK_NOT_NULL(out, "conv2d_pool");
  TS_CHECK_ARG(kernel == TS_KERNEL_ATEN || kernel == TS_KERNEL_FAST || kernel == TS_KERNEL_AVX2 ||
                   kernel == TS_KERNEL_AVX512,
               "conv2d_pool", "kernel " + std::to_string(kernel) + " is not ATEN, FAST, AVX2 or AVX512");
  TS_CHECK_ARG(args->relu == 0 || args->relu == 1, "conv2d_pool",
               "relu is " + std::to_string(args->relu) + ", want 0 or 1");
  TS_CHECK_ARG(args->groups == 1, "conv2d_pool", "groups is " + std::to_string(args->groups) + ", want 1");
  TS_CHECK_ARG(plain_float(w->t) && w->t.dim() == 4 && w->t.size(0) > 0, "conv2d_pool",
               "the weight is not a float32 [O, I, kh, kw] tensor");
  c10::InferenceMode guard;
  auto bias = optional_of(b);
  const std::vector<int64_t> stride{args->stride[0], args->stride[1]}, padding{args->padding[0], args->padding[1]},
      dilation{args->dilation[0], args->dilation[1]};
  std::vector<int64_t> pk, ps;
  if (pool != nullptr) {
    pk = {pool->kernel[0], pool->kernel[1]};
    ps = {pool->stride[0], pool->stride[1]};
  }
  bool ran_fast = false;
  at::Tensor r;
  if (kernel == TS_KERNEL_ATEN) {
    r = at::conv2d(x->t, w->t, bias, stride, padding, dilation, 1);
    if (args->relu) r = at::relu(r);
    if (pool != nullptr) r = at::max_pool2d(r, pk, ps, {0, 0}, {1, 1}, false);
  } else if (kernel == TS_KERNEL_FAST) {
    const at::Tensor packed = tsimpl::pack_conv_weight(w->t);
    r = pool != nullptr ? tsimpl::conv2d_pool_impl(Isa::Best, x->t, w->t, packed, bias, stride, padding, dilation,
                                                   args->relu != 0, pk, ps, &ran_fast)
                        : tsimpl::conv2d_gemm_impl(x->t, w->t, packed, bias, stride, padding, dilation,
                                                   args->relu != 0, &ran_fast);
  } else {
    r = tsimpl::conv2d_pool_impl(isa_of(kernel), x->t, w->t, tsimpl::pack_conv_weight(w->t), bias, stride, padding,
                                 dilation, args->relu != 0, pk, ps, &ran_fast);
  }
  if (fast != nullptr) *fast = ran_fast ? 1 : 0;
  *out = new ts_tensor{std::move(r)};
  TS_API_END("conv2d_pool")
}

ts_status* ts_test_qconv2d_add(const ts_tensor* qx, const ts_tensor* residual, const ts_test_qconv_add_args* args,
                               ts_kernel kernel, ts_tensor** out, int32_t* fused) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(qx, "qconv2d_add");
  TS_CHECK_NOT_NULL(residual, "qconv2d_add");
  TS_CHECK_NOT_NULL(args, "qconv2d_add");
  TS_CHECK_NOT_NULL(out, "qconv2d_add");
  TS_CHECK_NOT_NULL(fused, "qconv2d_add");
  const ts_tensor* w = args->weight;
  const ts_tensor* wscales = args->wscales;
  TS_CHECK_NOT_NULL(w, "qconv2d_add");
  TS_CHECK_NOT_NULL(wscales, "qconv2d_add");
  TS_CHECK_ARG(kernel == TS_KERNEL_ATEN || kernel == TS_KERNEL_FAST, "qconv2d_add",
               "kernel " + std::to_string(kernel) + " is not ATEN or FAST");
  TS_CHECK_ARG(w->t.dim() == 4 && w->t.scalar_type() == at::kFloat, "qconv2d_add",
               "the weight is not a 4-D float32 tensor");
  TS_CHECK_ARG(wscales->t.dim() == 1 && wscales->t.scalar_type() == at::kFloat &&
                   (wscales->t.size(0) == 1 || wscales->t.size(0) == w->t.size(0)),
               "qconv2d_add", "the weight scales are not a float32 vector of 1 or O elements");
  if (kernel == TS_KERNEL_FAST && tsimpl::conv_add_unavailable() != nullptr) {
    fail(TS_CODE_UNSUPPORTED, tsimpl::conv_add_unavailable());
  }
  c10::InferenceMode guard;
  at::Tensor wq;
  if (wscales->t.size(0) == 1) {
    wq = at::quantize_per_tensor(w->t, wscales->t.item<double>(), 0, at::kQInt8);
  } else {
    wq = at::quantize_per_channel(w->t, wscales->t.to(at::kDouble), at::zeros({w->t.size(0)}, at::kLong), 0, at::kQInt8);
  }
  auto prepack = c10::Dispatcher::singleton().findSchemaOrThrow("quantized::conv2d_prepack", "");
  torch::jit::Stack stack{wq,
                          args->bias != nullptr ? c10::IValue(args->bias->t) : c10::IValue(),
                          c10::List<int64_t>({args->stride, args->stride}),
                          c10::List<int64_t>({args->padding, args->padding}),
                          c10::List<int64_t>({args->dilation, args->dilation}),
                          args->groups};
  prepack.callBoxed(&stack);
  c10::IValue packed = stack.at(0);
  const bool residual_first = args->residual_first != 0, relu = args->relu != 0;
  bool ran = false;
  at::Tensor r;
  if (kernel == TS_KERNEL_ATEN) {
    auto conv = c10::Dispatcher::singleton().findSchemaOrThrow("quantized::conv2d", "new");
    torch::jit::Stack s{qx->t, packed, args->conv_scale, args->conv_zero_point};
    conv.callBoxed(&s);
    auto add = c10::Dispatcher::singleton().findSchemaOrThrow(relu ? "quantized::add_relu" : "quantized::add", "");
    at::Tensor c = s.at(0).toTensor();
    torch::jit::Stack s2{residual_first ? residual->t : c, residual_first ? c : residual->t, args->scale,
                         args->zero_point};
    add.callBoxed(&s2);
    r = s2.at(0).toTensor();
  } else {
#ifdef TS_HAVE_CONV_ADD
    at::Tensor dst = residual->t.is_quantized() ? residual->t.clone(at::MemoryFormat::ChannelsLast) : residual->t;
    r = tsimpl::conv2d_add_run(qx->t, packed, args->conv_scale, args->conv_zero_point, dst, args->scale,
                               args->zero_point, relu, !residual_first, &ran);
#endif
  }
  *fused = ran ? 1 : 0;
  *out = new ts_tensor{std::move(r)};
  TS_API_END("qconv2d_add")
}

ts_status* ts_test_lstm(const ts_tensor* input, const ts_tensor* h0, const ts_tensor* c0,
                        const ts_tensor* const* params, int64_t n_params, int64_t num_layers, int32_t batch_first,
                        ts_kernel kernel, ts_tensor** out, ts_tensor** h_n, ts_tensor** c_n, int32_t* fast) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(input, "lstm");
  TS_CHECK_NOT_NULL(h0, "lstm");
  TS_CHECK_NOT_NULL(c0, "lstm");
  TS_CHECK_NOT_NULL(out, "lstm");
  TS_CHECK_NOT_NULL(h_n, "lstm");
  TS_CHECK_NOT_NULL(c_n, "lstm");
  TS_CHECK_ARG(n_params >= 0 && n_params <= 4096 && (n_params == 0 || params != nullptr), "lstm",
               "n_params is " + std::to_string(n_params) + " (params NULL or too many)");
  TS_CHECK_ARG(batch_first == 0 || batch_first == 1, "lstm",
               "batch_first is " + std::to_string(batch_first) + ", want 0 or 1");
  std::vector<at::Tensor> ps;
  for (int64_t i = 0; i < n_params; i++) {
    TS_CHECK_NOT_NULL(params[i], "lstm");
    ps.push_back(params[i]->t);
  }
  c10::InferenceMode guard;
  const std::vector<at::Tensor> hx{h0->t, c0->t};
  bool ran_fast = false;
  std::tuple<at::Tensor, at::Tensor, at::Tensor> r;
  if (kernel == TS_KERNEL_ATEN) {
    r = at::lstm(input->t, hx, ps, true, num_layers, 0.0, false, false, batch_first != 0);
  } else {
    const Isa isa = isa_of(kernel);
    // What the pass would not swap runs ATen's op, as in a graph the pass left alone.
    if (!tsimpl::lstm_packable(ps, true, num_layers)) {
      r = at::lstm(input->t, hx, ps, true, num_layers, 0.0, false, false, batch_first != 0);
    } else {
      r = tsimpl::lstm_packed_with(isa, input->t, hx, ps, tsimpl::pack_lstm_weights(ps, true, num_layers), true,
                                   num_layers, batch_first != 0, &ran_fast);
    }
  }
  auto o = std::make_unique<ts_tensor>(ts_tensor{std::get<0>(r)});
  auto h = std::make_unique<ts_tensor>(ts_tensor{std::get<1>(r)});
  auto c = std::make_unique<ts_tensor>(ts_tensor{std::get<2>(r)});
  if (fast != nullptr) *fast = ran_fast ? 1 : 0;
  *out = o.release();
  *h_n = h.release();
  *c_n = c.release();
  TS_API_END("lstm")
}

}  // extern "C"
