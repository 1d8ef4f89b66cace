// The graph rewrites the C ABI's ts_module_* functions run, and the helpers they share. Each pass
// rewrites the module it is given, in place (the C entries hand it a clone). Not part of the C ABI.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tsimpl {

// ---- the walk every pass takes (passes.cpp) ----

// Calls f once on each graph of m's methods and its submodules' (submodules of one type share
// their methods' graphs).
using GraphFn = std::function<void(const std::shared_ptr<torch::jit::Graph>&)>;
void for_each_method_graph(const torch::jit::Module& m, const GraphFn& f);
// The constant float32 CPU tensor (no grad) a graph value holds, if it is one.
c10::optional<at::Tensor> constant_float(torch::jit::Value* v);
// The single node that uses v, if v has exactly one use.
torch::jit::Node* only_user(torch::jit::Value* v);

// ---- load-time passes over torchspeed's ops ----

// fast_qdq (fastqdq.cpp): aten::quantize_per_tensor, aten::dequantize, quantized::add and
// quantized::add_relu to torchspeed's, where those give the same tensors with this libtorch.
struct FastQdqCounts {
  int64_t quantizes = 0, dequantizes = 0, adds = 0;
};
FastQdqCounts fast_qdq(torch::jit::Module& m);

// fast_linear (fastlinear.cpp) and fast_conv (fastconv.cpp): linears (and LSTMs: swap_lstm) /
// convs with constant weights to torchspeed::linear_packed / conv2d_gemm (conv_dw for depthwise convs), a following relu fused. swapped counts the
// linears (four per encoder layer) or convs, relus those that took a relu. On a CPU without
// AVX2+FMA nothing is swapped.
struct SwapCounts {
  int64_t swapped = 0, relus = 0;
};
SwapCounts fast_linear(torch::jit::Module& m);
SwapCounts fast_conv(torch::jit::Module& m);
// linear_bf16 (linear_bf16.cpp), after fast_linear: the FP32 panels of torchspeed::linear_packed
// and torchspeed::transformer_encoder_layer to BF16 ones (weights rounded to BF16, and x at each
// call). Returns how many linears it converted (four per encoder layer).
int64_t linear_bf16(torch::jit::Module& m);
// Swaps an aten::lstm node with constant weights (eval mode, one direction, no projections) for
// torchspeed::lstm (fastlstm.cpp), part of fast_linear. Returns how many linears that took (two
// per layer: the input's and the hidden state's), 0 when it does not match.
int64_t swap_lstm(torch::jit::Node* node);
// Swaps an aten::_transformer_encoder_layer_fwd node with constant weights for
// torchspeed::transformer_encoder_layer (fastencoder.cpp). Returns -1 when it does not match, else
// how many of its linears took a fused relu (0 or 1).
int swap_encoder_layer(torch::jit::Node* node);

// fuse_conv_add (convadd.cpp): quantized::conv2d + quantized::add[_relu] pairs to
// torchspeed::conv2d_add; returns how many were fused (none where conv_add_unavailable() says why).
int64_t fuse_conv_add(torch::jit::Module& m);
// nullptr when this build has torchspeed::conv2d_add; otherwise why not.
const char* conv_add_unavailable() noexcept;

// ---- the served graph (mkldnnserve.cpp) ----

// serve_mkldnn: optimize_for_inference's prim::ConstantMKLDNNTensor, prim::BroadcastMKLDNNTensors
// and prim::MKLDNNHardTanh_/MKLDNNClamp_ nodes (state in node attributes, which serialization
// drops) to torchspeed::mkldnn_constant over a torchspeed.MkldnnConstant, mkldnn_broadcast and
// mkldnn_hardtanh_; same primitives and layouts. Nothing where mkldnn_serve_unavailable() says why.
struct MkldnnServeCounts {
  int64_t constants = 0, conv_weights = 0, others = 0;
};
MkldnnServeCounts serve_mkldnn(torch::jit::Module& m);
const char* mkldnn_serve_unavailable() noexcept;
// Inserts aten::contiguous(x, memory_format=channels_last) at the start of forward for each of
// its (0-based, self not counted) tensor inputs listed; returns how many.
int64_t channels_last_inputs(torch::jit::Module& m, const std::vector<int64_t>& inputs);

// ---- quantization rewrites (quant_rewrite.cpp) ----

// Folds hardtanh(0, b)/relu6 that follow a quantized op into its output qparams (static INT8).
// observed is the module calibration ran on (its observers give the activations' quant range);
// returns how many clamps were folded.
int64_t fold_quantized_clamps(const torch::jit::Module& observed, torch::jit::Module& quantized);

// Whether the submodule at a path stays FP32 (its qconfig is null).
using PathFilter = std::function<bool(const std::string& path)>;
// Observes one FP32 weight with the config's weight observer and returns it quantized to qint8.
using WeightQuantizer = std::function<at::Tensor(const at::Tensor& weight)>;

// Replaces the aten::lstm/aten::gru calls of a finalized dynamic-INT8 module by
// aten::quantized_lstm/_gru over prepacked qint8 cell weights, as eager quantize_dynamic does.
// src is the FP32 module the conversion started from (its LSTM/GRU submodules' weights identify
// their calls in the frozen graph); reduce_range is the activation observer's. Returns how many
// calls were rewritten.
int64_t quantize_dynamic_rnns(const torch::jit::Module& src, torch::jit::Module& quantized,
                              const PathFilter& keep_fp32, const WeightQuantizer& quantize, bool reduce_range);

}  // namespace tsimpl
