// The fuse_conv_add load pass: quantized::conv2d + quantized::add[_relu] -> torchspeed::conv2d_add
// (csrc/fastqconv.cpp, one oneDNN convolution that adds into the residual's buffer), and its C ABI.
//
// The fused op writes its result into the residual's storage, so the pass fuses a pair only where
// nothing can read the residual afterwards: the residual is made by a node of the add's block (not
// a graph input, not a constant), no value that may alias it (alias analysis: views, lists holding
// it) is a graph input or output, the conv's input or used after the add.
//
// This file needs no oneDNN headers: it is always built. Where fastqconv.cpp is not (CMake found no
// ideep/oneDNN 2 headers or another libtorch), TS_CONV_ADD_MISSING says why and nothing is fused.
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/ir.h>

#include <set>

#include "fastqconv.h"
#include "internal.h"

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;
using tsimpl::fail;

namespace {

#ifndef TS_HAVE_CONV_ADD
#ifndef TS_CONV_ADD_MISSING
#define TS_CONV_ADD_MISSING "built without the oneDNN 2 headers"
#endif
const char* const kMissing =
    "this build has no fused quantized convolution (torchspeed::conv2d_add): " TS_CONV_ADD_MISSING;
#endif

bool is_conv(const Node* n) {
  static const auto sym = c10::Symbol::fromQualString("quantized::conv2d");
  return n->kind() == sym && n->inputs().size() == 4 && n->outputs().size() == 1;
}

// quantized::add / add_relu (Tensor, Tensor, float, int), or fast_qdq's torchspeed:: swaps of them.
int add_kind(const Node* n) {  // -1: not one; 0: add; 1: add_relu
  static const auto qa = c10::Symbol::fromQualString("quantized::add");
  static const auto qar = c10::Symbol::fromQualString("quantized::add_relu");
  static const auto ta = c10::Symbol::fromQualString("torchspeed::add");
  static const auto tar = c10::Symbol::fromQualString("torchspeed::add_relu");
  if (n->inputs().size() != 4 || n->outputs().size() != 1) return -1;
  if (n->input(2)->type()->kind() != c10::TypeKind::FloatType || n->input(3)->type()->kind() != c10::TypeKind::IntType) {
    return -1;
  }
  if (n->kind() == qa || n->kind() == ta) return 0;
  if (n->kind() == qar || n->kind() == tar) return 1;
  return -1;
}

// The node of block that contains n (n itself, or the node whose sub-block holds it), or nullptr.
Node* ancestor_in(Node* n, const Block* block) {
  while (n != nullptr && n->owningBlock() != block) {
    auto* b = n->owningBlock();
    n = b == nullptr ? nullptr : b->owningNode();
  }
  return n;
}

void collect_values(Block* b, std::vector<Value*>& out) {
  for (auto* v : b->inputs()) out.push_back(v);
  for (auto* n : b->nodes()) {
    for (auto* v : n->outputs()) out.push_back(v);
    for (auto* sub : n->blocks()) collect_values(sub, out);
  }
}

// Whether add may write its result into r's buffer (see the file comment).
bool writable(Node* add, Value* r, Value* x, const std::vector<Value*>& values, torch::jit::AliasDb& db) {
  Node* p = r->node();
  auto* graph = add->owningGraph();
  if (p->kind() == c10::prim::Param || p->kind() == c10::prim::Constant || p->owningBlock() != add->owningBlock()) {
    return false;
  }
  if (r == x || db.mayContainAlias(r, x)) return false;
  for (auto* v : values) {
    if (v != r && !db.mayContainAlias(v, r)) continue;
    if (v->node() == graph->param_node() || v->node()->kind() == c10::prim::Constant) return false;
    for (const auto& use : v->uses()) {
      if (use.user == add) continue;
      if (use.user->kind() == c10::prim::Return) return false;  // a block's (or the graph's) output
      Node* a = ancestor_in(use.user, add->owningBlock());
      if (a == nullptr || a == add || !a->isBefore(add)) return false;
    }
  }
  return true;
}

struct Pair {
  Node* conv;
  Node* add;
  bool relu, conv_first;
};

void find_pairs(Block* b, const std::vector<Value*>& values, torch::jit::AliasDb& db, std::vector<Pair>& out) {
  for (auto* n : b->nodes()) {
    for (auto* sub : n->blocks()) find_pairs(sub, values, db, out);
    int kind = add_kind(n);
    if (kind < 0) continue;
    for (int i = 0; i < 2; i++) {
      Value* c = n->input(i);
      Value* r = n->input(1 - i);
      if (c == r || !is_conv(c->node()) || c->uses().size() != 1 || c->node()->owningBlock() != b) continue;
      if (!writable(n, r, c->node()->input(0), values, db)) continue;
      out.push_back({c->node(), n, kind == 1, i == 0});
      break;
    }
  }
}

int64_t fuse_graph(const std::shared_ptr<torch::jit::Graph>& graph) {
  static const auto sym = c10::Symbol::fromQualString("torchspeed::conv2d_add");
  std::vector<Value*> values;
  collect_values(graph->block(), values);
  std::vector<Pair> pairs;
  {
    torch::jit::AliasDb db(graph);  // on the graph as it was: see the chained case in the file comment
    find_pairs(graph->block(), values, db, pairs);
  }
  for (const auto& p : pairs) {
    Node* conv = p.conv;
    // Read now: an earlier rewrite may have replaced it (a residual that was a fused add's output).
    Value* residual = p.add->input(p.conv_first ? 1 : 0);
    torch::jit::WithInsertPoint guard(p.add);
    Value* relu = graph->insertConstant(p.relu);
    Value* first = graph->insertConstant(p.conv_first);
    Node* f = graph->create(sym,
                            {conv->input(0), conv->input(1), conv->input(2), conv->input(3), residual,
                             p.add->input(2), p.add->input(3), relu, first},
                            1);
    f->output()->setType(p.add->output()->type());
    f->insertBefore(p.add);
    p.add->output()->replaceAllUsesWith(f->output());
    p.add->destroy();
    conv->destroy();
  }
  return static_cast<int64_t>(pairs.size());
}

}  // namespace

extern "C" {

const char* ts_conv_add_unavailable(void) noexcept {
#ifdef TS_HAVE_CONV_ADD
  return nullptr;
#else
  return kMissing;
#endif
}

ts_status* ts_module_fuse_conv_add(const ts_module* m, ts_module** out, int64_t* fused) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "fuse_conv_add");
  TS_CHECK_NOT_NULL(out, "fuse_conv_add");
  TS_CHECK_NOT_NULL(fused, "fuse_conv_add");
  auto h = std::make_unique<ts_module>();
  h->m = m->m.clone();
  h->extra = m->extra;
  int64_t n = 0;
  if (ts_conv_add_unavailable() == nullptr) {
    std::set<torch::jit::Graph*> seen;  // submodules of one type share their methods' graphs
    for (const auto& sub : h->m.modules()) {
      for (const auto& method : sub.get_methods()) {
        auto graph = method.graph();
        if (seen.insert(graph.get()).second) n += fuse_graph(graph);
      }
    }
  }
  *fused = n;
  *out = h.release();
  TS_API_END("fuse_conv_add")
}

ts_status* ts_tensor_qconv2d_add(const ts_tensor* qx, const ts_tensor* w, const ts_tensor* wscales, const ts_tensor* b,
                                 int64_t stride, int64_t padding, int64_t dilation, int64_t groups, double conv_scale,
                                 int64_t conv_zero_point, const ts_tensor* residual, int32_t residual_first,
                                 double scale, int64_t zero_point, int32_t relu, int32_t mode, ts_tensor** out,
                                 int32_t* fused) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // parallel only on inference threads
  TS_CHECK_NOT_NULL(qx, "qconv2d_add");
  TS_CHECK_NOT_NULL(w, "qconv2d_add");
  TS_CHECK_NOT_NULL(wscales, "qconv2d_add");
  TS_CHECK_NOT_NULL(residual, "qconv2d_add");
  TS_CHECK_NOT_NULL(out, "qconv2d_add");
  TS_CHECK_NOT_NULL(fused, "qconv2d_add");
  TS_CHECK_ARG(mode == 0 || mode == 1, "qconv2d_add", "unknown mode " + std::to_string(mode));
  TS_CHECK_ARG(w->t.dim() == 4 && w->t.scalar_type() == at::kFloat, "qconv2d_add",
               "the weight is not a 4-D float32 tensor");
  TS_CHECK_ARG(wscales->t.dim() == 1 && wscales->t.scalar_type() == at::kFloat &&
                   (wscales->t.size(0) == 1 || wscales->t.size(0) == w->t.size(0)),
               "qconv2d_add", "the weight scales are not a float32 vector of 1 or O elements");
  if (mode == 1 && ts_conv_add_unavailable() != nullptr) fail(TS_CODE_UNSUPPORTED, ts_conv_add_unavailable());
  c10::InferenceMode guard;
  at::Tensor wq;
  if (wscales->t.size(0) == 1) {
    wq = at::quantize_per_tensor(w->t, wscales->t.item<double>(), 0, at::kQInt8);
  } else {
    wq = at::quantize_per_channel(w->t, wscales->t.to(at::kDouble), at::zeros({w->t.size(0)}, at::kLong), 0, at::kQInt8);
  }
  auto prepack = c10::Dispatcher::singleton().findSchemaOrThrow("quantized::conv2d_prepack", "");
  torch::jit::Stack stack{wq,
                          b != nullptr ? c10::IValue(b->t) : c10::IValue(),
                          c10::List<int64_t>({stride, stride}),
                          c10::List<int64_t>({padding, padding}),
                          c10::List<int64_t>({dilation, dilation}),
                          groups};
  prepack.callBoxed(&stack);
  c10::IValue packed = stack.at(0);
  bool ran = false;
  at::Tensor r;
  if (mode == 0) {
    auto conv = c10::Dispatcher::singleton().findSchemaOrThrow("quantized::conv2d", "new");
    torch::jit::Stack s{qx->t, packed, conv_scale, conv_zero_point};
    conv.callBoxed(&s);
    auto add = c10::Dispatcher::singleton().findSchemaOrThrow(relu != 0 ? "quantized::add_relu" : "quantized::add", "");
    at::Tensor c = s.at(0).toTensor();
    torch::jit::Stack s2{residual_first != 0 ? residual->t : c, residual_first != 0 ? c : residual->t, scale,
                         zero_point};
    add.callBoxed(&s2);
    r = s2.at(0).toTensor();
  } else {
#ifdef TS_HAVE_CONV_ADD
    at::Tensor dst = residual->t.is_quantized() ? residual->t.clone(at::MemoryFormat::ChannelsLast) : residual->t;
    r = tsimpl::conv2d_add_run(qx->t, packed, conv_scale, conv_zero_point, dst, scale, zero_point, relu != 0,
                               residual_first == 0, &ran);
#endif
  }
  *fused = ran ? 1 : 0;
  *out = new ts_tensor{std::move(r)};
  TS_API_END("qconv2d_add")
}

}  // extern "C"
