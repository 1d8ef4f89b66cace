// What fastlinear.cpp, fastconv.cpp and fastencoder.cpp offer the passes and each other: the FP32
// GEMM over packed weights and the ops built on it. Not part of the C ABI.
#pragma once

#include <ATen/ATen.h>

#include "fastq.h"

namespace tsimpl {

// A CPU float tensor in strided layout: what the fast kernels compute on (else ATen runs).
inline bool plain_float(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat;
}

// No autograd graph to record: the fast kernels have no backward.
inline bool no_grad(const at::Tensor& t) { return !(t.requires_grad() && at::GradMode::is_enabled()); }

// A conv parameter as a pair: ATen takes one value for both dimensions, or two.
inline bool pair_of(at::IntArrayRef v, int64_t out[2]) {
  if (v.size() == 1) {
    out[0] = out[1] = v[0];
    return true;
  }
  if (v.size() != 2) return false;
  out[0] = v[0];
  out[1] = v[1];
  return true;
}

// Columns per panel of a packed weight: panels [ceil(N / kLinearPanel), K, kLinearPanel].
constexpr int64_t kLinearPanel = 32;
// Depth (IC*kh*kw) past which conv2d_gemm always runs ATen's convolution: the fast_conv pass
// leaves deeper convs as they are.
constexpr int64_t kConvMaxDepth = 576;

// The panels torchspeed::linear_packed reads, from a weight [N, K].
at::Tensor pack_linear_weight(const at::Tensor& w);
// torchspeed::linear_packed: x @ W^T + bias (then relu), W packed by pack_linear_weight (FP32) or by
// pack_linear_weight_bf16 (BF16: linear_bf16_with on the widest path).
at::Tensor linear_packed(const at::Tensor& x, const at::Tensor& packed, const c10::optional<at::Tensor>& bias,
                         int64_t n, bool relu);
// linear_packed on the kernel isa (Scalar: ATen's linear); any_rows runs the kernel at every row
// count (the graph op leaves large ones to BLAS).
at::Tensor linear_packed_with(tsfast::Isa isa, const at::Tensor& x, const at::Tensor& packed,
                              const c10::optional<at::Tensor>& bias, int64_t n, bool relu, bool any_rows);
// The kernel linear_packed runs: y[M, n] (rows n apart) = x[M, K] (rows lda apart) @ packed (+ bias,
// then max(0, .) when relu), on the widest kernel this CPU has, parallel on the calling thread's
// team. Returns false, computing nothing, on a CPU without AVX2+FMA (the caller runs ATen then).
bool gemm_packed(const float* x, int64_t lda, int64_t M, int64_t K, const float* packed, const float* bias, float* y,
                 int64_t n, bool relu);
// The BF16 GEMM's paths (fastlinear_bf16.cpp), ordered: vdpbf16ps (AVX512_BF16), BF16 widened to
// float on AVX-512F or on AVX2+FMA, ATen's linear on the widened weight.
enum class Bf16Path { Aten = 0, Avx2 = 1, Avx512 = 2, Dot = 3 };
// The widest path this CPU has, under TORCHSPEED_MAX_ISA ("avx512" leaves out AVX512_BF16).
Bf16Path bf16_path();
// want, when this CPU has it; else a NotImplementedError naming the instructions.
Bf16Path bf16_resolve(Bf16Path want);
// The BF16 panels (W rounded to nearest even) torchspeed::linear_packed also takes, from a weight
// [N, K]: [ceil(N / kLinearPanel), ceil(K / 2), 2 * kLinearPanel], pairs of k side by side.
at::Tensor pack_linear_weight_bf16(const at::Tensor& w);
// The [n, k] float weight back from BF16 panels (the BF16 values, widened).
at::Tensor unpack_linear_weight_bf16(const at::Tensor& packed, int64_t n, int64_t k);
// linear_packed over BF16 panels on the given path (Aten: ATen's linear on the widened weight);
// any_rows as linear_packed_with's.
at::Tensor linear_bf16_with(Bf16Path path, const at::Tensor& x, const at::Tensor& packed,
                            const c10::optional<at::Tensor>& bias, int64_t n, bool relu, bool any_rows);
// The taps torchspeed::conv_dw reads (fastconv.cpp), from a depthwise weight [C, 1, kh, kw]:
// [kh*kw, C], channels innermost.
at::Tensor pack_dw_weight(const at::Tensor& w);
// torchspeed::conv_dw: conv2d(x, weight, bias, stride, padding, dilation, groups C) for a
// depthwise weight [C, 1, kh, kw] (then relu), computed from packed = pack_dw_weight(weight)
// where it can; the output channels-last. *fast (where given) says whether torchspeed's loop ran.
at::Tensor conv_dw_impl(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                        const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                        at::IntArrayRef dilation, bool relu, bool* fast);
at::Tensor conv_dw(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                   const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                   at::IntArrayRef dilation, bool relu);
// The panels torchspeed::conv2d_gemm reads (fastconv.cpp), from a weight [OC, IC, kh, kw].
at::Tensor pack_conv_weight(const at::Tensor& w);
// torchspeed::conv2d_gemm: conv2d(x, weight, bias, stride, padding, dilation, groups 1) (then
// relu), computed from packed = pack_conv_weight(weight) where it can; the output channels-last.
at::Tensor conv2d_gemm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                       const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                       at::IntArrayRef dilation, bool relu);
// conv2d_gemm; *fast says whether torchspeed's kernel ran (false: ATen's conv did).
at::Tensor conv2d_gemm_impl(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                            const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                            at::IntArrayRef dilation, bool relu, bool* fast);

// Whether aten::lstm's params (per layer w_ih [4H, in], w_hh [4H, H], then b_ih and b_hh [4H] when
// has_biases) are float CPU tensors of a unidirectional LSTM without projections, which
// torchspeed::lstm (fastlstm.cpp) covers.
bool lstm_packable(at::TensorList params, bool has_biases, int64_t num_layers);
// The weights torchspeed::lstm reads, from params that lstm_packable accepts: per layer
// [in + H + 1, 4H padded to 16], [W_ih | W_hh]^T then b_ih + b_hh, the layers one after another.
at::Tensor pack_lstm_weights(at::TensorList params, bool has_biases, int64_t num_layers);
// torchspeed::lstm: aten::lstm(input, hx, params, has_biases, num_layers, dropout, train false,
// bidirectional false, batch_first) computed from packed = pack_lstm_weights(params) where it can.
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_packed(const at::Tensor& input, at::TensorList hx,
                                                           at::TensorList params, const at::Tensor& packed,
                                                           bool has_biases, int64_t num_layers, bool batch_first);
// lstm_packed on the kernel isa (Scalar: the plain loop); *fast (where given) says whether
// torchspeed's loop ran (false: at::lstm did).
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_packed_with(tsfast::Isa isa, const at::Tensor& input,
                                                                at::TensorList hx, at::TensorList params,
                                                                const at::Tensor& packed, bool has_biases,
                                                                int64_t num_layers, bool batch_first, bool* fast);

}  // namespace tsimpl
