// FP32 convolutions over tiny images without im2col, and convolution + relu + max-pool as one op:
// torchspeed::conv2d_pool (the fast_conv pass, passes/fastconv.cpp, swaps it in where a max_pool2d
// is the convolution's, or its relu's, only use).
//
// Why: on a small CNN (the digits one: 8x8 images, two 3x3 convs, a 2x2 max-pool, two linears,
// about 0.7 MFLOP) each op costs a few microseconds of set-up beside its arithmetic, and the
// arithmetic itself is a few microseconds: conv2d_gemm's im2col (a memcpy per kernel row and
// output position, one float at a time on a one-channel input), ATen's channels-last max-pool,
// then the flatten that copies the channels-last pooled tensor back to NCHW for the linear.
// Here the input is copied once into a zero-bordered channels-last buffer (none at all when it is
// channels-last already and unpadded), so that for each output row of positions the kernel rows
// are runs of kw*C floats in memory; a register tile of up to 8 positions times 32 output
// channels then reads them directly against the weight packed as conv2d_gemm's, in the same order
// (the bias first, then k = 0..K-1 in float FMA), so its outputs are conv2d_gemm's bit for bit.
// The pooled result is written NCHW-contiguous, the layout max_pool2d gives on the original NCHW
// graph, so a following flatten is a view.
//
// One copy of the kernel per instruction set (AVX-512F, AVX2+FMA), chosen at run time
// (tsfast::cpu_isa(), capped by TORCHSPEED_MAX_ISA); without AVX2 ATen runs. Larger images keep
// conv2d_gemm's im2col + GEMM (cache-blocked), and everything else conv2d_gemm leaves to ATen.
#include "fastconvsmall.h"

#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "fastlinear.h"
#include "ops.h"

namespace {

using tsimpl::plain_float;
using tsimpl::no_grad;
using tsimpl::pair_of;

using tsfast::Isa;
constexpr int64_t kNR = tsimpl::kLinearPanel;

// Output positions (N*OH*OW) and zero-bordered input floats (N*(H+2ph)*(W+2pw)*C) past which
// conv2d_gemm's im2col path runs instead: the direct kernel has no cache blocking. It beat im2col
// in BenchmarkConv2d at the digits CNN's sizes (64 positions) and at 32x16x16 (256 positions,
// 32x18x18 floats padded); larger sizes were not measured (docs/architecture.md).
constexpr int64_t kMaxRows = 256;
constexpr int64_t kMaxPadFloats = 1 << 14;
// Convolution outputs (N*OH*OW*OC) a fused pool may buffer before pooling: 256 KB.
constexpr int64_t kMaxPoolBuffer = 1 << 16;
constexpr int64_t kTaskFlops = 1 << 21;  // FLOPs per parallel task, as fastlinear.cpp's

// GCC 12 warns inside its own AVX-512 headers (_mm512_set1_* start from an undefined vector).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// What one tile reads: MR output positions lda floats apart in the padded input; for each of the
// nseg kernel rows (seg_stride floats apart) a run of seglen = kw*C floats, multiplied by the
// panel's rows k = g*seglen + t.
struct TileArgs {
  const float* a;
  int64_t lda, seg_stride, nseg, seglen;
  const float* b;     // one panel [K, kNR]
  const float* bias;  // kNR values (nvalid read) or null
  float* c;           // MR rows ldc apart
  int64_t ldc;
  int nvalid;
  bool relu;
};

template <int MR>
__attribute__((target("avx512f"))) void tile_avx512(const TileArgs& t) {
  const int nv = t.nvalid;
  const __mmask16 m0 = nv >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nv) - 1);
  const __mmask16 m1 = nv >= 32 ? __mmask16(0xFFFF) : nv > 16 ? __mmask16((1u << (nv - 16)) - 1) : 0;
  const __m512 i0 = t.bias ? _mm512_maskz_loadu_ps(m0, t.bias) : _mm512_setzero_ps();
  const __m512 i1 = t.bias ? _mm512_maskz_loadu_ps(m1, t.bias + 16) : _mm512_setzero_ps();
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    c0[r] = i0;
    c1[r] = i1;
  }
  for (int64_t g = 0; g < t.nseg; g++) {
    const float* a = t.a + g * t.seg_stride;
    const float* b = t.b + g * t.seglen * kNR;
    for (int64_t k = 0; k < t.seglen; k++) {
      const __m512 w0 = _mm512_loadu_ps(b + k * kNR), w1 = _mm512_loadu_ps(b + k * kNR + 16);
#pragma GCC unroll 8
      for (int r = 0; r < MR; r++) {
        const __m512 x = _mm512_set1_ps(a[r * t.lda + k]);
        c0[r] = _mm512_fmadd_ps(x, w0, c0[r]);
        c1[r] = _mm512_fmadd_ps(x, w1, c1[r]);
      }
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    if (t.relu) {  // max(0, NaN) is NaN, as relu's
      c0[r] = _mm512_max_ps(zero, c0[r]);
      c1[r] = _mm512_max_ps(zero, c1[r]);
    }
    _mm512_mask_storeu_ps(t.c + r * t.ldc, m0, c0[r]);
    _mm512_mask_storeu_ps(t.c + r * t.ldc + 16, m1, c1[r]);
  }
}

// AVX-512 on a panel with at most 16 valid columns (a layer of 16 or fewer output channels, or the
// last panel's remainder): one accumulator per row, half the FMAs of tile_avx512.
template <int MR>
__attribute__((target("avx512f"))) void narrow_avx512(const TileArgs& t) {
  const __mmask16 m0 = t.nvalid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << t.nvalid) - 1);
  const __m512 i0 = t.bias ? _mm512_maskz_loadu_ps(m0, t.bias) : _mm512_setzero_ps();
  __m512 c0[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) c0[r] = i0;
  for (int64_t g = 0; g < t.nseg; g++) {
    const float* a = t.a + g * t.seg_stride;
    const float* b = t.b + g * t.seglen * kNR;
    for (int64_t k = 0; k < t.seglen; k++) {
      const __m512 w0 = _mm512_loadu_ps(b + k * kNR);
#pragma GCC unroll 8
      for (int r = 0; r < MR; r++) c0[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * t.lda + k]), w0, c0[r]);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) _mm512_mask_storeu_ps(t.c + r * t.ldc, m0, t.relu ? _mm512_max_ps(zero, c0[r]) : c0[r]);
}

template <int MR>
void any_avx512(const TileArgs& t) {
  if (t.nvalid <= 16) {
    narrow_avx512<MR>(t);
  } else {
    tile_avx512<MR>(t);
  }
}

// AVX2: 16 columns of the panel at a time (off = 0 or 16; nv <= 16 of them valid), so MR rows
// of two accumulators each fit the 16 ymm registers.
template <int MR>
__attribute__((target("avx2,fma"))) void half_avx2(const TileArgs& t, int off, int nv) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nv), lane);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nv - 8), lane);
  const __m256 i0 = t.bias ? _mm256_maskload_ps(t.bias + off, m0) : _mm256_setzero_ps();
  const __m256 i1 = t.bias ? _mm256_maskload_ps(t.bias + off + 8, m1) : _mm256_setzero_ps();
  __m256 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    c0[r] = i0;
    c1[r] = i1;
  }
  for (int64_t g = 0; g < t.nseg; g++) {
    const float* a = t.a + g * t.seg_stride;
    const float* b = t.b + g * t.seglen * kNR + off;
    for (int64_t k = 0; k < t.seglen; k++) {
      const __m256 w0 = _mm256_loadu_ps(b + k * kNR), w1 = _mm256_loadu_ps(b + k * kNR + 8);
#pragma GCC unroll 8
      for (int r = 0; r < MR; r++) {
        const __m256 x = _mm256_broadcast_ss(a + r * t.lda + k);
        c0[r] = _mm256_fmadd_ps(x, w0, c0[r]);
        c1[r] = _mm256_fmadd_ps(x, w1, c1[r]);
      }
    }
  }
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    if (t.relu) {
      c0[r] = _mm256_max_ps(zero, c0[r]);
      c1[r] = _mm256_max_ps(zero, c1[r]);
    }
    _mm256_maskstore_ps(t.c + r * t.ldc + off, m0, c0[r]);
    _mm256_maskstore_ps(t.c + r * t.ldc + off + 8, m1, c1[r]);
  }
}

#pragma GCC diagnostic pop

template <int MR>
void tile_avx2(const TileArgs& t) {
  for (int off = 0; off < 2 * 16 && t.nvalid > off; off += 16) half_avx2<MR>(t, off, std::min(16, t.nvalid - off));
}

using TileFn = void (*)(const TileArgs&);
constexpr int kMR512 = 8, kMR2 = 6;
constexpr TileFn avx512_tiles[] = {nullptr,       any_avx512<1>, any_avx512<2>, any_avx512<3>, any_avx512<4>,
                                   any_avx512<5>, any_avx512<6>, any_avx512<7>, any_avx512<8>};
constexpr TileFn avx2_tiles[] = {nullptr, tile_avx2<1>, tile_avx2<2>, tile_avx2<3>, tile_avx2<4>, tile_avx2<5>, tile_avx2<6>};

// The convolution's geometry once the input is channels-last with its zero border.
struct Geometry {
  const float* xp;           // [N, Hp, Wp, C]
  int64_t N, C, Hp, Wp;      // padded sizes
  int64_t kh, kw, sh, sw;    // kernel and stride
  int64_t OH, OW, OC;
  const float* packed;       // [ceil(OC/kNR), K, kNR]
  const float* bias;         // [OC] or null
  bool relu;
  float* y;                  // [N, OH, OW, OC]
};

// Output rows begin..end-1 (row = (n, oh): OW positions) into g.y.
void conv_rows(Isa isa, const Geometry& g, int64_t begin, int64_t end) {
  const int mr = isa == Isa::Avx512 ? kMR512 : kMR2;
  const TileFn* tiles = isa == Isa::Avx512 ? avx512_tiles : avx2_tiles;
  const int64_t K = g.kh * g.kw * g.C, panels = (g.OC + kNR - 1) / kNR;
  for (int64_t row = begin; row < end; row++) {
    const int64_t n = row / g.OH, oh = row % g.OH;
    const float* base = g.xp + ((n * g.Hp + oh * g.sh) * g.Wp) * g.C;
    for (int64_t ow0 = 0; ow0 < g.OW; ow0 += mr) {
      const int rows = static_cast<int>(std::min<int64_t>(mr, g.OW - ow0));
      for (int64_t p = 0; p < panels; p++) {
        TileArgs t{base + ow0 * g.sw * g.C, g.sw * g.C, g.Wp * g.C, g.kh, g.kw * g.C, g.packed + p * K * kNR,
                   g.bias ? g.bias + p * kNR : nullptr, g.y + (row * g.OW + ow0) * g.OC + p * kNR, g.OC,
                   static_cast<int>(std::min<int64_t>(kNR, g.OC - p * kNR)), g.relu};
        tiles[rows](t);
      }
    }
  }
}

// Whether x [N, C, H, W] is laid out as a dense [N, H, W, C] array (strides of size-1 dims aside).
bool dense_nhwc(const at::Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  return (C == 1 || x.stride(1) == 1) && (W == 1 || x.stride(3) == C) && (H == 1 || x.stride(2) == W * C) &&
         (N == 1 || x.stride(0) == H * W * C);
}

// x into dst [N, H+2ph, W+2pw, C], zeros on the border.
void pad_nhwc(const at::Tensor& x, int64_t ph, int64_t pw, float* dst) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), Hp = H + 2 * ph, Wp = W + 2 * pw;
  const int64_t sn = x.stride(0), sc = x.stride(1), sh = x.stride(2), sw = x.stride(3);
  const float* src = x.data_ptr<float>();
  std::fill(dst, dst + N * Hp * Wp * C, 0.0f);
  for (int64_t n = 0; n < N; n++) {
    for (int64_t h = 0; h < H; h++) {
      float* d = dst + ((n * Hp + h + ph) * Wp + pw) * C;
      const float* s = src + n * sn + h * sh;
      if ((C == 1 || sc == 1) && (W == 1 || sw == C)) {  // the row is one run (channels-last, or one channel)
        std::memcpy(d, s, W * C * sizeof(float));
        continue;
      }
      for (int64_t w = 0; w < W; w++, d += C) {
        for (int64_t c = 0; c < C; c++) d[c] = s[w * sw + c * sc];
      }
    }
  }
}

// max_pool2d (no padding, dilation 1, floor) of conv [N, OH, OW, OC] into y [N, OC, PH, PW]
// (contiguous): ATen's rule, a NaN in the window wins.
void pool_nchw(const float* conv, int64_t N, int64_t OH, int64_t OW, int64_t OC, const int64_t k[2],
               const int64_t s[2], int64_t PH, int64_t PW, float* y) {
  thread_local std::vector<float> acc;
  acc.resize(OC);
  for (int64_t n = 0; n < N; n++) {
    for (int64_t ph = 0; ph < PH; ph++) {
      for (int64_t pw = 0; pw < PW; pw++) {
        std::fill(acc.begin(), acc.end(), -std::numeric_limits<float>::infinity());
        for (int64_t i = 0; i < k[0]; i++) {
          for (int64_t j = 0; j < k[1]; j++) {
            const float* v = conv + ((n * OH + ph * s[0] + i) * OW + pw * s[1] + j) * OC;
            for (int64_t c = 0; c < OC; c++) acc[c] = (v[c] > acc[c] || std::isnan(v[c])) ? v[c] : acc[c];
          }
        }
        float* out = y + n * OC * PH * PW + ph * PW + pw;
        for (int64_t c = 0; c < OC; c++) out[c * PH * PW] = acc[c];
      }
    }
  }
}

}  // namespace

bool tsimpl::conv2d_direct(tsfast::Isa isa, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                           const at::Tensor* bias, const int64_t s[2], const int64_t p[2], const int64_t d[2], bool relu,
                           const int64_t* pool_k, const int64_t* pool_s, at::Tensor* out) {
  if (isa != Isa::Avx2 && isa != Isa::Avx512) return false;
  if (!plain_float(x) || x.dim() != 4 || weight.dim() != 4 || !no_grad(x) || !no_grad(packed) || !no_grad(weight))
    return false;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OC = weight.size(0), kh = weight.size(2), kw = weight.size(3), K = C * kh * kw;
  if (weight.size(1) != C || OC <= 0 || kh <= 0 || kw <= 0 || K <= 0 || K > kConvMaxDepth) return false;
  if (!(packed.dim() == 3 && packed.size(0) == (OC + kNR - 1) / kNR && packed.size(1) == K && packed.size(2) == kNR &&
        plain_float(packed) && packed.is_contiguous()))
    return false;
  if (bias != nullptr && !(plain_float(*bias) && bias->dim() == 1 && bias->size(0) == OC && bias->is_contiguous() &&
                           no_grad(*bias)))
    return false;
  if (s[0] <= 0 || s[1] <= 0 || p[0] < 0 || p[1] < 0 || d[0] != 1 || d[1] != 1) return false;
  const int64_t Hp = H + 2 * p[0], Wp = W + 2 * p[1];
  // Empty images (only padding) are ATen's to answer or refuse.
  if (N <= 0 || H <= 0 || W <= 0 || Hp < kh || Wp < kw || N * Hp * Wp * C > kMaxPadFloats) return false;
  const int64_t OH = (Hp - kh) / s[0] + 1, OW = (Wp - kw) / s[1] + 1;
  if (N * OH * OW > kMaxRows) return false;
  int64_t PH = 0, PW = 0;
  if (pool_k != nullptr) {
    if (pool_k[0] <= 0 || pool_k[1] <= 0 || pool_s[0] <= 0 || pool_s[1] <= 0 || OH < pool_k[0] || OW < pool_k[1] ||
        N * OH * OW * OC > kMaxPoolBuffer)
      return false;
    PH = (OH - pool_k[0]) / pool_s[0] + 1;
    PW = (OW - pool_k[1]) / pool_s[1] + 1;
  }

  // Buffers per calling thread, kept between calls: no allocation once warm.
  thread_local std::vector<float> padded, conv;
  const float* xp = x.data_ptr<float>();
  if (p[0] != 0 || p[1] != 0 || !dense_nhwc(x)) {
    padded.resize(N * Hp * Wp * C);
    pad_nhwc(x, p[0], p[1], padded.data());
    xp = padded.data();
  }
  at::Tensor y = pool_k != nullptr ? at::empty({N, OC, PH, PW}, x.options())
                                   : at::empty({N, OC, OH, OW}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  float* cy = y.data_ptr<float>();
  if (pool_k != nullptr) {
    conv.resize(N * OH * OW * OC);
    cy = conv.data();
  }
  const Geometry g{xp, N, C, Hp, Wp, kh, kw, s[0], s[1], OH, OW, OC, packed.data_ptr<float>(),
                   bias != nullptr ? bias->data_ptr<float>() : nullptr, relu, cy};
  const int64_t rows = N * OH;
  const int64_t grain = std::max<int64_t>(1, kTaskFlops / std::max<int64_t>(1, 2 * OW * K * OC));
  if (rows <= grain) {
    conv_rows(isa, g, 0, rows);
  } else {
    at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) { conv_rows(isa, g, r0, r1); });
  }
  if (pool_k != nullptr) pool_nchw(cy, N, OH, OW, OC, pool_k, pool_s, PH, PW, y.data_ptr<float>());
  *out = std::move(y);
  return true;
}

at::Tensor tsimpl::conv2d_pool_impl(tsfast::Isa isa, const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& packed, const c10::optional<at::Tensor>& bias,
                                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                    bool relu, at::IntArrayRef pool_kernel, at::IntArrayRef pool_stride, bool* fast) {
  TORCH_CHECK(weight.dim() == 4, "torchspeed::conv2d_pool: the weight has ", weight.dim(), " dimensions, want 4");
  const int64_t K = weight.size(1) * weight.size(2) * weight.size(3), oc = weight.size(0);
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == kNR && packed.size(0) == (oc + kNR - 1) / kNR &&
                  packed.size(1) == K && plain_float(packed) && packed.is_contiguous(),
              "torchspeed::conv2d_pool: the packed weight [", packed.sizes(), "] does not hold the weight [",
              weight.sizes(), "] in panels of ", kNR);
  const bool pooled = !pool_kernel.empty();
  int64_t pk[2] = {0, 0}, ps[2] = {0, 0};
  if (pooled) {
    // max_pool2d's own rule: an empty stride is the kernel size.
    TORCH_CHECK(pair_of(pool_kernel, pk) && pair_of(pool_stride.empty() ? pool_kernel : pool_stride, ps),
                "torchspeed::conv2d_pool: the pool kernel ", pool_kernel, " and stride ", pool_stride,
                " are not one or two values each");
  }
  isa = tsfast::resolve(isa);
  const at::Tensor* b = bias.has_value() && bias->defined() ? &*bias : nullptr;
  int64_t s[2], p[2], d[2];
  at::Tensor y;
  if (pair_of(stride, s) && pair_of(padding, p) && pair_of(dilation, d) &&
      conv2d_direct(isa, x, weight, packed, b, s, p, d, relu, pooled ? pk : nullptr, pooled ? ps : nullptr, &y)) {
    *fast = true;
    return y;
  }
  bool gemm = false;
  y = conv2d_gemm_impl(x, weight, packed, bias, stride, padding, dilation, relu, &gemm);
  *fast = false;
  if (!pooled) return y;
  return at::max_pool2d(y, {pk[0], pk[1]}, {ps[0], ps[1]}, {0, 0}, {1, 1}, false);
}

at::Tensor tsimpl::conv2d_pool(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                               const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef dilation, bool relu, at::IntArrayRef pool_kernel,
                               at::IntArrayRef pool_stride, bool flatten) {
  TORCH_CHECK(!pool_kernel.empty(), "torchspeed::conv2d_pool: the pool kernel size is empty");
  bool fast = false;
  at::Tensor y = conv2d_pool_impl(Isa::Best, x, weight, packed, bias, stride, padding, dilation, relu, pool_kernel,
                                  pool_stride, &fast);
  // The pass folds a following flatten(1) in: one op fewer to dispatch, and a view of the NCHW
  // result (a copy only after a fallback that left it channels-last).
  return flatten ? y.flatten(1) : y;
}

void tsimpl::register_conv_pool(torch::Library& m) {
  m.def(
      "conv2d_pool(Tensor x, Tensor weight, Tensor packed, Tensor? bias, int[] stride, int[] padding, "
      "int[] dilation, bool relu, int[] pool_kernel, int[] pool_stride, bool flatten) -> Tensor",
      &tsimpl::conv2d_pool);
}
