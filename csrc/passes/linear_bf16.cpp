// The linear_bf16 pass, run after fast_linear: the FP32 panels of torchspeed::linear_packed and of
// torchspeed::transformer_encoder_layer become BF16 panels (kernels/fastlinear_bf16.cpp), which
// the same ops take. Optimize offers it as a lower-precision variant that must pass validation
// against the FP32 original; it is never applied by default.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "fastlinear.h"
#include "passes.h"

namespace {

using torch::jit::Node;

// The [n, K] weight back from FP32 panels [panels, K, kLinearPanel].
at::Tensor unpack_fp32(const at::Tensor& packed, int64_t n) {
  return packed.permute({0, 2, 1}).reshape({-1, packed.size(1)}).narrow(0, 0, n).contiguous();
}

// Replaces input i of node (a constant FP32 panel tensor) by BF16 panels of the same weight.
bool repack(Node* node, size_t i, int64_t n) {
  auto packed = tsimpl::constant_float(node->input(i));
  if (!packed || packed->dim() != 3 || packed->size(2) != tsimpl::kLinearPanel) return false;
  auto* graph = node->owningGraph();
  torch::jit::WithInsertPoint guard(node);
  node->replaceInput(i, graph->insertConstant(tsimpl::pack_linear_weight_bf16(unpack_fp32(*packed, n))));
  return true;
}

int64_t convert_block(torch::jit::Block* block) {
  static const auto linear = c10::Symbol::fromQualString("torchspeed::linear_packed");
  static const auto encoder = c10::Symbol::fromQualString("torchspeed::transformer_encoder_layer");
  int64_t converted = 0;
  for (auto* node : block->nodes()) {
    for (auto* sub : node->blocks()) converted += convert_block(sub);
    if (node->kind() == linear) {
      auto n = torch::jit::toIValue(node->input(3));
      if (n && n->isInt() && repack(node, 1, n->toInt())) converted++;
    } else if (node->kind() == encoder) {
      // Inputs 20..23 are the panels of the weights at 3 (qkv), 5 (out projection), 14 and 16 (FFN).
      const size_t weights[] = {3, 5, 14, 16};
      for (size_t j = 0; j < 4; j++) {
        auto w = tsimpl::constant_float(node->input(weights[j]));
        if (w && w->dim() == 2 && repack(node, 20 + j, w->size(0))) converted++;
      }
    }
  }
  return converted;
}

}  // namespace

int64_t tsimpl::linear_bf16(torch::jit::Module& m) {
  int64_t converted = 0;
  at::NoGradGuard guard;
  for_each_method_graph(m, [&converted](const auto& g) { 
    const int64_t n = convert_block(g->block());
    if (n > 0) torch::jit::EliminateDeadCode(g);  // the FP32 panels
    converted += n;
  });
  return converted;
}
