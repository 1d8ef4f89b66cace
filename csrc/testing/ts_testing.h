/*
 * ts_testing.h: test-only entry points into torchspeed's kernels, in libtorchspeed_testing.so.
 * Neither is installed, and libtorchspeed.so exports none of these symbols: they exist so that
 * the Go tests (bindings/torch/internal/kerneltest) can run each kernel against ATen's op on the
 * CPU at hand. The conventions are torchspeed.h's (status, borrowed handles, new references),
 * with one exception: nothing here limits the calling thread's OpenMP team, so call these from an
 * inference thread (the Go tests do, through torch.Do) or accept a pool on the calling thread.
 * No compatibility is promised between versions.
 */
#ifndef TS_TESTING_H_
#define TS_TESTING_H_

#include "torchspeed.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TS_BUILDING_TESTING)
#define TS_TESTING_EXPORT __attribute__((visibility("default")))
#else
#define TS_TESTING_EXPORT
#endif

/* Whose implementation an entry runs. Not every entry has every kernel: each says which it takes,
 * and refuses the others (TS_CODE_INVALID_ARGUMENT). A forced instruction set the CPU lacks gives
 * TS_CODE_UNSUPPORTED. */
typedef int32_t ts_kernel;
enum {
  TS_KERNEL_ATEN = 0,   /* libtorch's own op */
  TS_KERNEL_FAST = 1,   /* torchspeed's op as its graphs run it: the widest kernel, fallbacks and all */
  TS_KERNEL_SCALAR = 2, /* torchspeed's scalar reference kernel */
  TS_KERNEL_AVX2 = 3,   /* torchspeed's AVX2 (+FMA) kernel */
  TS_KERNEL_AVX512 = 4, /* torchspeed's AVX-512F kernel */
  TS_KERNEL_AVX512BF16 = 5 /* torchspeed's AVX512_BF16 kernel (vdpbf16ps): ts_test_linear_bf16 only */
};

/* quantize_per_tensor(t, scale, zero_point, dtype) for dtype TS_QUINT8, TS_QINT8 or TS_QINT32.
 * Kernels: all. */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_quantize_per_tensor(const ts_tensor* t, double scale,
                                                                       int64_t zero_point, int32_t dtype,
                                                                       ts_kernel kernel, ts_tensor** out) TS_NOEXCEPT;
/* dequantize(t). Kernels: all. */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_dequantize(const ts_tensor* t, ts_kernel kernel,
                                                              ts_tensor** out) TS_NOEXCEPT;
/* quantized::add(a, b, scale, zero_point), or add_relu when relu is 1. Kernels: all (what
 * torchspeed's does not cover goes to ATen's). */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_qadd(const ts_tensor* a, const ts_tensor* b, double scale,
                                                        int64_t zero_point, int32_t relu, ts_kernel kernel,
                                                        ts_tensor** out) TS_NOEXCEPT;
/* linear(x, w, b) (b may be NULL), then relu when relu is 1; torchspeed's kernels pack w first.
 * Kernels: ATEN, FAST, AVX2, AVX512 (a forced one runs at every row count). */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_linear(const ts_tensor* x, const ts_tensor* w, const ts_tensor* b,
                                                          int32_t relu, ts_kernel kernel,
                                                          ts_tensor** out) TS_NOEXCEPT;
/* The panels torchspeed::linear_packed reads, from a 2-D float32 weight [N, K]. */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_linear_pack(const ts_tensor* w, ts_tensor** out) TS_NOEXCEPT;
/* torchspeed::linear_packed(x, pack_linear_weight_bf16(w), b, n, relu): the BF16 GEMM. Kernels:
 * ATEN (at::linear in FP32 on w as given, the reference), FAST (the graph op, fallbacks and all),
 * SCALAR (ATen's linear on the BF16 weight widened), AVX2, AVX512 (BF16 widened to float),
 * AVX512BF16 (vdpbf16ps); a forced one runs at every row count, and one the CPU lacks fails
 * (TS_CODE_UNSUPPORTED). */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_linear_bf16(const ts_tensor* x, const ts_tensor* w, const ts_tensor* b,
                                                               int32_t relu, ts_kernel kernel,
                                                               ts_tensor** out) TS_NOEXCEPT;
/* torchspeed::linear_packed(x, packed, b, n, relu). Kernels: FAST (the graph op), AVX2, AVX512. */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_linear_packed(const ts_tensor* x, const ts_tensor* packed,
                                                                 const ts_tensor* b, int64_t n, int32_t relu,
                                                                 ts_kernel kernel, ts_tensor** out) TS_NOEXCEPT;

/* A 2-D convolution's arguments: stride, padding and dilation as (height, width). */
typedef struct ts_test_conv2d_args {
  int64_t stride[2], padding[2], dilation[2];
  int64_t groups;
  int32_t relu; /* 1: relu after the convolution */
} ts_test_conv2d_args;

/* conv2d(x, w, b, ...) (b may be NULL), then relu. Kernels: ATEN, FAST (torchspeed::conv2d_gemm
 * with w packed on every call; torchspeed::conv_dw for a depthwise one). *fast (may be NULL) says
 * whether torchspeed's kernel ran. */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_conv2d(const ts_tensor* x, const ts_tensor* w, const ts_tensor* b,
                                                          const ts_test_conv2d_args* args, ts_kernel kernel,
                                                          ts_tensor** out, int32_t* fast) TS_NOEXCEPT;

/* A max_pool2d's kernel and stride (height, width); no padding, dilation 1, floor. */
typedef struct ts_test_pool_args {
  int64_t kernel[2], stride[2];
} ts_test_pool_args;

/* max_pool2d(conv2d(x, w, b, ...) then relu, pool) (pool may be NULL: the convolution alone),
 * groups 1. Kernels: ATEN (its three ops), FAST (torchspeed::conv2d_pool as the fast_conv pass's
 * graphs run it; conv2d_gemm without a pool), AVX2, AVX512 (the direct tiny-image kernel on that
 * instruction set, conv2d_gemm's path and ATen's pool where it does not apply). w is packed on every
 * call. *fast (may be NULL) says whether the direct kernel ran. */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_conv2d_pool(const ts_tensor* x, const ts_tensor* w,
                                                               const ts_tensor* b, const ts_test_conv2d_args* args,
                                                               const ts_test_pool_args* pool, ts_kernel kernel,
                                                               ts_tensor** out, int32_t* fast) TS_NOEXCEPT;

/* One quantized convolution + add: the float weight [O, I/groups, kh, kw] is quantized to qint8
 * (zero point 0) with the float32 vector wscales (1 or O scales) and prepacked on the current
 * quantized engine. */
typedef struct ts_test_qconv_add_args {
  const ts_tensor* weight;  /* borrowed */
  const ts_tensor* wscales; /* borrowed */
  const ts_tensor* bias;    /* borrowed; may be NULL */
  int64_t stride, padding, dilation, groups;
  double conv_scale;
  int64_t conv_zero_point;
  double scale; /* the add's output */
  int64_t zero_point;
  int32_t relu;           /* 1: add_relu */
  int32_t residual_first; /* 1: add(residual, conv) */
} ts_test_qconv_add_args;

/* quantized::add[_relu](quantized::conv2d(qx, W, ...), residual, ...). Kernels: ATEN (the two
 * ops), FAST (torchspeed::conv2d_add as fuse_conv_add's graphs run it, on a copy of residual;
 * TS_CODE_UNSUPPORTED where ts_conv_add_unavailable() says why). *fused says whether the fused
 * oneDNN convolution ran. */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_qconv2d_add(const ts_tensor* qx, const ts_tensor* residual,
                                                               const ts_test_qconv_add_args* args, ts_kernel kernel,
                                                               ts_tensor** out, int32_t* fused) TS_NOEXCEPT;

/* aten::lstm(input, [h0, c0], params, has_biases 1, num_layers, dropout 0, train 0, bidirectional
 * 0, batch_first) over n_params weights (per layer w_ih, w_hh, b_ih, b_hh). Kernels: ATEN, FAST
 * (torchspeed::lstm as fast_linear's graphs run it, the weights packed on every call), SCALAR,
 * AVX2, AVX512. *fast (may be NULL) says whether torchspeed's loop ran. out, h_n and c_n are new
 * references, all three set or none. */
TS_TESTING_EXPORT TS_MUST_CHECK ts_status* ts_test_lstm(const ts_tensor* input, const ts_tensor* h0,
                                                        const ts_tensor* c0, const ts_tensor* const* params,
                                                        int64_t n_params, int64_t num_layers, int32_t batch_first,
                                                        ts_kernel kernel, ts_tensor** out, ts_tensor** h_n,
                                                        ts_tensor** c_n, int32_t* fast) TS_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif /* TS_TESTING_H_ */
