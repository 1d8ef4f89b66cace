// The fuse_conv_add load pass: quantized::conv2d + quantized::add[_relu] -> torchspeed::conv2d_add
// (kernels/fastqconv.cpp, one oneDNN convolution that adds into the residual's buffer).
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

#include <vector>

#include "passes.h"

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

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

const char* tsimpl::conv_add_unavailable() noexcept {
#ifdef TS_HAVE_CONV_ADD
  return nullptr;
#else
  return kMissing;
#endif
}

int64_t tsimpl::fuse_conv_add(torch::jit::Module& m) {
  int64_t n = 0;
  if (conv_add_unavailable() != nullptr) return n;
  for_each_method_graph(m, [&n](const auto& g) { n += fuse_graph(g); });
  return n;
}
