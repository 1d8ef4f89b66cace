// The fast_conv pass: swaps torchspeed::conv2d_gemm (ungrouped) or torchspeed::conv_dw
// (depthwise; kernels/fastconv.cpp) in for aten::_convolution / aten::convolution / aten::conv2d /
// aten::conv1d with a constant weight, fusing a following relu, and a plain max_pool2d after an
// ungrouped 2-D one (and a flatten from dimension 1 after that) into torchspeed::conv2d_pool
// (kernels/fastconvsmall.cpp).
#include <torch/csrc/jit/ir/constants.h>

#include <unordered_map>
#include <vector>

#include "fastlinear.h"
#include "passes.h"

namespace {

using tsimpl::pair_of;

using torch::jit::Node;
using torch::jit::Value;

using tsimpl::constant_float;
using tsimpl::only_user;

c10::optional<std::vector<int64_t>> const_ints(Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isIntList()) return c10::nullopt;
  return iv->toIntVector();
}

c10::optional<int64_t> const_int(Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isInt()) return c10::nullopt;
  return iv->toInt();
}

c10::optional<bool> const_bool(Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isBool()) return c10::nullopt;
  return iv->toBool();
}

using Counts = tsimpl::SwapCounts;

bool is_conv(Node* node) {
  return node->matches(
             "aten::_convolution(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] "
             "dilation, bool transposed, int[] output_padding, int groups, bool benchmark, bool deterministic, bool "
             "cudnn_enabled, bool allow_tf32) -> Tensor") ||
         node->matches(
             "aten::_convolution.deprecated(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, "
             "int[] dilation, bool transposed, int[] output_padding, int groups, bool benchmark, bool deterministic, "
             "bool cudnn_enabled) -> Tensor") ||
         node->matches(
             "aten::convolution(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] "
             "dilation, bool transposed, int[] output_padding, int groups) -> Tensor") ||
         node->matches(
             "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, int[2] "
             "dilation=1, int groups=1) -> Tensor") ||
         node->matches(
             "aten::conv1d(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=1, int[1] padding=0, int[1] "
             "dilation=1, int groups=1) -> Tensor");
}

// Whether mp is a max_pool2d that torchspeed::conv2d_pool computes: constant kernel and stride
// (empty: the kernel), no padding, dilation 1, floor; pool_k and pool_s get the pairs.
bool plain_max_pool(Node* mp, std::vector<int64_t>& pool_k, std::vector<int64_t>& pool_s) {
  if (!mp->matches("aten::max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] "
                   "dilation=1, bool ceil_mode=False) -> Tensor"))
    return false;
  auto k = const_ints(mp->input(1)), st = const_ints(mp->input(2)), pad = const_ints(mp->input(3)),
       dil = const_ints(mp->input(4));
  auto ceil = const_bool(mp->input(5));
  if (!k || !st || !pad || !dil || !ceil || *ceil) return false;
  int64_t kp[2], sp[2], pp[2], dp[2];
  if (!pair_of(*k, kp) || !pair_of(st->empty() ? *k : *st, sp) || !pair_of(*pad, pp) || !pair_of(*dil, dp)) return false;
  if (kp[0] <= 0 || kp[1] <= 0 || sp[0] <= 0 || sp[1] <= 0 || pp[0] != 0 || pp[1] != 0 || dp[0] != 1 || dp[1] != 1)
    return false;
  pool_k = {kp[0], kp[1]};
  pool_s = {sp[0], sp[1]};
  return true;
}

// Whether fl is aten::flatten(x, 1, -1).
bool flatten_from_1(Node* fl) {
  if (!fl->matches("aten::flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)")) return false;
  auto start = const_int(fl->input(1)), end = const_int(fl->input(2));
  return start && end && *start == 1 && *end == -1;
}

// Swaps one conv node (is_conv) if it is a 1-D or 2-D, ungrouped or depthwise, not transposed one
// with a constant weight and constant arguments; returns whether it did. A 1-D conv ([N, C, L], weight
// [O, I, k]: audio front ends, STFT-like filter banks, a VAD's encoder) runs as a 2-D one of
// height 1: unsqueeze, conv2d_gemm, squeeze. libtorch 1.13 sends those to the same slow im2col
// path (thnn_conv2d) as small 2-D ones, with its per-call set-up cost.
// The 1-D convs' views the pass makes, reused where it can: a 1-D conv runs on unsqueeze(x, 2) and
// gives squeeze(y, 2), so a chain of them (Silero VAD's encoder: depthwise, then pointwise) would
// pay two view ops per link in the interpreter. squeezed maps each squeeze's output to the 4-D
// output it views (height 1: the next conv reads that directly: same storage, same elements);
// unsqueezed maps a 3-D input to the unsqueeze already made of it, reused by convs in its block.
struct Views {
  std::unordered_map<Value*, Value*> squeezed, unsqueezed;
  std::vector<Node*> squeezes;
};

Value* unsqueezed_input(Node* node, Value* x, Views& views) {
  if (auto it = views.squeezed.find(x); it != views.squeezed.end()) return it->second;
  if (auto it = views.unsqueezed.find(x); it != views.unsqueezed.end() && it->second->node()->owningBlock() == node->owningBlock()) {
    return it->second;
  }
  Value* u = node->owningGraph()->insert(c10::aten::unsqueeze, {x, 2});
  views.unsqueezed[x] = u;
  return u;
}

bool swap_one(Node* node, Counts& counts, Views& views) {
  static const auto gemm_sym = c10::Symbol::fromQualString("torchspeed::conv2d_gemm");
  static const auto dw_sym = c10::Symbol::fromQualString("torchspeed::conv_dw");
  static const auto pool_sym = c10::Symbol::fromQualString("torchspeed::conv2d_pool");
  const bool named = node->kind() == c10::Symbol::fromQualString("aten::conv2d") ||
                     node->kind() == c10::Symbol::fromQualString("aten::conv1d");
  auto w = constant_float(node->input(1));
  if (!w || (w->dim() != 4 && w->dim() != 3) || w->size(0) == 0) return false;
  const bool one_d = w->dim() == 3;
  if (node->kind() == c10::Symbol::fromQualString("aten::conv1d") && !one_d) return false;
  if (node->kind() == c10::Symbol::fromQualString("aten::conv2d") && one_d) return false;
  if (one_d) w = w->unsqueeze(2).contiguous();  // [O, I, 1, k]
  // A depth past kConvMaxDepth would always run ATen's convolution: left as it is.
  if (w->size(1) * w->size(2) * w->size(3) > tsimpl::kConvMaxDepth) return false;
  c10::optional<at::Tensor> bias;
  if (!node->input(2)->type()->cast<c10::NoneType>()) {
    bias = constant_float(node->input(2));
    if (!bias || bias->dim() != 1 || bias->size(0) != w->size(0)) return false;
  }
  auto stride = const_ints(node->input(3)), padding = const_ints(node->input(4)), dilation = const_ints(node->input(5));
  if (!stride || !padding || !dilation) return false;
  if (one_d) {
    // Height 1: stride and dilation 1, no padding there; the 1-D value goes to the width.
    if (stride->size() != 1 || padding->size() != 1 || dilation->size() != 1) return false;
    stride = std::vector<int64_t>{1, (*stride)[0]};
    padding = std::vector<int64_t>{0, (*padding)[0]};
    dilation = std::vector<int64_t>{1, (*dilation)[0]};
  }
  int64_t pair[2];
  for (const auto* v : {&*stride, &*padding, &*dilation}) {
    if (!pair_of(*v, pair)) return false;
  }
  // Depthwise (groups == in == out channels, one filter each) runs torchspeed::conv_dw.
  auto groups = const_int(node->input(named ? 6 : 8));
  const bool dw = groups && *groups > 1 && *groups == w->size(0) && w->size(1) == 1;
  if (!groups || (*groups != 1 && !dw)) return false;
  if (!named) {
    auto transposed = const_bool(node->input(6));
    if (!transposed || *transposed) return false;
  }
  Node* last = node;
  std::vector<Node*> gone{node};
  bool relu = false;
  if (Node* r = only_user(node->output());
      r != nullptr && (r->matches("aten::relu(Tensor self) -> Tensor") || r->matches("aten::relu_(Tensor(a!) self) -> Tensor(a!)"))) {
    relu = true;
    last = r;
    gone.push_back(r);
  }
  // A 2-D conv whose (relu's) only use is a plain max_pool2d: one torchspeed::conv2d_pool.
  std::vector<int64_t> pool_k, pool_s;
  bool flatten = false;
  if (Node* mp = dw || one_d ? nullptr : only_user(last->output()); mp != nullptr && plain_max_pool(mp, pool_k, pool_s)) {
    last = mp;
    gone.push_back(mp);
    // ... and a flatten from dimension 1 after it (the classifier's input) folds in too.
    if (Node* fl = only_user(mp->output()); fl != nullptr && flatten_from_1(fl)) {
      last = fl;
      gone.push_back(fl);
      flatten = true;
    }
  }
  auto* graph = node->owningGraph();
  torch::jit::WithInsertPoint guard(node);
  Value* x = node->input(0);
  if (one_d) x = unsqueezed_input(node, x, views);
  std::vector<Value*> args{
      x,
      // The original weight (as 4-D for a 1-D conv), for the fallback: ATen's bits there.
      one_d ? graph->insertConstant(*w) : node->input(1),
      graph->insertConstant(dw ? tsimpl::pack_dw_weight(*w) : tsimpl::pack_conv_weight(*w)),
      bias ? graph->insertConstant(bias->contiguous()) : graph->insertConstant(c10::IValue()),
      graph->insertConstant(*stride),
      graph->insertConstant(*padding),
      graph->insertConstant(*dilation),
      graph->insertConstant(relu)};
  if (!pool_k.empty()) {
    args.push_back(graph->insertConstant(pool_k));
    args.push_back(graph->insertConstant(pool_s));
    args.push_back(graph->insertConstant(flatten));
  }
  Node* repl = graph->create(dw ? dw_sym : pool_k.empty() ? gemm_sym : pool_sym, args, 1);
  // The output's strides are channels-last where the original's were not: plain Tensor.
  repl->output()->setType(c10::TensorType::get());
  repl->insertBefore(node);
  Value* y = repl->output();
  if (one_d) {
    y = graph->insert(c10::aten::squeeze, {y, 2});
    views.squeezed[y] = repl->output();
    views.squeezes.push_back(y->node());
  }
  last->output()->replaceAllUsesWith(y);
  for (auto it = gone.rbegin(); it != gone.rend(); ++it) (*it)->destroy();
  counts.swapped++;
  if (relu) counts.relus++;
  return true;
}

void swap_block(torch::jit::Block* block, Counts& counts, Views& views) {
  std::vector<Node*> todo;
  for (auto* node : block->nodes()) {
    for (auto* sub : node->blocks()) swap_block(sub, counts, views);
    if (is_conv(node)) todo.push_back(node);
  }
  for (auto* node : todo) swap_one(node, counts, views);
}

}  // namespace

tsimpl::SwapCounts tsimpl::fast_conv(torch::jit::Module& m) {
  Counts counts;
  if (tsfast::cpu_isa() == tsfast::Isa::Scalar) return counts;  // without AVX2+FMA: unchanged
  at::NoGradGuard guard;  // packed constants are plain tensors, not inference ones
  for_each_method_graph(m, [&counts](const auto& g) {
    Views views;
    swap_block(g->block(), counts, views);
    // Squeezes whose every user now reads the 4-D output.
    for (Node* sq : views.squeezes) {
      if (!sq->output()->hasUses()) sq->destroy();
    }
  });
  return counts;
}
