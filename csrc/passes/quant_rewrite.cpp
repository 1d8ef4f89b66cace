// Graph rewrites of quantized models, after libtorch's passes have finalized them: ReLU6-style
// clamps folded into the static INT8 op that feeds them, and dynamic INT8 LSTM/GRU calls.
//
// ---- clamp folding (static INT8) ----
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
//
// ---- dynamic LSTM/GRU ----
// The graph-mode dynamic passes quantize aten::linear only. LSTM and GRU get what eager
// torch.ao.quantization.quantize_dynamic gives them (torch/ao/nn/quantized/dynamic/modules/
// rnn.py, from_float): each cell's weights observed and quantized to qint8, prepacked with
// quantized::linear_prepack, wrapped by quantized::make_quantized_cell_params_dynamic, and the
// call replaced by aten::quantized_lstm / aten::quantized_gru (use_dynamic). Here it is a
// rewrite of the finalized (frozen, inlined) graph, whose RNN weights are constants.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <set>

#include "passes.h"

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

// ---- dynamic LSTM/GRU ----

struct RnnModule {
  std::string path;
  std::string type;  // LSTM, GRU
  at::Tensor first_weight;  // weight_ih_l0, to recognize the module's call in the frozen graph
  bool quantize = true;
};

std::vector<RnnModule> collect_rnns(const torch::jit::Module& m, const tsimpl::PathFilter& keep_fp32) {
  std::vector<RnnModule> out;
  for (const auto& nm : m.named_modules()) {
    std::string t = nm.value.type()->name() ? nm.value.type()->name()->name() : "";
    if (t != "LSTM" && t != "GRU") continue;
    if (!nm.value.hasattr("weight_ih_l0")) continue;
    RnnModule r{nm.name, t, nm.value.attr("weight_ih_l0").toTensor(), true};
    r.quantize = !keep_fp32(nm.name);
    out.push_back(r);
  }
  return out;
}

c10::IValue call_op(const char* name, const char* overload, std::vector<c10::IValue> args) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  torch::jit::Stack stack(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
  op.callBoxed(&stack);
  TORCH_CHECK(!stack.empty(), name, " returned nothing");
  return stack[0];
}

// Quantizes one weight (with the config's weight observer) and prepacks it with its bias.
c10::IValue quantize_and_pack(const at::Tensor& w, const at::Tensor& b, const tsimpl::WeightQuantizer& quantize) {
  at::Tensor q = quantize(w);
  return call_op("quantized::linear_prepack", "", {q, c10::optional<at::Tensor>(b.detach().to(at::kFloat))});
}

// The constant tensors of an RNN call's params list, or nothing when they are not constants.
c10::optional<std::vector<at::Tensor>> constant_params(torch::jit::Value* v) {
  std::vector<at::Tensor> out;
  if (auto iv = torch::jit::toIValue(v)) {
    if (!iv->isTensorList()) return c10::nullopt;
    for (const auto& t : iv->toTensorVector()) out.push_back(t);
    return out;
  }
  if (v->node()->kind() != c10::prim::ListConstruct) return c10::nullopt;
  for (auto* in : v->node()->inputs()) {
    auto iv = torch::jit::toIValue(in);
    if (!iv || !iv->isTensor()) return c10::nullopt;
    out.push_back(iv->toTensor());
  }
  return out;
}

void rewrite_rnns(torch::jit::Block* block, const std::vector<RnnModule>& rnns, const tsimpl::WeightQuantizer& quantize,
                  bool reduce_range, int64_t& rewritten) {
  std::vector<torch::jit::Node*> nodes(block->nodes().begin(), block->nodes().end());
  for (auto* n : nodes) {
    for (auto* sub : n->blocks()) rewrite_rnns(sub, rnns, quantize, reduce_range, rewritten);
    bool lstm = n->kind() == c10::aten::lstm, gru = n->kind() == c10::aten::gru;
    if (!lstm && !gru) continue;
    // lstm.input(input, Tensor[] hx, Tensor[] params, has_biases, num_layers, dropout, train,
    // bidirectional, batch_first); gru.input(input, Tensor hx, Tensor[] params, ...). The
    // packed-sequence overloads (.data) are left in FP32.
    if (n->inputs().size() != 9 || n->input(2)->type()->kind() != c10::TypeKind::ListType) continue;
    if (lstm && n->input(1)->type()->kind() != c10::TypeKind::ListType) continue;
    if (gru && n->input(1)->type()->kind() != c10::TypeKind::TensorType) continue;
    auto params = constant_params(n->input(2));
    auto has_biases = torch::jit::toIValue(n->input(3));
    if (!params || params->empty() || !has_biases || !has_biases->toBool() || params->size() % 4 != 0) continue;
    const RnnModule* owner = nullptr;
    for (const auto& r : rnns)
      if (r.first_weight.sizes() == (*params)[0].sizes() && at::equal(r.first_weight, (*params)[0])) owner = &r;
    if (owner != nullptr && !owner->quantize) continue;  // qconfig None: stays FP32

    auto* graph = n->owningGraph();
    torch::jit::WithInsertPoint ip(n);
    std::vector<torch::jit::Value*> cells;
    c10::TypePtr cell_type;
    for (size_t i = 0; i < params->size(); i += 4) {
      const auto& w_ih = (*params)[i];
      const auto& w_hh = (*params)[i + 1];
      const auto& b_ih = (*params)[i + 2];
      const auto& b_hh = (*params)[i + 3];
      c10::IValue cell = call_op("quantized::make_quantized_cell_params_dynamic", "",
                                 {quantize_and_pack(w_ih, b_ih, quantize), quantize_and_pack(w_hh, b_hh, quantize),
                                  b_ih.detach().to(at::kFloat), b_hh.detach().to(at::kFloat), reduce_range});
      cell_type = cell.type();
      cells.push_back(graph->insertConstant(cell));
    }
    auto* list = graph->createList(cell_type, cells);
    list->insertBefore(n);
    // Constants first: q must not use values defined after it.
    torch::jit::Value* dtype = graph->insertConstant(static_cast<int64_t>(at::kQInt8));
    torch::jit::Value* use_dynamic = graph->insertConstant(true);
    auto* q = graph->create(lstm ? c10::Symbol::aten("quantized_lstm") : c10::Symbol::aten("quantized_gru"),
                            n->outputs().size());
    q->insertBefore(n);
    q->addInput(n->input(0));
    q->addInput(n->input(1));
    q->addInput(list->output());
    for (size_t i = 3; i < 9; i++) q->addInput(n->input(i));
    if (lstm) {
      q->addInput(dtype);
      q->addInput(use_dynamic);
    }
    for (size_t i = 0; i < n->outputs().size(); i++) {
      q->output(i)->setType(n->output(i)->type());
      n->output(i)->replaceAllUsesWith(q->output(i));
    }
    TORCH_CHECK(q->maybeOperator() != nullptr, "no operator matches the quantized RNN call ", *q);
    n->destroy();
    rewritten++;
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

int64_t quantize_dynamic_rnns(const torch::jit::Module& src, torch::jit::Module& quantized,
                              const PathFilter& keep_fp32, const WeightQuantizer& quantize, bool reduce_range) {
  auto rnns = collect_rnns(src, keep_fp32);
  if (rnns.empty()) return 0;
  int64_t rewritten = 0;
  auto graph = quantized.get_method("forward").graph();
  rewrite_rnns(graph->block(), rnns, quantize, reduce_range, rewritten);
  return rewritten;
}

}  // namespace tsimpl
