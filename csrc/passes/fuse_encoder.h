// The traced-encoder-layer fusion fast_linear runs first (fuse_encoder.cpp). Not part of the C ABI.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <memory>

namespace tsimpl {

// Each traced post-norm nn.TransformerEncoderLayer (batch first, eval, no mask) in graph becomes
// one aten::_transformer_encoder_layer_fwd node, then dead code is removed. Returns how many
// layers were fused.
int64_t fuse_traced_encoder_layers(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace tsimpl
