// What csrc/fastencoder.cpp takes from csrc/fastlinear.cpp. Not part of the C ABI.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

namespace tsimpl {

// The panels torchspeed::linear_packed reads, from a weight [N, K].
at::Tensor pack_linear_weight(const at::Tensor& w);
// torchspeed::linear_packed: x @ W^T + bias (then relu), W packed by pack_linear_weight.
at::Tensor linear_packed(const at::Tensor& x, const at::Tensor& packed, const c10::optional<at::Tensor>& bias,
                         int64_t n, bool relu);
// The constant float32 CPU tensor (no grad) a graph value holds, if it is one.
c10::optional<at::Tensor> constant_float(torch::jit::Value* v);
// Swaps an aten::_transformer_encoder_layer_fwd node with constant weights for
// torchspeed::transformer_encoder_layer (csrc/fastencoder.cpp). Returns -1 when it does not
// match, else how many of its linears took a fused relu (0 or 1).
int swap_encoder_layer(torch::jit::Node* node);

}  // namespace tsimpl
