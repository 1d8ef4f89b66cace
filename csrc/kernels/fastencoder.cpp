// torchspeed::transformer_encoder_layer: aten::_transformer_encoder_layer_fwd (the fast path a
// scripted nn.TransformerEncoderLayer takes in eval) with its four linears through
// torchspeed::linear_packed over weights packed at load time, the attention products in this
// file's loops (heads read from and written to the token-major layout: no permute copies and no
// BLAS call per head), each residual add with the layer norm after it in one loop, and the softmax
// and GELU through ATen ops.
//
// The arithmetic follows ATen 1.13's transformer_encoder_layer_forward and
// native_multi_head_attention_cpu (aten/src/ATen/native/transformers/): [norm1 if norm_first],
// qkv = x W_qkv^T + b_qkv, q scaled by 1/sqrt(head dim) (in float), softmax(q k^T) v, the heads
// put back to [B, T, D], the out projection, + src, [norm1 if not norm_first]; then [norm2 if
// norm_first], linear1 with relu (or gelu), linear2, + the FFN's input, [norm2 if not
// norm_first]. Results differ from ATen's by float rounding only (summation order). A mask,
// nested tensors, other dtypes, autograd, empty inputs or shapes that do not fit run ATen's op.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "fastlinear.h"
#include "ops.h"

namespace {

// Below 16 floats per head the loops of attention() vectorize poorly and ATen's bmm is faster
// (measured: d_model 64, 8 heads, 33 tokens ran 1.30x ATen's time).
constexpr int64_t kMinHeadDim = 16;

// Columns of the attention loops' accumulator blocks: one zmm (two ymm), held in registers across
// the whole sum instead of loaded and stored at each step (which chained every step on a store).
constexpr int64_t kLanes = 16;

// S[t][u] = scale * sum_d Q[t][d] K[u][d] for one head; Q and K rows have stride ld. kt is
// scratch for K transposed (dh rows of Tp >= T floats, Tp a multiple of kLanes, zero past T) and
// qs for a scaled Q row, so the inner loops run along contiguous memory and vectorize (AVX-512,
// AVX2 or baseline, chosen when the library loads). The sum runs over d in order.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void head_scores(
    const float* q, const float* k, int64_t ld, int64_t T, int64_t dh, float scale, float* kt, int64_t Tp, float* qs,
    float* s) {
  for (int64_t u = 0; u < T; u++) {
    const float* kr = k + u * ld;
    for (int64_t d = 0; d < dh; d++) kt[d * Tp + u] = kr[d];
  }
  for (int64_t t = 0; t < T; t++) {
    const float* qr = q + t * ld;
    for (int64_t d = 0; d < dh; d++) qs[d] = qr[d] * scale;  // ATen scales q before the product
    float* sr = s + t * T;
    for (int64_t u0 = 0; u0 < T; u0 += kLanes) {
      float acc[kLanes] = {};
      for (int64_t d = 0; d < dh; d++) {
        const float a = qs[d];
        const float* kd = kt + d * Tp + u0;
        for (int64_t j = 0; j < kLanes; j++) acc[j] += a * kd[j];
      }
      const int64_t n = std::min(kLanes, T - u0);
      for (int64_t j = 0; j < n; j++) sr[u0 + j] = acc[j];
    }
  }
}

// O[t][d] = sum_u P[t][u] V[u][d] for one head (the sum over u in order); V rows have stride ld,
// O rows stride ldo. Heads of a multiple of kLanes floats take register blocks of kLanes columns.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void head_context(
    const float* p, const float* v, int64_t ld, int64_t T, int64_t dh, float* o, int64_t ldo) {
  for (int64_t t = 0; t < T; t++) {
    float* orow = o + t * ldo;
    const float* pr = p + t * T;
    if (dh % kLanes == 0) {
      for (int64_t d0 = 0; d0 < dh; d0 += kLanes) {
        float acc[kLanes] = {};
        for (int64_t u = 0; u < T; u++) {
          const float a = pr[u];
          const float* vr = v + u * ld + d0;
          for (int64_t j = 0; j < kLanes; j++) acc[j] += a * vr[j];
        }
        for (int64_t j = 0; j < kLanes; j++) orow[d0 + j] = acc[j];
      }
      continue;
    }
    for (int64_t d = 0; d < dh; d++) orow[d] = 0.0f;
    for (int64_t u = 0; u < T; u++) {
      const float a = pr[u];
      const float* vr = v + u * ld;
      for (int64_t d = 0; d < dh; d++) orow[d] += a * vr[d];
    }
  }
}

// Sum of n floats in 16 running partial sums, so that the compiler vectorizes it without
// reassociating (ATen's layer norm sums in vector lanes too).
inline float lane_sum(const float* v, int64_t n) {
  float acc[16] = {};
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) {
    for (int j = 0; j < 16; j++) acc[j] += v[d + j];
  }
  float total = 0.0f;
  for (; d < n; d++) total += v[d];
  for (int j = 0; j < 16; j++) total += acc[j];
  return total;
}

// For each of `rows` rows of D floats: v = a + r (r may be null), stored in s when s is not null
// (else in y), then y = (v - mean) / sqrt(var + eps) * w + b, the biased variance as ATen's layer
// norm takes it. y may be a. One pass over rows that are in cache, where ATen's add_ and
// layer_norm cost two dispatches and an allocation for a 16x128 input.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void add_layer_norm(
    const float* a, const float* r, float* s, float* y, int64_t rows, int64_t D, const float* w, const float* b,
    float eps) {
  for (int64_t i = 0; i < rows; i++) {
    const float* ar = a + i * D;
    const float* rr = r ? r + i * D : nullptr;
    float* v = (s ? s : y) + i * D;
    float* yr = y + i * D;
    for (int64_t d = 0; d < D; d++) v[d] = rr ? ar[d] + rr[d] : ar[d];
    const float mean = lane_sum(v, D) / static_cast<float>(D);
    float acc[16] = {};
    int64_t d = 0;
    for (; d + 16 <= D; d += 16) {
      for (int j = 0; j < 16; j++) acc[j] += (v[d + j] - mean) * (v[d + j] - mean);
    }
    float sq = 0.0f;
    for (; d < D; d++) sq += (v[d] - mean) * (v[d] - mean);
    for (int j = 0; j < 16; j++) sq += acc[j];
    const float rstd = 1.0f / std::sqrt(sq / static_cast<float>(D) + eps);
    for (int64_t e = 0; e < D; e++) yr[e] = (v[e] - mean) * rstd * w[e] + b[e];
  }
}

// softmax(q k^T / sqrt(dh)) v for every head, read from qkv [B, T, 3D] (biases added) where the
// heads lie token-major, and written token-major as [B, T, D]: no permute copies and no BLAS call
// per head (ATen's bmm makes one per head: most of the attention's time at 16 tokens).
at::Tensor attention(const at::Tensor& qkv, int64_t B, int64_t T, int64_t D, int64_t H) {
  const int64_t dh = D / H, ld = 3 * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const float* base = qkv.data_ptr<float>();
  auto s = at::empty({B * H * T, T}, qkv.options());
  float* sp = s.data_ptr<float>();
  auto ctx = at::empty({B, T, D}, qkv.options());
  float* cp = ctx.data_ptr<float>();
  // One (batch, head) pair is 4*T*T*dh flops: at least ~256K per task.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, 4 * T * T * dh));
  at::parallel_for(0, B * H, grain, [&](int64_t lo, int64_t hi) {
    const int64_t Tp = (T + kLanes - 1) / kLanes * kLanes;
    std::vector<float> kt(dh * Tp), qs(dh);  // zeros: kt's columns past T stay 0
    for (int64_t i = lo; i < hi; i++) {
      const float* q = base + (i / H) * T * ld + (i % H) * dh;
      head_scores(q, q + D, ld, T, dh, scale, kt.data(), Tp, qs.data(), sp + i * T * T);
    }
  });
  at::_softmax_out(s, s, 1, false);
  at::parallel_for(0, B * H, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) {
      const int64_t b = i / H, h = i % H;
      head_context(sp + i * T * T, base + b * T * ld + 2 * D + h * dh, ld, T, dh, cp + b * T * D + h * dh, D);
    }
  });
  return ctx;
}

// The same through ATen's matmul (bmm), for heads too narrow for attention()'s loops.
at::Tensor attention_aten(const at::Tensor& qkv, int64_t B, int64_t T, int64_t D, int64_t H) {
  const int64_t dh = D / H;
  at::Tensor heads = qkv.view({B, T, 3, H, dh}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, dh]
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(dh));
  at::Tensor q = heads[0].mul(inv_sqrt);
  at::Tensor scores = at::matmul(q, heads[1].transpose(-2, -1));  // [B, H, T, T]
  at::Tensor ctx = at::matmul(at::_softmax(scores, -1, false), heads[2]);  // [B, H, T, dh]
  return ctx.permute({0, 2, 1, 3}).reshape({B, T, D});
}

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
  const int64_t rows = B * T;
  const float feps = static_cast<float>(eps);  // ATen's layer norm kernel takes eps as float
  auto ptr = [](const at::Tensor& t) { return t.data_ptr<float>(); };
  // Layer norms (with the residual add before them) in add_layer_norm; their weights contiguous.
  const at::Tensor nw1 = norm_weight_1.contiguous(), nb1 = norm_bias_1.contiguous();
  const at::Tensor nw2 = norm_weight_2.contiguous(), nb2 = norm_bias_2.contiguous();
  at::Tensor x = src.contiguous();
  // Attention.
  at::Tensor h = x;
  if (norm_first) {
    h = at::empty_like(x);
    add_layer_norm(ptr(x), nullptr, nullptr, ptr(h), rows, D, ptr(nw1), ptr(nb1), feps);
  }
  at::Tensor qkv = tsimpl::linear_packed(h, qkv_packed, qkv_bias, 3 * D, false);  // [B, T, 3D]
  qkv = qkv.contiguous();
  at::Tensor ctx = dh >= kMinHeadDim ? attention(qkv, B, T, D, H) : attention_aten(qkv, B, T, D, H);
  at::Tensor attn = tsimpl::linear_packed(ctx, proj_packed, proj_bias, D, false).contiguous();
  // Feed-forward input: post-norm norm1(attn + x), in place; pre-norm attn + x and h = norm2 of it.
  const at::Tensor& pre = attn;  // the FFN's residual: attn after the first block
  if (norm_first) {
    h = at::empty_like(attn);
    add_layer_norm(ptr(attn), ptr(x), ptr(attn), ptr(h), rows, D, ptr(nw2), ptr(nb2), feps);
  } else {
    add_layer_norm(ptr(attn), ptr(x), nullptr, ptr(attn), rows, D, ptr(nw1), ptr(nb1), feps);
    h = attn;
  }
  at::Tensor f = tsimpl::linear_packed(h, ffn1_packed, ffn_bias_1, F, !use_gelu);
  if (use_gelu) f = at::gelu(f);
  f = tsimpl::linear_packed(f, ffn2_packed, ffn_bias_2, D, false).contiguous();
  if (norm_first) {
    f.add_(pre);
    return f;
  }
  add_layer_norm(ptr(f), ptr(pre), nullptr, ptr(f), rows, D, ptr(nw2), ptr(nb2), feps);
  return f;
}

}  // namespace

void tsimpl::register_encoder(torch::Library& m) {
  m.def(
      "transformer_encoder_layer(Tensor src, int embed_dim, int num_heads, Tensor qkv_weight, Tensor qkv_bias, "
      "Tensor proj_weight, Tensor proj_bias, bool use_gelu, bool norm_first, float eps, Tensor norm_weight_1, "
      "Tensor norm_bias_1, Tensor norm_weight_2, Tensor norm_bias_2, Tensor ffn_weight_1, Tensor ffn_bias_1, "
      "Tensor ffn_weight_2, Tensor ffn_bias_2, Tensor? mask, int? mask_type, Tensor qkv_packed, Tensor proj_packed, "
      "Tensor ffn1_packed, Tensor ffn2_packed) -> Tensor",
      &encoder_layer);
}
