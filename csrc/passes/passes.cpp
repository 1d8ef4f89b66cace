// The walk and the small graph helpers every pass shares (passes.h).
#include <torch/csrc/jit/ir/constants.h>

#include <set>

#include "passes.h"

void tsimpl::for_each_method_graph(const torch::jit::Module& m, const GraphFn& f) {
  std::set<torch::jit::Graph*> seen;
  for (const auto& sub : m.modules()) {
    for (const auto& method : sub.get_methods()) {
      auto graph = method.graph();
      if (seen.insert(graph.get()).second) f(graph);
    }
  }
}

c10::optional<at::Tensor> tsimpl::constant_float(torch::jit::Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isTensor()) return c10::nullopt;
  at::Tensor t = iv->toTensor();
  if (!t.defined() || !t.device().is_cpu() || t.layout() != at::kStrided || t.scalar_type() != at::kFloat ||
      t.requires_grad()) {
    return c10::nullopt;
  }
  return t;
}

torch::jit::Node* tsimpl::only_user(torch::jit::Value* v) {
  return v->uses().size() == 1 ? v->uses()[0].user : nullptr;
}
