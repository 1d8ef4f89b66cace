// Folds ReLU6-style clamps into the quantized op that feeds them (static INT8 only).
//
// libtorch's graph-mode passes (and so quantize_jit) fuse conv+relu into quantized::conv2d_relu
// but leave conv+hardtanh(0, 6) (ReLU6, MobileNet's activation) as a quantized conv whose
// output is observed before the clamp, followed by aten::hardtanh_ on the quantized tensor. The
// output's quint8 range then spans the conv's negative values too, which the clamp throws away,
// and every clamp is one more pass over the activation. Here, after Finalize, such a pair
//   %y = quantized::conv2d(%x, %w, %scale, %zp); %z = aten::hardtanh_(%y, 0., 6.)
// becomes one quantized::conv2d with zero point quant_min (0) and scale min(6, observed max) /
// (quant_max - quant_min): requantizing into [0, min(6, max)] is the clamp itself, and the
// same 8 bits now cover only the values the clamp lets through (finer steps: more accurate,
// and the clamp pass is gone). Values above the observed maximum clip there, as before.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <set>

#include "internal.h"

namespace {

// Quantized ops whose last two inputs are the output scale and zero point.
bool has_output_qparams(const torch::jit::Node* n) {
  static const std::set<std::string> ops = {
      "quantized::conv1d", "quantized::conv1d_relu", "quantized::conv2d", "quantized::conv2d_relu",
      "quantized::conv3d", "quantized::conv3d_relu", "quantized::linear", "quantized::linear_relu",
      "quantized::add",    "quantized::add_relu"};
  return ops.count(n->kind().toQualString()) > 0;
}

// The clamp's bounds when n is hardtanh/relu6 with constant bounds.
bool clamp_bounds(const torch::jit::Node* n, double& lo, double& hi) {
  std::string k = n->kind().toQualString();
  if (k == "aten::relu6" || k == "aten::relu6_") {
    if (n->inputs().size() != 1) return false;
    lo = 0, hi = 6;
    return true;
  }
  if (k != "aten::hardtanh" && k != "aten::hardtanh_") return false;
  if (n->inputs().size() != 3) return false;
  auto a = torch::jit::toIValue(n->input(1)), b = torch::jit::toIValue(n->input(2));
  if (!a || !b || !a->isDouble() || !b->isDouble()) return false;
  lo = a->toDouble(), hi = b->toDouble();
  return true;
}

void fold_block(torch::jit::Block* block, int64_t qmin, int64_t qmax, int64_t& folded) {
  std::vector<torch::jit::Node*> nodes(block->nodes().begin(), block->nodes().end());
  for (auto* n : nodes) {
    for (auto* sub : n->blocks()) fold_block(sub, qmin, qmax, folded);
    double lo = 0, hi = 0;
    if (!clamp_bounds(n, lo, hi) || lo != 0 || !(hi > 0)) continue;
    torch::jit::Value* y = n->input(0);
    torch::jit::Node* p = y->node();
    // Only the clamp may see the producer's output: any other use needs the unclamped values.
    if (p->owningBlock() != block || !has_output_qparams(p) || y->uses().size() != 1) continue;
    size_t k = p->inputs().size();
    auto scale = torch::jit::toIValue(p->input(k - 2)), zp = torch::jit::toIValue(p->input(k - 1));
    if (!scale || !zp || !scale->isDouble() || !zp->isInt()) continue;
    double s = scale->toDouble();
    int64_t z = zp->toInt();
    double top = static_cast<double>(qmax - z) * s;  // the largest value the old qparams hold
    double m = std::min(hi, top);
    if (!(s > 0) || !(m > 0)) continue;
    torch::jit::WithInsertPoint ip(p);
    auto* g = p->owningGraph();
    p->replaceInput(k - 2, g->insertConstant(m / static_cast<double>(qmax - qmin)));
    p->replaceInput(k - 1, g->insertConstant(qmin));
    n->output()->replaceAllUsesWith(y);
    n->destroy();
    folded++;
  }
}

}  // namespace

namespace tsimpl {

int64_t fold_quantized_clamps(const torch::jit::Module& observed, torch::jit::Module& quantized) {
  // The activations' quint8 range, from the observers the prepare step inserted. The fold needs
  // one range with quant_min 0 (the clamp's lower bound is the zero point): with mixed ranges
  // (per-module observers with custom ranges) nothing is folded.
  std::set<std::pair<int64_t, int64_t>> ranges;
  for (const auto& nm : observed.named_modules()) {
    const auto& o = nm.value;
    auto name = o.type()->name();
    if (!name || name->qualifiedName().find("torchspeed.observer") == std::string::npos) continue;
    if (!o.hasattr("dtype") || !o.hasattr("quant_min") || !o.hasattr("quant_max")) continue;
    if (o.attr("dtype").toInt() != static_cast<int64_t>(at::kQUInt8)) continue;
    ranges.emplace(o.attr("quant_min").toInt(), o.attr("quant_max").toInt());
  }
  if (ranges.size() != 1 || ranges.begin()->first != 0 || ranges.begin()->second <= 0) return 0;
  int64_t folded = 0;
  auto graph = quantized.get_method("forward").graph();
  fold_block(graph->block(), ranges.begin()->first, ranges.begin()->second, folded);
  return folded;
}

}  // namespace tsimpl
