// Part of the fast_linear pass: a traced post-norm nn.TransformerEncoderLayer (batch_first, eval,
// no mask), which tracing records as ~50 small ops (in-projection, chunk, per-head views and
// transposes, scaled bmm, softmax, bmm, out-projection, residual adds, layer norms, the FFN),
// becomes one aten::_transformer_encoder_layer_fwd node: the op a scripted layer's eval fast path
// calls, with the same arithmetic (ATen 1.13's native_multi_head_attention_cpu scales q by
// 1/sqrt(head dim) where the traced graph divides by sqrt(head dim): results differ by float
// rounding). fast_linear then swaps that node for torchspeed::transformer_encoder_layer like a
// scripted layer's.
//
// Why: on a 16-token d_model 128 layer the interpreter and ATen's per-op overhead (the batched
// bmm per head, the contiguous copies, the shape arithmetic) cost about as much as the four
// linears; one native call removes them.
//
// The match is strict: every node from the in-projection to the second layer norm must have the
// form tracing gives (linears as aten::linear or as the aten::matmul + aten::add pair
// optimize_for_inference leaves; chunk as aten::chunk + prim::ListUnpack or prim::ConstantChunk),
// constant weights of consistent shapes, one eps, the heads' count from the traced view sizes and
// the scale equal to sqrt(head dim). Anything else is left as it is. Values of the layer that
// other nodes also use stay computed (dead-code elimination keeps them).
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "fuse_encoder.h"
#include "passes.h"

namespace {

using torch::jit::Node;
using torch::jit::Value;

bool is(const Node* n, const char* kind) { return n->kind() == c10::Symbol::fromQualString(kind); }

c10::optional<int64_t> const_int(Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv) return c10::nullopt;
  if (iv->isInt()) return iv->toInt();
  if (iv->isTensor() && iv->toTensor().numel() == 1 && !at::isFloatingType(iv->toTensor().scalar_type())) {
    return iv->toTensor().item<int64_t>();
  }
  return c10::nullopt;
}

c10::optional<double> const_double(Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv) return c10::nullopt;
  if (iv->isDouble()) return iv->toDouble();
  if (iv->isInt()) return static_cast<double>(iv->toInt());
  if (iv->isTensor() && iv->toTensor().numel() == 1) return iv->toTensor().item<double>();
  return c10::nullopt;
}

// Whether n is aten::transpose(x, a, b) with {a, b} == {d0, d1} on a 3-D tensor.
bool transposes(const Node* n, int64_t d0, int64_t d1) {
  if (!is(n, "aten::transpose") || n->inputs().size() != 3) return false;
  auto a = const_int(n->input(1)), b = const_int(n->input(2));
  if (!a || !b) return false;
  int64_t x = *a < 0 ? *a + 3 : *a, y = *b < 0 ? *b + 3 : *b;
  return (x == d0 && y == d1) || (x == d1 && y == d0);
}

// One linear layer: y = x W^T + b with constant W [N, K] and b [N].
struct Linear {
  Value* x = nullptr;
  at::Tensor w, b;
};

// The linear whose output is y: aten::linear(x, W, b), or aten::add(aten::matmul(x, W^T), b, 1)
// as optimize_for_inference leaves it.
c10::optional<Linear> linear_of(Value* y) {
  Node* n = y->node();
  Linear l;
  if (is(n, "aten::linear") && n->inputs().size() == 3) {
    auto w = tsimpl::constant_float(n->input(1));
    auto b = tsimpl::constant_float(n->input(2));
    if (!w || !b) return c10::nullopt;
    l = {n->input(0), *w, *b};
  } else if (is(n, "aten::add") && n->inputs().size() == 3 && const_int(n->input(2)) == int64_t{1} &&
             is(n->input(0)->node(), "aten::matmul")) {
    Node* mm = n->input(0)->node();
    auto wt = tsimpl::constant_float(mm->input(1));
    auto b = tsimpl::constant_float(n->input(1));
    if (!wt || !b || wt->dim() != 2) return c10::nullopt;
    l = {mm->input(0), wt->t(), *b};
  } else {
    return c10::nullopt;
  }
  if (l.w.dim() != 2 || l.b.dim() != 1 || l.b.size(0) != l.w.size(0)) return c10::nullopt;
  return l;
}

// aten::layer_norm(x, [D], w, b, eps, cudnn) with constant w, b of D floats.
struct Norm {
  Value* x = nullptr;
  at::Tensor w, b;
  double eps = 0;
};

c10::optional<Norm> norm_of(Value* y, int64_t D) {
  Node* n = y->node();
  if (!is(n, "aten::layer_norm") || n->inputs().size() != 6) return c10::nullopt;
  auto shape = torch::jit::toIValue(n->input(1));
  auto w = tsimpl::constant_float(n->input(2)), b = tsimpl::constant_float(n->input(3));
  auto eps = const_double(n->input(4));
  if (!shape || !shape->isIntList() || shape->toIntVector() != std::vector<int64_t>{D} || !w || !b || !eps ||
      w->dim() != 1 || w->size(0) != D || b->dim() != 1 || b->size(0) != D) {
    return c10::nullopt;
  }
  return Norm{n->input(0), *w, *b, *eps};
}

// aten::add(a, b, 1): its two operands.
bool add_of(Value* y, Value** a, Value** b) {
  Node* n = y->node();
  if (!is(n, "aten::add") || n->inputs().size() != 3 || const_int(n->input(2)) != int64_t{1}) return false;
  *a = n->input(0);
  *b = n->input(1);
  return true;
}

// The multi-head attention part, from its output (before the out projection) back to the layer's
// input: bmm(softmax(bmm(q0 / sqrt(dh), k0^T)), v0), each of q0, k0, v0 = view(contiguous(chunk
// i of the in-projection), [T, B*H, dh]).transpose(0, 1), the in-projection over x.transpose(1, 0).
struct Attention {
  Value* src = nullptr;  // the layer's input x, [B, T, D]
  Linear qkv;
  int64_t heads = 0;
};

// The head view of one chunk: returns the chunk value and the view's size list.
bool head_view(Value* v0, Value** chunk, Node** sizes) {
  Node* t = v0->node();
  if (!transposes(t, 0, 1)) return false;
  Node* view = t->input(0)->node();
  if (!is(view, "aten::view") && !is(view, "aten::reshape")) return false;
  Node* cont = view->input(0)->node();
  if (!is(cont, "aten::contiguous")) return false;
  *chunk = cont->input(0);
  *sizes = view->input(1)->node();
  return is(*sizes, "prim::ListConstruct") && (*sizes)->inputs().size() == 3;
}

// Whether v is aten::size(t, dim), through the traced aten::Int / prim::NumToTensor wrappers.
bool size_of(Value* v, const Value* t, int64_t dim) {
  Node* n = v->node();
  while ((is(n, "aten::Int") || is(n, "prim::NumToTensor")) && n->inputs().size() == 1) n = n->input(0)->node();
  return is(n, "aten::size") && n->inputs().size() == 2 && n->input(0) == t && const_int(n->input(1)) == dim;
}

// The heads' count behind the traced size B*H: aten::Int(aten::mul(<size(xt, 1)>, H)).
c10::optional<int64_t> heads_of(Value* bh, const Value* xt) {
  Node* n = bh->node();
  if (is(n, "aten::Int") && n->inputs().size() == 1) n = n->input(0)->node();
  if (!is(n, "aten::mul") || n->inputs().size() != 2 || !size_of(n->input(0), xt, 1)) return c10::nullopt;
  return const_int(n->input(1));
}

c10::optional<Attention> attention_of(Value* out, int64_t D) {
  Node* pv = out->node();
  if (!is(pv, "aten::bmm")) return c10::nullopt;
  Node* sm = pv->input(0)->node();
  if (!is(sm, "aten::softmax") || sm->inputs().size() != 3) return c10::nullopt;
  auto dim = const_int(sm->input(1));
  if (!dim || (*dim != -1 && *dim != 2) || !sm->input(2)->type()->cast<c10::NoneType>()) return c10::nullopt;
  Node* qk = sm->input(0)->node();
  if (!is(qk, "aten::bmm") || !transposes(qk->input(1)->node(), 1, 2)) return c10::nullopt;
  Node* scaled = qk->input(0)->node();
  if (!is(scaled, "aten::div") || scaled->inputs().size() != 2) return c10::nullopt;
  auto divisor = const_double(scaled->input(1));
  Value *q = nullptr, *k = nullptr, *v = nullptr;
  Node *qs = nullptr, *ks = nullptr, *vs = nullptr;
  if (!divisor || !head_view(scaled->input(0), &q, &qs) || !head_view(qk->input(1)->node()->input(0), &k, &ks) ||
      !head_view(pv->input(1), &v, &vs)) {
    return c10::nullopt;
  }
  // q, k, v: outputs 0, 1, 2 of one chunk into three along the last dim.
  Node* split = q->node();
  Value* whole = nullptr;
  if (is(split, "prim::ConstantChunk") && split->outputs().size() == 3 && split->i(c10::attr::chunks) == 3 &&
      (split->i(c10::attr::dim) == -1 || split->i(c10::attr::dim) == 2)) {
    whole = split->input(0);
  } else if (is(split, "prim::ListUnpack") && split->outputs().size() == 3 && is(split->input(0)->node(), "aten::chunk")) {
    Node* chunk = split->input(0)->node();
    auto chunks = const_int(chunk->input(1)), cdim = const_int(chunk->input(2));
    if (chunks != int64_t{3} || !cdim || (*cdim != -1 && *cdim != 2)) return c10::nullopt;
    whole = chunk->input(0);
  } else {
    return c10::nullopt;
  }
  if (split->outputs()[0] != q || split->outputs()[1] != k || split->outputs()[2] != v) return c10::nullopt;
  auto qkv = linear_of(whole);
  if (!qkv || qkv->w.size(0) != 3 * D || qkv->w.size(1) != D || !transposes(qkv->x->node(), 0, 1)) {
    return c10::nullopt;
  }
  const Value* xt = qkv->x;
  // The views are [T, B*H, D/H] (the element count fixes the last once the first two are right),
  // all three with the same traced B*H and D/H.
  for (auto [s, c] : {std::pair{qs, q}, std::pair{ks, k}, std::pair{vs, v}}) {
    if (s->input(1) != qs->input(1) || s->input(2) != qs->input(2) ||
        !(size_of(s->input(0), xt, 0) || size_of(s->input(0), c, 0))) {
      return c10::nullopt;
    }
  }
  auto heads = heads_of(qs->input(1), xt);
  if (!heads || *heads <= 0 || D % *heads != 0) return c10::nullopt;
  const double dh = static_cast<double>(D) / static_cast<double>(*heads);  // D % heads == 0
  if (std::abs(*divisor - std::sqrt(dh)) > 1e-6 * std::sqrt(dh)) return c10::nullopt;
  return Attention{qkv->x->node()->input(0), *qkv, *heads};
}

// The layer whose last node is the second layer norm `last`, if it has the traced form; returns
// the replacement node's inputs, in aten::_transformer_encoder_layer_fwd's order.
c10::optional<std::vector<c10::IValue>> match_layer(Node* last, Value** src) {
  Value* y = last->output();
  if (!is(last, "aten::layer_norm") || last->inputs().size() != 6) return c10::nullopt;
  auto w2 = tsimpl::constant_float(last->input(2));
  if (!w2 || w2->dim() != 1) return c10::nullopt;
  const int64_t D = w2->size(0);
  auto n2 = norm_of(y, D);
  Value *a = nullptr, *b = nullptr;
  if (!n2 || !add_of(n2->x, &a, &b)) return c10::nullopt;
  // The FFN: linear2(act(linear1(h))) + h, h = the first norm's output.
  auto f2 = linear_of(b);
  if (!f2 || f2->w.size(0) != D) return c10::nullopt;
  Node* act = f2->x->node();
  bool gelu = false;
  if (is(act, "aten::gelu") && act->inputs().size() == 2) {
    auto approx = torch::jit::toIValue(act->input(1));
    if (!approx || !approx->isString() || approx->toStringRef() != "none") return c10::nullopt;
    gelu = true;
  } else if (!is(act, "aten::relu")) {
    return c10::nullopt;
  }
  auto f1 = linear_of(act->input(0));
  if (!f1 || f1->x != a || f1->w.size(1) != D || f2->w.size(1) != f1->w.size(0)) return c10::nullopt;
  auto n1 = norm_of(a, D);
  if (!n1 || n1->eps != n2->eps || !add_of(n1->x, &a, &b)) return c10::nullopt;
  // The attention block: x + view(out_proj(flat(heads)), [T, B, D]).transpose(1, 0).
  Node* back = b->node();
  if (!transposes(back, 0, 1) || !is(back->input(0)->node(), "aten::view")) return c10::nullopt;
  Node* unflat = back->input(0)->node();
  auto proj = linear_of(unflat->input(0));
  if (!proj || proj->w.size(0) != D || proj->w.size(1) != D) return c10::nullopt;
  Node* sizes = unflat->input(1)->node();
  Node* flat = proj->x->node();
  if (!is(flat, "aten::view") && !is(flat, "aten::reshape")) return c10::nullopt;
  Node* cont = flat->input(0)->node();
  if (!is(cont, "aten::contiguous") || !transposes(cont->input(0)->node(), 0, 1)) return c10::nullopt;
  auto attn = attention_of(cont->input(0)->node()->input(0), D);
  if (!attn || attn->src != a) return c10::nullopt;
  // Back to [T, B, D] before the transpose: the sizes of the in-projection's input.
  const Value* xt = attn->qkv.x;
  if (!is(sizes, "prim::ListConstruct") || sizes->inputs().size() != 3 || !size_of(sizes->input(0), xt, 0) ||
      !size_of(sizes->input(1), xt, 1)) {
    return c10::nullopt;
  }
  *src = a;
  return std::vector<c10::IValue>{D, attn->heads, attn->qkv.w, attn->qkv.b, proj->w, proj->b, gelu, false, n1->eps,
                                  n1->w, n1->b, n2->w, n2->b, f1->w, f1->b, f2->w, f2->b, c10::IValue(), c10::IValue()};
}

int64_t fuse_block(torch::jit::Block* block) {
  static const auto sym = c10::Symbol::fromQualString("aten::_transformer_encoder_layer_fwd");
  int64_t fused = 0;
  std::vector<Node*> norms;
  for (auto* node : block->nodes()) {
    for (auto* sub : node->blocks()) fused += fuse_block(sub);
    if (is(node, "aten::layer_norm")) norms.push_back(node);
  }
  for (Node* last : norms) {
    Value* src = nullptr;
    auto args = match_layer(last, &src);
    if (!args) continue;
    auto* graph = last->owningGraph();
    torch::jit::WithInsertPoint guard(last);
    std::vector<Value*> inputs{src};
    for (const auto& a : *args) {
      inputs.push_back(a.isTensor() ? graph->insertConstant(a.toTensor().contiguous()) : graph->insertConstant(a));
    }
    Node* layer = graph->create(sym, inputs, 1);
    layer->output()->setType(last->output()->type());
    layer->insertBefore(last);
    last->output()->replaceAllUsesWith(layer->output());
    fused++;
  }
  return fused;
}

}  // namespace

int64_t tsimpl::fuse_traced_encoder_layers(const std::shared_ptr<torch::jit::Graph>& graph) {
  const int64_t fused = fuse_block(graph->block());
  if (fused > 0) torch::jit::EliminateDeadCode(graph);
  return fused;
}
