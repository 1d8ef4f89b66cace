// What csrc/fastencoder.cpp and csrc/fastconv.cpp take from csrc/fastlinear.cpp, and what
// fastconv.cpp defines. Not part of the C ABI.
#pragma once

#include <functional>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

namespace tsimpl {

// Columns per panel of a packed weight: panels [ceil(N / kLinearPanel), K, kLinearPanel].
constexpr int64_t kLinearPanel = 32;

// The panels torchspeed::linear_packed reads, from a weight [N, K].
at::Tensor pack_linear_weight(const at::Tensor& w);
// torchspeed::linear_packed: x @ W^T + bias (then relu), W packed by pack_linear_weight.
at::Tensor linear_packed(const at::Tensor& x, const at::Tensor& packed, const c10::optional<at::Tensor>& bias,
                         int64_t n, bool relu);
// The kernel linear_packed runs: y[M, n] (rows n apart) = x[M, K] (rows lda apart) @ packed (+ bias,
// then max(0, .) when relu), on the widest kernel this CPU has, parallel on the calling thread's
// team. Returns false, computing nothing, on a CPU without AVX2+FMA (the caller runs ATen then).
bool gemm_packed(const float* x, int64_t lda, int64_t M, int64_t K, const float* packed, const float* bias, float* y,
                 int64_t n, bool relu);
// The panels torchspeed::conv2d_gemm reads (csrc/fastconv.cpp), from a weight [OC, IC, kh, kw].
at::Tensor pack_conv_weight(const at::Tensor& w);
// torchspeed::conv2d_gemm: conv2d(x, weight, bias, stride, padding, dilation, groups 1) (then
// relu), computed from packed = pack_conv_weight(weight) where it can; the output channels-last.
at::Tensor conv2d_gemm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                       const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                       at::IntArrayRef dilation, bool relu);
// Calls f once on each graph of m's methods and its submodules' (submodules of one type share
// their methods' graphs): the walk of the fast_linear and fast_conv passes.
void for_each_method_graph(const torch::jit::Module& m, const std::function<void(torch::jit::Graph&)>& f);
// The constant float32 CPU tensor (no grad) a graph value holds, if it is one.
c10::optional<at::Tensor> constant_float(torch::jit::Value* v);
// Swaps an aten::_transformer_encoder_layer_fwd node with constant weights for
// torchspeed::transformer_encoder_layer (csrc/fastencoder.cpp). Returns -1 when it does not
// match, else how many of its linears took a fused relu (0 or 1).
int swap_encoder_layer(torch::jit::Node* node);

}  // namespace tsimpl
