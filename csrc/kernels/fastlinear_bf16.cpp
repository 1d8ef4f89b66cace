// torchspeed::linear_packed over a BF16-packed weight (pack_linear_weight_bf16): the linear_bf16
// load pass's variant of fastlinear.cpp's FP32 GEMM, for the small-M linears of transformer layers.
//
// Why: at 16 tokens the FP32 kernel runs near the core's FMA peak, so the arithmetic itself is
// what is left. vdpbf16ps (AVX512_BF16: Cooper Lake, Sapphire Rapids, Zen 4 and later) does two
// multiply-adds per lane and instruction, and the weights take half the bytes.
//
// Arithmetic, the same on every path so that one artifact answers alike across a fleet: the
// weight is rounded to BF16 once when packed, each row of x to BF16 once per call (round to
// nearest even), and y = bias + sum over k of x_bf16[k] * w_bf16[k] in float (a BF16 product is
// exact in float). With AVX512_BF16 the sum takes pairs of k per vdpbf16ps; without it (AVX-512F,
// AVX2) the BF16 values are widened to float in registers (a 16-bit shift) and summed with FMAs:
// the same products, summed in another order and without the instruction's flush of subnormals.
// Without AVX2+FMA the op runs ATen's linear on the weight widened to float and on x unrounded.
//
// Packed layout: [ceil(N / kNR), ceil(K / 2), 2 * kNR] BF16 with packed[p][k2][2j + t] =
// W[p*kNR + j][2*k2 + t] (0 past N and K): the pairs vdpbf16ps takes, panel by panel as the FP32
// kernel's.
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fastlinear.h"
#include "fastq.h"

namespace {

using tsimpl::no_grad;

constexpr int64_t kNR = tsimpl::kLinearPanel;
constexpr int64_t kMaxRows = 2048;       // as the FP32 kernel: BLAS wins past it
constexpr int64_t kTaskFlops = 1 << 21;  // FLOPs per parallel task

using tsimpl::Bf16Path;

// Round to nearest even, NaN kept a (quiet) NaN: what vcvtneps2bf16 gives for normal numbers.
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// xb[M, K2 pairs] = x[M, K] rounded to BF16 (rows lda apart), 0 past K.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void round_rows(
    const float* x, int64_t lda, int64_t M, int64_t K, int64_t K2, uint16_t* xb) {
  for (int64_t m = 0; m < M; m++) {
    const float* xr = x + m * lda;
    uint16_t* o = xb + m * 2 * K2;
    for (int64_t k = 0; k < K; k++) o[k] = to_bf16(xr[k]);
    if (K % 2 != 0) o[K] = 0;
  }
}

// xf[M, 2*K2] = x[M, K] rounded to BF16 and kept as floats (rows lda apart), 0 past K: what the
// widening kernels broadcast, straight from memory as the FP32 kernel's.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void round_rows_f32(
    const float* x, int64_t lda, int64_t M, int64_t K, int64_t K2, float* xf) {
  for (int64_t m = 0; m < M; m++) {
    const float* xr = x + m * lda;
    float* o = xf + m * 2 * K2;
    for (int64_t k = 0; k < K; k++) o[k] = from_bf16(to_bf16(xr[k]));
    if (K % 2 != 0) o[K] = 0.0f;
  }
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// One tile with vdpbf16ps: MR rows of xb (pairs, rows lda uint16 apart) times one panel.
template <int MR>
__attribute__((target("avx512f,avx512bf16"))) void tile_dot(const uint16_t* a, int64_t lda, const uint16_t* b,
                                                            int64_t K2, const float* bias, float* c, int64_t ldc,
                                                            int nvalid, bool relu) {
  const __mmask16 m0 = nvalid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nvalid) - 1);
  const __mmask16 m1 = nvalid >= 32 ? __mmask16(0xFFFF) : nvalid > 16 ? __mmask16((1u << (nvalid - 16)) - 1) : 0;
  const __m512 i0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 i1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    c0[r] = i0;
    c1[r] = i1;
  }
  for (int64_t k2 = 0; k2 < K2; k2++) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(b + k2 * 2 * kNR);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(b + k2 * 2 * kNR + 32);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * k2, 4);
      const __m512bh x = (__m512bh)_mm512_set1_epi32(pair);
      c0[r] = _mm512_dpbf16_ps(c0[r], x, w0);
      c1[r] = _mm512_dpbf16_ps(c1[r], x, w1);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    if (relu) {
      c0[r] = _mm512_max_ps(zero, c0[r]);
      c1[r] = _mm512_max_ps(zero, c1[r]);
    }
    _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
  }
}

// AVX-512F without BF16: the pairs widened to float (even k: the low half shifted up; odd k: the
// high half masked), then two FMAs per pair; a holds x's BF16 values as floats.
template <int MR>
__attribute__((target("avx512f"))) void tile_wide512(const float* a, int64_t lda, const uint16_t* b, int64_t K2,
                                                     const float* bias, float* c, int64_t ldc, int nvalid, bool relu) {
  const __mmask16 m0 = nvalid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nvalid) - 1);
  const __mmask16 m1 = nvalid >= 32 ? __mmask16(0xFFFF) : nvalid > 16 ? __mmask16((1u << (nvalid - 16)) - 1) : 0;
  const __m512 i0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 i1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
  const __m512i hi = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    c0[r] = i0;
    c1[r] = i1;
  }
  for (int64_t k2 = 0; k2 < K2; k2++) {
    const __m512i p0 = _mm512_loadu_si512(b + k2 * 2 * kNR), p1 = _mm512_loadu_si512(b + k2 * 2 * kNR + 32);
    const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(p0, 16)), o0 = _mm512_castsi512_ps(_mm512_and_si512(p0, hi));
    const __m512 e1 = _mm512_castsi512_ps(_mm512_slli_epi32(p1, 16)), o1 = _mm512_castsi512_ps(_mm512_and_si512(p1, hi));
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      const __m512 xe = _mm512_set1_ps(a[r * lda + 2 * k2]);
      const __m512 xo = _mm512_set1_ps(a[r * lda + 2 * k2 + 1]);
      c0[r] = _mm512_fmadd_ps(xo, o0, _mm512_fmadd_ps(xe, e0, c0[r]));
      c1[r] = _mm512_fmadd_ps(xo, o1, _mm512_fmadd_ps(xe, e1, c1[r]));
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    if (relu) {
      c0[r] = _mm512_max_ps(zero, c0[r]);
      c1[r] = _mm512_max_ps(zero, c1[r]);
    }
    _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
  }
}

// AVX2: one half of a panel (16 columns, nvalid <= 16 valid) at a time, as the FP32 kernel's:
// per pair of k, the even k's weights widened (shifted up) and summed into every row, then the
// odd k's (masked), re-read from L1 so that MR=6 rows of two accumulators fit the 16 registers.
template <int MR>
__attribute__((target("avx2,fma"))) void half_avx2(const float* a, int64_t lda, const uint16_t* b, int64_t K2,
                                                   const float* bias, float* c, int64_t ldc, int nvalid, bool relu) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nvalid), lane);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nvalid - 8), lane);
  const __m256 i0 = bias ? _mm256_maskload_ps(bias, m0) : _mm256_setzero_ps();
  const __m256 i1 = bias ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
  const __m256i hi = _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  __m256 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    c0[r] = i0;
    c1[r] = i1;
  }
  for (int64_t k2 = 0; k2 < K2; k2++) {
    const __m256i* p = reinterpret_cast<const __m256i*>(b + k2 * 2 * kNR);
    const __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(p), 16));
    const __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(p + 1), 16));
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + 2 * k2);
      c0[r] = _mm256_fmadd_ps(x, e0, c0[r]);
      c1[r] = _mm256_fmadd_ps(x, e1, c1[r]);
    }
    const __m256 o0 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256(p), hi));
    const __m256 o1 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256(p + 1), hi));
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + 2 * k2 + 1);
      c0[r] = _mm256_fmadd_ps(x, o0, c0[r]);
      c1[r] = _mm256_fmadd_ps(x, o1, c1[r]);
    }
  }
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    if (relu) {
      c0[r] = _mm256_max_ps(zero, c0[r]);
      c1[r] = _mm256_max_ps(zero, c1[r]);
    }
    _mm256_maskstore_ps(c + r * ldc, m0, c0[r]);
    _mm256_maskstore_ps(c + r * ldc + 8, m1, c1[r]);
  }
}

#pragma GCC diagnostic pop

template <int MR>
void tile_avx2(const float* a, int64_t lda, const uint16_t* b, int64_t K2, const float* bias, float* c, int64_t ldc,
               int nvalid, bool relu) {
  for (int h = 0; h < 2 && nvalid > 16 * h; h++) {
    half_avx2<MR>(a, lda, b + 32 * h, K2, bias ? bias + 16 * h : nullptr, c + 16 * h, ldc,
                  std::min(16, nvalid - 16 * h), relu);
  }
}

using DotFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, const float*, float*, int64_t, int, bool);
using WideFn = void (*)(const float*, int64_t, const uint16_t*, int64_t, const float*, float*, int64_t, int, bool);

constexpr DotFn dot_tiles[] = {nullptr,     tile_dot<1>, tile_dot<2>, tile_dot<3>, tile_dot<4>,
                               tile_dot<5>, tile_dot<6>, tile_dot<7>, tile_dot<8>};
constexpr WideFn wide512_tiles[] = {nullptr,         tile_wide512<1>, tile_wide512<2>, tile_wide512<3>, tile_wide512<4>,
                                    tile_wide512<5>, tile_wide512<6>, tile_wide512<7>, tile_wide512<8>};
constexpr WideFn avx2_tiles[] = {nullptr, tile_avx2<1>, tile_avx2<2>, tile_avx2<3>, tile_avx2<4>, tile_avx2<5>, tile_avx2<6>};

// y[M, N] = x[M, 2*K2] @ packed (+ bias), tiles panel-major as the FP32 kernel's; x is BF16 pairs
// (xb) for the Dot path, BF16 values as floats (xf) for the widening ones.
void gemm(Bf16Path path, const uint16_t* xb, const float* xf, int64_t M, int64_t K2, const uint16_t* packed,
          const float* bias, float* y, int64_t N, bool relu) {
  const int mr = path == Bf16Path::Avx2 ? 6 : 8;
  const WideFn* wide = path == Bf16Path::Avx512 ? wide512_tiles : avx2_tiles;
  const int64_t panels = (N + kNR - 1) / kNR, rblocks = (M + mr - 1) / mr;
  const int64_t tile_flops = std::max<int64_t>(1, 4 * mr * kNR * K2);
  const int64_t grain = std::max<int64_t>(1, kTaskFlops / tile_flops);
  at::parallel_for(0, panels * rblocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; t++) {
      const int64_t p = t / rblocks, r0 = (t % rblocks) * mr;
      const int rows = static_cast<int>(std::min<int64_t>(mr, M - r0));
      const int nvalid = static_cast<int>(std::min<int64_t>(kNR, N - p * kNR));
      const uint16_t* w = packed + p * K2 * 2 * kNR;
      const float* bp = bias ? bias + p * kNR : nullptr;
      if (path == Bf16Path::Dot) {
        dot_tiles[rows](xb + r0 * 2 * K2, 2 * K2, w, K2, bp, y + r0 * N + p * kNR, N, nvalid, relu);
      } else {
        wide[rows](xf + r0 * 2 * K2, 2 * K2, w, K2, bp, y + r0 * N + p * kNR, N, nvalid, relu);
      }
    }
  });
}

// Whether TORCHSPEED_MAX_ISA names a cap below AVX512_BF16 ("avx512": AVX-512F as Skylake-SP has
// it; "avx2", "scalar": below AVX-512 already).
bool bf16_capped() {
  const char* env = std::getenv("TORCHSPEED_MAX_ISA");
  if (env == nullptr) return false;
  const std::string v(env);
  return v == "avx512" || v == "AVX512";
}

Bf16Path detect_path() {
  switch (tsfast::cpu_isa()) {
    case tsfast::Isa::Avx512:
      return __builtin_cpu_supports("avx512bf16") && !bf16_capped() ? Bf16Path::Dot : Bf16Path::Avx512;
    case tsfast::Isa::Avx2: return Bf16Path::Avx2;
    default: return Bf16Path::Aten;
  }
}

bool plain(const at::Tensor& t, at::ScalarType st) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == st;
}

}  // namespace

tsimpl::Bf16Path tsimpl::bf16_path() {
  static const Bf16Path path = detect_path();
  return path;
}

tsimpl::Bf16Path tsimpl::bf16_resolve(Bf16Path want) {
  const Bf16Path have = bf16_path();
  if (static_cast<int>(want) > static_cast<int>(have)) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "this CPU lacks the instructions of the ",
                                want == Bf16Path::Dot      ? "AVX512_BF16"
                                : want == Bf16Path::Avx512 ? "AVX-512F"
                                                           : "AVX2+FMA",
                                " BF16 kernel");
  }
  return want;
}

at::Tensor tsimpl::pack_linear_weight_bf16(const at::Tensor& w) {
  const int64_t N = w.size(0), K = w.size(1), panels = (N + kNR - 1) / kNR, K2 = (K + 1) / 2;
  at::Tensor wf = w.to(at::kFloat).contiguous();
  at::Tensor packed = at::zeros({panels, K2, 2 * kNR}, wf.options().dtype(at::kBFloat16));
  const float* src = wf.data_ptr<float>();
  auto* dst = reinterpret_cast<uint16_t*>(packed.data_ptr<at::BFloat16>());
  for (int64_t n = 0; n < N; n++) {
    uint16_t* col = dst + (n / kNR) * K2 * 2 * kNR + 2 * (n % kNR);
    for (int64_t k = 0; k < K; k++) col[(k / 2) * 2 * kNR + k % 2] = to_bf16(src[n * K + k]);
  }
  return packed;
}

at::Tensor tsimpl::unpack_linear_weight_bf16(const at::Tensor& packed, int64_t n, int64_t k) {
  // [panels, K2, kNR, 2] -> [panels, kNR, K2, 2] -> [panels * kNR, 2 * K2]
  return packed.view({packed.size(0), packed.size(1), kNR, 2})
      .permute({0, 2, 1, 3})
      .reshape({packed.size(0) * kNR, 2 * packed.size(1)})
      .narrow(0, 0, n)
      .narrow(1, 0, k)
      .to(at::kFloat)
      .contiguous();
}

at::Tensor tsimpl::linear_bf16_with(Bf16Path path, const at::Tensor& x, const at::Tensor& packed,
                                    const c10::optional<at::Tensor>& bias, int64_t n, bool relu, bool any_rows) {
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == 2 * kNR && n >= 0 && packed.size(0) == (n + kNR - 1) / kNR &&
                  plain(packed, at::kBFloat16) && packed.is_contiguous(),
              "torchspeed::linear_packed: the BF16 packed weight [", packed.sizes(), "] does not hold ", n,
              " output features in panels of ", kNR, " pairs");
  const int64_t K2 = packed.size(1);
  const at::Tensor* b = bias.has_value() && bias->defined() ? &*bias : nullptr;
  const int64_t K = x.dim() >= 1 ? x.size(-1) : -1;
  bool ok = path != Bf16Path::Aten && plain(x, at::kFloat) && (K + 1) / 2 == K2 && K > 0 && no_grad(x);
  if (ok && b != nullptr) ok = plain(*b, at::kFloat) && b->dim() == 1 && b->size(0) == n && b->is_contiguous() && no_grad(*b);
  std::vector<int64_t> shape;
  int64_t M = 1;
  if (ok) {
    shape = x.sizes().vec();
    shape.back() = n;
    for (size_t i = 0; i + 1 < shape.size(); i++) M *= shape[i];
    ok = any_rows || M <= kMaxRows;
  }
  if (!ok) {
    // ATen's linear on the weight as packed (BF16 values in float), with its own errors for
    // arguments it refuses; a K that does not match the packing is ATen's shape error too.
    const int64_t kw = K >= 2 * K2 - 1 && K <= 2 * K2 ? K : 2 * K2;
    at::Tensor y = at::linear(x, unpack_linear_weight_bf16(packed, n, kw), bias);
    return relu ? at::relu(y) : y;
  }
  auto xc = x.expect_contiguous();
  at::Tensor y = at::empty(shape, x.options());
  if (M == 0 || n == 0) return y;
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  if (path == Bf16Path::Dot) {
    xb.resize(static_cast<size_t>(M * 2 * K2));
    round_rows(xc->data_ptr<float>(), K, M, K, K2, xb.data());
  } else {
    xf.resize(static_cast<size_t>(M * 2 * K2));
    round_rows_f32(xc->data_ptr<float>(), K, M, K, K2, xf.data());
  }
  gemm(path, xb.data(), xf.data(), M, K2, reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>()),
       b ? b->data_ptr<float>() : nullptr, y.data_ptr<float>(), n, relu);
  return y;
}
