// serve_mkldnn: optimize_for_inference's oneDNN graph in a form torch.jit.save keeps (the ops of
// kernels/mkldnnserve.cpp in place of the prim:: nodes whose state is node attributes), and
// channels_last_inputs: the channels-last input conversion written into the graph.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <string>
#include <vector>

#include "passes.h"

#ifdef TS_HAVE_MKLDNN_SERVE
#include "mkldnnserve.h"
#endif

namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

#ifdef TS_HAVE_MKLDNN_SERVE

// The convolution parameters (padding, stride, dilation, groups) every use of v takes it with
// as prim::mkldnn_convolution's weight; empty when some use is not that or they differ.
std::vector<int64_t> conv_params(Value* v) {
  std::vector<int64_t> params;
  for (const auto& use : v->uses()) {
    Node* conv = use.user;
    if (conv->kind() != c10::Symbol::prim("mkldnn_convolution") || use.offset != 1 || conv->inputs().size() != 7) {
      return {};
    }
    std::vector<int64_t> p;
    for (size_t i : {4, 3, 5}) {  // padding, stride, dilation
      auto iv = torch::jit::toIValue(conv->input(i));
      if (!iv || !iv->isIntList() || iv->toIntVector().size() != 2) return {};
      for (auto x : iv->toIntVector()) p.push_back(x);
    }
    auto groups = torch::jit::toIValue(conv->input(6));
    if (!groups || !groups->isInt()) return {};
    p.push_back(groups->toInt());
    if (!params.empty() && params != p) return {};
    params = p;
  }
  return params;
}

// The holder for a prim::ConstantMKLDNNTensor's tensor, checked to rebuild the same oneDNN layout.
c10::intrusive_ptr<tsimpl::MkldnnConstant> holder_for(Node* n) {
  at::Tensor t = n->t(torch::jit::attr::value);
  TORCH_CHECK(t.is_mkldnn() && t.scalar_type() == at::kFloat, "serve_mkldnn: constant ", n->output()->debugName(),
              " is not a float32 MKLDNN tensor");
  std::vector<int64_t> conv = t.dim() >= 4 ? conv_params(n->output()) : std::vector<int64_t>{};
  at::Tensor dense = t.to_dense();
  // A grouped convolution's reordered weight has the groups as a dimension of their own.
  if (!conv.empty() && dense.dim() == 5) dense = dense.reshape({dense.size(0) * dense.size(1), dense.size(2), dense.size(3), dense.size(4)});
  auto h = tsimpl::MkldnnConstant::make(dense, conv);
  TORCH_CHECK(tsimpl::same_mkldnn_layout(h->mkldnn, t), "serve_mkldnn: constant ", n->output()->debugName(),
              " does not rebuild in the oneDNN layout optimize_for_inference gave it");
  return h;
}

// Replaces n's outputs by those of a new node of kind `kind` on inputs, inserted before n.
void replace_with(Node* n, const char* kind, const std::vector<Value*>& inputs) {
  Graph* g = n->owningGraph();
  Node* r = g->create(c10::Symbol::fromQualString(kind), inputs, n->outputs().size());
  r->insertBefore(n);
  for (size_t i = 0; i < n->outputs().size(); ++i) {
    r->output(i)->setType(n->output(i)->type());
    r->output(i)->copyMetadata(n->output(i));
    n->output(i)->replaceAllUsesWith(r->output(i));
  }
  n->destroy();
}

void serve_block(Block* b, tsimpl::MkldnnServeCounts& c) {
  for (auto it = b->nodes().begin(); it != b->nodes().end();) {
    Node* n = *it++;
    for (Block* sub : n->blocks()) serve_block(sub, c);
    Graph* g = n->owningGraph();
    torch::jit::WithInsertPoint guard(n);
    if (n->kind() == c10::Symbol::prim("ConstantMKLDNNTensor")) {
      auto h = holder_for(n);
      if (!h->conv.empty()) ++c.conv_weights;
      ++c.constants;
      replace_with(n, "torchspeed::mkldnn_constant", {g->insertConstant(c10::IValue(h))});
    } else if (n->kind() == c10::Symbol::prim("BroadcastMKLDNNTensors")) {
      TORCH_CHECK(n->inputs().size() == 2 && n->outputs().size() == 2, "serve_mkldnn: a broadcast of ",
                  n->inputs().size(), " tensors");
      ++c.others;
      replace_with(n, "torchspeed::mkldnn_broadcast", {n->input(0), n->input(1)});
    } else if (n->kind() == c10::Symbol::prim("MKLDNNHardTanh_") || n->kind() == c10::Symbol::prim("MKLDNNClamp_")) {
      auto lo = c10::Symbol::attr("min_val"), hi = c10::Symbol::attr("max_val");
      TORCH_CHECK(n->hasAttribute(lo) && n->hasAttribute(hi) && n->inputs().size() == 1, "serve_mkldnn: ",
                  n->kind().toQualString(), " without min_val and max_val");
      ++c.others;
      replace_with(n, "torchspeed::mkldnn_hardtanh_",
                   {n->input(0), g->insertConstant(n->f(lo)), g->insertConstant(n->f(hi))});
    }
  }
}

#endif

}  // namespace

const char* tsimpl::mkldnn_serve_unavailable() noexcept {
#ifdef TS_HAVE_MKLDNN_SERVE
  return nullptr;
#else
  return "this build has no torchspeed::mkldnn_constant (it needs libtorch 1.13 and the ideep headers)";
#endif
}

tsimpl::MkldnnServeCounts tsimpl::serve_mkldnn(torch::jit::Module& m) {
  MkldnnServeCounts c;
#ifdef TS_HAVE_MKLDNN_SERVE
  for_each_method_graph(m, [&c](const std::shared_ptr<Graph>& g) { serve_block(g->block(), c); });
#else
  (void)m;
#endif
  return c;
}

int64_t tsimpl::channels_last_inputs(torch::jit::Module& m, const std::vector<int64_t>& inputs) {
  auto graph = m.get_method("forward").graph();
  int64_t n = 0;
  for (int64_t i : inputs) {
    // Graph input 0 is the module itself.
    TORCH_CHECK(i >= 0 && static_cast<size_t>(i) + 1 < graph->inputs().size(), "channels_last_inputs: forward has no input ", i);
    Value* x = graph->inputs()[i + 1];
    TORCH_CHECK(x->type()->cast<c10::TensorType>(), "channels_last_inputs: forward's input ", i, " is a ",
                x->type()->repr_str(), ", not a tensor");
    torch::jit::WithInsertPoint guard(graph->block()->nodes().front());
    Value* y = graph->insert(torch::jit::aten::contiguous, {x},
                             {torch::jit::NamedValue("memory_format", c10::MemoryFormat::ChannelsLast)});
    x->replaceAllUsesAfterNodeWith(y->node(), y);
    ++n;
  }
  return n;
}
