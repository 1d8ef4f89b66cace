// torchspeed::transformer_encoder_layer: aten::_transformer_encoder_layer_fwd (the fast path a
// scripted nn.TransformerEncoderLayer takes in eval) with its four linears through
// torchspeed::linear_packed over weights packed at load time, and the rest through ATen ops.
//
// The arithmetic follows ATen 1.13's transformer_encoder_layer_forward and
// native_multi_head_attention_cpu (aten/src/ATen/native/transformers/): [norm1 if norm_first],
// qkv = x W_qkv^T + b_qkv, q scaled by 1/sqrt(head dim) (in float), softmax(q k^T) v, the heads
// put back to [B, T, D], the out projection, + src, [norm1 if not norm_first]; then [norm2 if
// norm_first], linear1 with relu (or gelu), linear2, + the FFN's input, [norm2 if not
// norm_first]. Results differ from ATen's by float rounding only (summation order). A mask,
// nested tensors, other dtypes, autograd, empty inputs or shapes that do not fit run ATen's op.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>

#include "fastlinear.h"
#include "internal.h"

namespace {

at::Tensor encoder_layer(const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
                         const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias,
                         bool use_gelu, bool norm_first, double eps, const at::Tensor& norm_weight_1,
                         const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2,
                         const at::Tensor& ffn_weight_1, const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2,
                         const at::Tensor& ffn_bias_2, const c10::optional<at::Tensor>& mask,
                         c10::optional<int64_t> mask_type, const at::Tensor& qkv_packed, const at::Tensor& proj_packed,
                         const at::Tensor& ffn1_packed, const at::Tensor& ffn2_packed) {
  const int64_t D = embed_dim, F = ffn_weight_1.dim() == 2 ? ffn_weight_1.size(0) : -1;
  auto is_float = [](const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat &&
           !(t.requires_grad() && at::GradMode::is_enabled());
  };
  auto vec = [&](const at::Tensor& t, int64_t n) { return is_float(t) && t.dim() == 1 && t.size(0) == n; };
  auto mat = [&](const at::Tensor& t, int64_t n, int64_t k) {
    return is_float(t) && t.dim() == 2 && t.size(0) == n && t.size(1) == k;
  };
  const bool ok = is_float(src) && !src.is_nested() && src.dim() == 3 && src.size(2) == D && src.numel() > 0 &&
                  num_heads > 0 && D % num_heads == 0 && !(mask.has_value() && mask->defined()) && F > 0 &&
                  mat(qkv_weight, 3 * D, D) && vec(qkv_bias, 3 * D) && mat(proj_weight, D, D) && vec(proj_bias, D) &&
                  mat(ffn_weight_1, F, D) && vec(ffn_bias_1, F) && mat(ffn_weight_2, D, F) && vec(ffn_bias_2, D) &&
                  vec(norm_weight_1, D) && vec(norm_bias_1, D) && vec(norm_weight_2, D) && vec(norm_bias_2, D);
  if (!ok) {
    return at::_transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                              use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                              norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask,
                                              mask_type);
  }
  const int64_t B = src.size(0), T = src.size(1), H = num_heads, dh = D / H;
  auto norm = [&](const at::Tensor& t, const at::Tensor& w, const at::Tensor& b) {
    return at::layer_norm(t, {D}, w, b, eps, true);
  };
  at::Tensor x = src.contiguous();
  // Attention.
  at::Tensor h = norm_first ? norm(x, norm_weight_1, norm_bias_1) : x;
  at::Tensor qkv = tsimpl::linear_packed(h, qkv_packed, qkv_bias, 3 * D, false);       // [B, T, 3D]
  at::Tensor heads = qkv.view({B, T, 3, H, dh}).permute({2, 0, 3, 1, 4});             // [3, B, H, T, dh]
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(dh));
  at::Tensor q = heads[0].mul(inv_sqrt);
  at::Tensor scores = at::matmul(q, heads[1].transpose(-2, -1));                      // [B, H, T, T]
  at::Tensor ctx = at::matmul(at::_softmax(scores, -1, false), heads[2]);             // [B, H, T, dh]
  ctx = ctx.permute({0, 2, 1, 3}).reshape({B, T, D});
  at::Tensor attn = tsimpl::linear_packed(ctx, proj_packed, proj_bias, D, false);
  attn.add_(x);
  x = norm_first ? attn : norm(attn, norm_weight_1, norm_bias_1);
  // Feed-forward.
  at::Tensor pre = x;
  h = norm_first ? norm(x, norm_weight_2, norm_bias_2) : x;
  at::Tensor f = tsimpl::linear_packed(h, ffn1_packed, ffn_bias_1, F, !use_gelu);
  if (use_gelu) f = at::gelu(f);
  f = tsimpl::linear_packed(f, ffn2_packed, ffn_bias_2, D, false);
  f.add_(pre);
  return norm_first ? f : norm(f, norm_weight_2, norm_bias_2);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torchspeed, m) {
  m.def(
      "transformer_encoder_layer(Tensor src, int embed_dim, int num_heads, Tensor qkv_weight, Tensor qkv_bias, "
      "Tensor proj_weight, Tensor proj_bias, bool use_gelu, bool norm_first, float eps, Tensor norm_weight_1, "
      "Tensor norm_bias_1, Tensor norm_weight_2, Tensor norm_bias_2, Tensor ffn_weight_1, Tensor ffn_bias_1, "
      "Tensor ffn_weight_2, Tensor ffn_bias_2, Tensor? mask, int? mask_type, Tensor qkv_packed, Tensor proj_packed, "
      "Tensor ffn1_packed, Tensor ffn2_packed) -> Tensor",
      &encoder_layer);
}

int tsimpl::swap_encoder_layer(torch::jit::Node* node) {
  static const auto sym = c10::Symbol::fromQualString("torchspeed::transformer_encoder_layer");
  if (!node->matches(
          "aten::_transformer_encoder_layer_fwd(Tensor src, int embed_dim, int num_heads, Tensor qkv_weight, Tensor "
          "qkv_bias, Tensor proj_weight, Tensor proj_bias, bool use_gelu, bool norm_first, float eps, Tensor "
          "norm_weight_1, Tensor norm_bias_1, Tensor norm_weight_2, Tensor norm_bias_2, Tensor ffn_weight_1, Tensor "
          "ffn_bias_1, Tensor ffn_weight_2, Tensor ffn_bias_2, Tensor? mask=None, int? mask_type=None) -> Tensor")) {
    return -1;
  }
  // qkv_weight, proj_weight, ffn_weight_1, ffn_weight_2: constant 2-D float tensors.
  std::vector<at::Tensor> weights;
  for (size_t i : {3, 5, 14, 16}) {
    auto w = constant_float(node->input(i));
    if (!w || w->dim() != 2) return -1;
    weights.push_back(*w);
  }
  auto use_gelu = torch::jit::toIValue(node->input(7));
  if (!use_gelu || !use_gelu->isBool()) return -1;
  auto* graph = node->owningGraph();
  torch::jit::WithInsertPoint guard(node);
  std::vector<torch::jit::Value*> inputs(node->inputs().begin(), node->inputs().end());
  for (const auto& w : weights) inputs.push_back(graph->insertConstant(pack_linear_weight(w)));
  auto* repl = graph->create(sym, inputs, 1);
  repl->output()->setType(node->output()->type());
  repl->insertBefore(node);
  node->output()->replaceAllUsesWith(repl->output());
  node->destroy();
  return use_gelu->toBool() ? 0 : 1;
}
