// The fast_linear pass: swaps torchspeed::linear_packed (kernels/fastlinear.cpp) in for
// aten::linear and for the aten::matmul (+ aten::add bias) pair that optimize_for_inference leaves,
// fusing a following relu, and aten::_transformer_encoder_layer_fwd (a scripted layer's, or a traced
// layer's ops fused into one by fuse_encoder.cpp) for torchspeed::transformer_encoder_layer
// (kernels/fastencoder.cpp), and aten::lstm for torchspeed::lstm (fastlstm.cpp).
#include <torch/csrc/jit/ir/constants.h>

#include <vector>

#include "fastlinear.h"
#include "fuse_encoder.h"
#include "passes.h"

namespace {

using torch::jit::Node;
using torch::jit::Value;

bool const_is_one(Value* v) {
  auto iv = torch::jit::toIValue(v);
  return iv && ((iv->isInt() && iv->toInt() == 1) || (iv->isDouble() && iv->toDouble() == 1.0));
}

using Counts = tsimpl::SwapCounts;
using tsimpl::constant_float;
using tsimpl::only_user;

// Swaps one linear (node: aten::linear or aten::matmul) if it matches; returns whether it did.
bool swap_one(Node* node, Counts& counts) {
  static const auto sym = c10::Symbol::fromQualString("torchspeed::linear_packed");
  at::Tensor w;  // [N, K]
  c10::optional<at::Tensor> bias;
  Node* last = node;  // the node whose output the swapped op gives
  std::vector<Node*> gone{node};
  if (node->kind() == c10::Symbol::fromQualString("aten::linear")) {
    auto wc = constant_float(node->input(1));
    if (!wc || wc->dim() != 2) return false;
    w = *wc;
    if (!node->input(2)->type()->cast<c10::NoneType>()) {
      bias = constant_float(node->input(2));
      if (!bias || bias->dim() != 1 || bias->size(0) != w.size(0)) return false;
    }
  } else {
    auto wt = constant_float(node->input(1));
    if (!wt || wt->dim() != 2) return false;
    w = wt->t();
    Node* add = only_user(node->output());
    if (add != nullptr && add->matches("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor") &&
        add->input(0) == node->output() && const_is_one(add->input(2))) {
      auto b = constant_float(add->input(1));
      if (b && b->dim() == 1 && b->size(0) == w.size(0)) {
        bias = b;
        last = add;
        gone.push_back(add);
      }
    }
  }
  bool relu = false;
  if (Node* r = only_user(last->output());
      r != nullptr && (r->matches("aten::relu(Tensor self) -> Tensor") || r->matches("aten::relu_(Tensor(a!) self) -> Tensor(a!)"))) {
    relu = true;
    last = r;
    gone.push_back(r);
  }
  auto* graph = node->owningGraph();
  torch::jit::WithInsertPoint guard(node);
  Value* packed = graph->insertConstant(tsimpl::pack_linear_weight(w));
  Value* b = bias ? graph->insertConstant(bias->contiguous()) : graph->insertConstant(c10::IValue());
  Value* n = graph->insertConstant(w.size(0));
  Value* rl = graph->insertConstant(relu);
  Node* repl = graph->create(sym, {node->input(0), packed, b, n, rl}, 1);
  repl->output()->setType(last->output()->type());
  repl->insertBefore(node);
  last->output()->replaceAllUsesWith(repl->output());
  for (auto it = gone.rbegin(); it != gone.rend(); ++it) (*it)->destroy();
  counts.swapped++;
  if (relu) counts.relus++;
  return true;
}

void swap_block(torch::jit::Block* block, Counts& counts) {
  static const auto encoder = c10::Symbol::fromQualString("aten::_transformer_encoder_layer_fwd");
  std::vector<Node*> todo, layers, lstms;
  for (auto* node : block->nodes()) {
    for (auto* sub : node->blocks()) swap_block(sub, counts);
    if (node->kind() == encoder) layers.push_back(node);
    if (node->kind() == c10::aten::lstm) lstms.push_back(node);
    if (node->matches("aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor") ||
        node->matches("aten::matmul(Tensor self, Tensor other) -> Tensor")) {
      todo.push_back(node);
    }
  }
  for (auto* node : todo) swap_one(node, counts);
  for (auto* node : lstms) counts.swapped += tsimpl::swap_lstm(node);
  for (auto* node : layers) {
    int relus = tsimpl::swap_encoder_layer(node);
    if (relus >= 0) {  // its four linears run torchspeed's kernel
      counts.swapped += 4;
      counts.relus += relus;
    }
  }
}

}  // namespace

tsimpl::SwapCounts tsimpl::fast_linear(torch::jit::Module& m) {
  Counts counts;
  if (tsfast::cpu_isa() == tsfast::Isa::Scalar) return counts;  // without AVX2+FMA: unchanged
  at::NoGradGuard guard;  // packed constants are plain tensors, not inference ones
  for_each_method_graph(m, [&counts](const auto& g) {
    fuse_traced_encoder_layers(g);  // first: its layers' linears then go whole to the encoder op
    swap_block(g->block(), counts);
  });
  return counts;
}

int tsimpl::swap_encoder_layer(torch::jit::Node* node) {
  static const auto sym = c10::Symbol::fromQualString("torchspeed::transformer_encoder_layer");
  if (!node->matches(
          "aten::_transformer_encoder_layer_fwd(Tensor src, int embed_dim, int num_heads, Tensor qkv_weight, Tensor "
          "qkv_bias, Tensor proj_weight, Tensor proj_bias, bool use_gelu, bool norm_first, float eps, Tensor "
          "norm_weight_1, Tensor norm_bias_1, Tensor norm_weight_2, Tensor norm_bias_2, Tensor ffn_weight_1, Tensor "
          "ffn_bias_1, Tensor ffn_weight_2, Tensor ffn_bias_2, Tensor? mask=None, int? mask_type=None) -> Tensor")) {
    return -1;
  }
  // qkv_weight, proj_weight, ffn_weight_1, ffn_weight_2: constant 2-D float tensors.
  std::vector<at::Tensor> weights;
  for (size_t i : {3, 5, 14, 16}) {
    auto w = constant_float(node->input(i));
    if (!w || w->dim() != 2) return -1;
    weights.push_back(*w);
  }
  auto use_gelu = torch::jit::toIValue(node->input(7));
  if (!use_gelu || !use_gelu->isBool()) return -1;
  auto* graph = node->owningGraph();
  torch::jit::WithInsertPoint guard(node);
  std::vector<torch::jit::Value*> inputs(node->inputs().begin(), node->inputs().end());
  for (const auto& w : weights) inputs.push_back(graph->insertConstant(pack_linear_weight(w)));
  auto* repl = graph->create(sym, inputs, 1);
  repl->output()->setType(node->output()->type());
  repl->insertBefore(node);
  node->output()->replaceAllUsesWith(repl->output());
  node->destroy();
  return use_gelu->toBool() ? 0 : 1;
}
