// The fast_qdq pass: swaps aten::quantize_per_tensor, aten::dequantize.self, quantized::add and
// quantized::add_relu for torchspeed's ops (kernels/fastqdq.cpp, kernels/fastqadd.cpp), which give
// the same tensors bit for bit where this libtorch's own are the scalar loops they reproduce.
#include <utility>
#include <vector>

#include "fastq.h"
#include "passes.h"

namespace {

// The swaps: an ATen op's schema, the torchspeed op that replaces it, which count it adds to.
struct Swap {
  const char* schema;
  const char* repl;
  int64_t tsimpl::FastQdqCounts::*count;
};

// Swaps the matching ATen nodes of one graph (sub-blocks included) for the torchspeed ops.
void swap_nodes(torch::jit::Block* block, const std::vector<Swap>& swaps, tsimpl::FastQdqCounts& counts) {
  std::vector<std::pair<torch::jit::Node*, const Swap*>> todo;
  for (auto* node : block->nodes()) {
    for (auto* sub : node->blocks()) swap_nodes(sub, swaps, counts);
    for (const auto& s : swaps) {
      if (node->matches(s.schema)) {
        todo.emplace_back(node, &s);
        break;
      }
    }
  }
  for (auto [node, s] : todo) {
    auto* graph = node->owningGraph();
    auto* repl = graph->create(c10::Symbol::fromQualString(s->repl), node->inputs(), 1);
    repl->output()->setType(node->output()->type());
    repl->insertBefore(node);
    node->output()->replaceAllUsesWith(repl->output());
    node->destroy();
    counts.*(s->count) += 1;
  }
}

}  // namespace

tsimpl::FastQdqCounts tsimpl::fast_qdq(torch::jit::Module& m) {
  std::vector<Swap> swaps;
  if (tsfast::aten_is_scalar()) {  // with FBGEMM the module is left unchanged
    swaps = {{"aten::quantize_per_tensor(Tensor self, float scale, int zero_point, ScalarType dtype) -> Tensor",
              "torchspeed::quantize_per_tensor", &FastQdqCounts::quantizes},
             {"aten::dequantize.self(Tensor self) -> Tensor", "torchspeed::dequantize", &FastQdqCounts::dequantizes}};
  }
  if (tsfast::add_swappable()) {
    swaps.push_back({"quantized::add(Tensor qa, Tensor qb, float scale, int zero_point) -> Tensor qc",
                     "torchspeed::add", &FastQdqCounts::adds});
    swaps.push_back({"quantized::add_relu(Tensor qa, Tensor qb, float scale, int zero_point) -> Tensor qc",
                     "torchspeed::add_relu", &FastQdqCounts::adds});
  }
  FastQdqCounts counts;
  if (!swaps.empty()) for_each_method_graph(m, [&](const auto& g) { swap_nodes(g->block(), swaps, counts); });
  return counts;
}
