// Part of the fast_linear pass: swaps torchspeed::lstm (kernels/fastlstm.cpp) in for aten::lstm
// with constant weights, eval mode, one direction and no projections (what a scripted or traced
// nn.LSTM in eval mode leaves after freezing).
#include <torch/csrc/jit/ir/constants.h>

#include <vector>

#include "fastlinear.h"
#include "passes.h"

namespace {

using torch::jit::Node;
using torch::jit::Value;

c10::optional<std::vector<at::Tensor>> constant_floats(Value* list) {
  std::vector<at::Tensor> out;
  if (auto iv = torch::jit::toIValue(list); iv && iv->isTensorList()) {
    for (const at::Tensor& t : iv->toTensorVector()) {
      if (!t.defined() || !t.device().is_cpu() || t.scalar_type() != at::kFloat || t.requires_grad()) {
        return c10::nullopt;
      }
      out.push_back(t);
    }
    return out;
  }
  if (list->node()->kind() != c10::prim::ListConstruct) return c10::nullopt;
  for (Value* v : list->node()->inputs()) {
    auto t = tsimpl::constant_float(v);
    if (!t) return c10::nullopt;
    out.push_back(*t);
  }
  return out;
}

template <typename T>
c10::optional<T> constant_of(Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv) return c10::nullopt;
  if constexpr (std::is_same_v<T, bool>) {
    if (iv->isBool()) return iv->toBool();
  } else {
    if (iv->isInt()) return iv->toInt();
  }
  return c10::nullopt;
}

}  // namespace

int64_t tsimpl::swap_lstm(torch::jit::Node* node) {
  static const auto sym = c10::Symbol::fromQualString("torchspeed::lstm");
  if (!node->matches(
          "aten::lstm.input(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float "
          "dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)")) {
    return 0;
  }
  auto params = constant_floats(node->input(2));
  auto has_biases = constant_of<bool>(node->input(3));
  auto layers = constant_of<int64_t>(node->input(4));
  auto train = constant_of<bool>(node->input(6));
  auto bidirectional = constant_of<bool>(node->input(7));
  auto batch_first = constant_of<bool>(node->input(8));
  if (!params || !has_biases || !layers || !train || *train || !bidirectional || *bidirectional || !batch_first ||
      !tsimpl::lstm_packable(*params, *has_biases, *layers)) {
    return 0;
  }
  auto* graph = node->owningGraph();
  torch::jit::WithInsertPoint guard(node);
  std::vector<Value*> args{node->input(0),
                           node->input(1),
                           node->input(2),  // the original weights, for ATen's fallback
                           graph->insertConstant(tsimpl::pack_lstm_weights(*params, *has_biases, *layers)),
                           node->input(3),
                           node->input(4),
                           node->input(8)};
  Node* repl = graph->create(sym, args, 3);
  for (size_t i = 0; i < 3; i++) repl->output(i)->setType(node->output(i)->type());
  repl->insertBefore(node);
  for (size_t i = 0; i < 3; i++) node->output(i)->replaceAllUsesWith(repl->output(i));
  node->destroy();
  return 2 * *layers;
}
