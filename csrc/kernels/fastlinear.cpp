// Small-M FP32 linear with weights packed at load time: torchspeed::linear_packed (the graph pass
// that swaps it in for aten::linear and for the aten::matmul (+ aten::add bias) pair that
// optimize_for_inference leaves is passes/fastlinear.cpp).
//
// Why: transformer-sized linears ([16, 128] x [128, 384]) spend most of their time in BLAS call
// overhead and, with Debian's OpenBLAS on CPUs it does not know, in kernels for an older core
// (Haswell's on Zen 5: 60 GFLOP/s where the core does 200). A register-blocked kernel over a
// weight laid out once for it (column panels of kNR floats, zero-padded) runs at most of the
// core's FMA rate from the first call, for any BLAS.
//
// y = x @ W^T + b (then max(0, y) when relu): x float32 [..., K]; packed [ceil(N/kNR), K, kNR] with
// packed[p][k][j] = W[p*kNR + j][k] (0 past N). Accumulators start from the bias; the sum over k
// runs in order k = 0..K-1 in float FMA, so results differ from BLAS by rounding only. Anything
// the kernel does not cover (other dtypes or devices, autograd, shapes that do not match, M past
// kMaxRows where BLAS's cache blocking wins) goes to at::linear with the unpacked weight, which
// also gives ATen's own error for arguments it refuses.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include "fastlinear.h"
#include "fastq.h"
#include "ops.h"

namespace {

using tsimpl::plain_float;
using tsimpl::no_grad;

constexpr int64_t kNR = tsimpl::kLinearPanel;  // panel width: two zmm, four ymm
constexpr int64_t kMaxRows = 2048;   // rows of x past which at::linear runs instead (see README)
constexpr int64_t kTaskFlops = 1 << 21;  // FLOPs per parallel task: smaller GEMMs stay on one thread

// GCC 12 warns inside its own AVX-512 headers (_mm512_set1_* start from an undefined vector).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// One tile: MR rows of x times one panel (nvalid <= kNR columns valid), into MR rows of y.
template <int MR>
__attribute__((target("avx512f"))) void tile_avx512(const float* a, int64_t lda, const float* b, int64_t K,
                                                    const float* bias, float* c, int64_t ldc, int nvalid, bool relu) {
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
  for (int64_t k = 0; k < K; k++) {
    const __m512 w0 = _mm512_loadu_ps(b + k * kNR), w1 = _mm512_loadu_ps(b + k * kNR + 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      const __m512 x = _mm512_set1_ps(a[r * lda + k]);
      c0[r] = _mm512_fmadd_ps(x, w0, c0[r]);
      c1[r] = _mm512_fmadd_ps(x, w1, c1[r]);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    if (relu) {  // max(0, NaN) is NaN, as relu's
      c0[r] = _mm512_max_ps(zero, c0[r]);
      c1[r] = _mm512_max_ps(zero, c1[r]);
    }
    _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
  }
}

// AVX2: one half (16 columns, nvalid <= 16 valid) of a panel at a time.
template <int MR>
__attribute__((target("avx2,fma"))) void half_avx2(const float* a, int64_t lda, const float* b, int64_t K,
                                                   const float* bias, float* c, int64_t ldc, int nvalid, bool relu) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nvalid), lane);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nvalid - 8), lane);
  const __m256 i0 = bias ? _mm256_maskload_ps(bias, m0) : _mm256_setzero_ps();
  const __m256 i1 = bias ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
  __m256 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    c0[r] = i0;
    c1[r] = i1;
  }
  for (int64_t k = 0; k < K; k++) {
    const __m256 w0 = _mm256_loadu_ps(b + k * kNR), w1 = _mm256_loadu_ps(b + k * kNR + 8);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + k);
      c0[r] = _mm256_fmadd_ps(x, w0, c0[r]);
      c1[r] = _mm256_fmadd_ps(x, w1, c1[r]);
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
void tile_avx2(const float* a, int64_t lda, const float* b, int64_t K, const float* bias, float* c, int64_t ldc,
               int nvalid, bool relu) {
  for (int h = 0; h < 2 && nvalid > 16 * h; h++) {
    half_avx2<MR>(a, lda, b + 16 * h, K, bias ? bias + 16 * h : nullptr, c + 16 * h, ldc,
                  std::min(16, nvalid - 16 * h), relu);
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, const float*, float*, int64_t, int, bool);

// Kernel choice is fastq.h's (tsfast::Isa, detected once): Scalar there means no AVX2+FMA, where
// ATen's linear runs.
using tsfast::Isa;
using tsimpl::Bf16Path;

// The tile functions for 1..MR rows.
constexpr TileFn avx512_tiles[] = {nullptr,          tile_avx512<1>, tile_avx512<2>, tile_avx512<3>, tile_avx512<4>,
                                   tile_avx512<5>,   tile_avx512<6>, tile_avx512<7>, tile_avx512<8>};
constexpr TileFn avx2_tiles[] = {nullptr, tile_avx2<1>, tile_avx2<2>, tile_avx2<3>, tile_avx2<4>, tile_avx2<5>, tile_avx2<6>};

// y[M, N] = x[M, K] (rows lda apart) @ packed (+ bias), tiles panel-major so a panel stays in cache
// across the row blocks that use it.
void gemm(Isa isa, const float* x, int64_t lda, int64_t M, int64_t K, const float* packed, const float* bias, float* y,
          int64_t N, bool relu) {
  const int mr = isa == Isa::Avx512 ? 8 : 6;
  const TileFn* tiles = isa == Isa::Avx512 ? avx512_tiles : avx2_tiles;
  const int64_t panels = (N + kNR - 1) / kNR, rblocks = (M + mr - 1) / mr;
  const int64_t tile_flops = std::max<int64_t>(1, 2 * mr * kNR * K);
  const int64_t grain = std::max<int64_t>(1, kTaskFlops / tile_flops);
  at::parallel_for(0, panels * rblocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; t++) {
      const int64_t p = t / rblocks, r0 = (t % rblocks) * mr;
      const int rows = static_cast<int>(std::min<int64_t>(mr, M - r0));
      const int nvalid = static_cast<int>(std::min<int64_t>(kNR, N - p * kNR));
      tiles[rows](x + r0 * lda, lda, packed + p * K * kNR, K, bias ? bias + p * kNR : nullptr, y + r0 * N + p * kNR, N,
                  nvalid, relu);
    }
  });
}

}  // namespace

// W [N, K] (any strides) into panels.
at::Tensor tsimpl::pack_linear_weight(const at::Tensor& w) {
  const int64_t N = w.size(0), K = w.size(1), panels = (N + kNR - 1) / kNR;
  at::Tensor wf = w.to(at::kFloat).contiguous();
  at::Tensor packed = at::zeros({panels, K, kNR}, wf.options());
  const float* src = wf.data_ptr<float>();
  float* dst = packed.data_ptr<float>();
  for (int64_t n = 0; n < N; n++) {
    float* col = dst + (n / kNR) * K * kNR + n % kNR;
    for (int64_t k = 0; k < K; k++) col[k * kNR] = src[n * K + k];
  }
  return packed;
}

bool tsimpl::gemm_packed(const float* x, int64_t lda, int64_t M, int64_t K, const float* packed, const float* bias,
                         float* y, int64_t n, bool relu) {
  const Isa isa = tsfast::cpu_isa();
  if (isa == Isa::Scalar) return false;
  gemm(isa, x, lda, M, K, packed, bias, y, n, relu);
  return true;
}

namespace {

// The [N, K] weight back from its panels (the fallback's argument).
at::Tensor unpack_weight(const at::Tensor& packed, int64_t n) {
  return packed.permute({0, 2, 1}).reshape({-1, packed.size(1)}).narrow(0, 0, n).contiguous();
}

at::Tensor fallback(const at::Tensor& x, const at::Tensor& packed, const c10::optional<at::Tensor>& bias, int64_t n,
                    bool relu) {
  at::Tensor y = at::linear(x, unpack_weight(packed, n), bias);
  return relu ? at::relu(y) : y;
}

}  // namespace

at::Tensor tsimpl::linear_packed_with(Isa isa, const at::Tensor& x, const at::Tensor& packed,
                              const c10::optional<at::Tensor>& bias, int64_t n, bool relu, bool any_rows) {
  if (packed.defined() && packed.scalar_type() == at::kBFloat16) {
    const Bf16Path path = isa == Isa::Avx512 ? tsimpl::bf16_path() : isa == Isa::Avx2 ? Bf16Path::Avx2 : Bf16Path::Aten;
    return linear_bf16_with(path, x, packed, bias, n, relu, any_rows);
  }
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == kNR && n >= 0 && packed.size(0) == (n + kNR - 1) / kNR &&
                  plain_float(packed) && packed.is_contiguous(),
              "torchspeed::linear_packed: the packed weight [", packed.sizes(), "] does not hold ", n,
              " output features in panels of ", kNR);
  const int64_t K = packed.size(1);
  const at::Tensor* b = bias.has_value() && bias->defined() ? &*bias : nullptr;
  bool ok = isa != Isa::Scalar && plain_float(x) && x.dim() >= 1 && x.size(-1) == K && no_grad(x) && no_grad(packed);
  if (ok && b != nullptr) ok = plain_float(*b) && b->dim() == 1 && b->size(0) == n && b->is_contiguous() && no_grad(*b);
  std::vector<int64_t> shape;
  int64_t M = 1;
  if (ok) {
    shape = x.sizes().vec();
    shape.back() = n;
    for (size_t i = 0; i + 1 < shape.size(); i++) M *= shape[i];
    ok = any_rows || M <= kMaxRows;
  }
  if (!ok) return fallback(x, packed, bias, n, relu);
  auto xc = x.expect_contiguous();
  at::Tensor y = at::empty(shape, x.options());
  if (M == 0 || n == 0) return y;
  gemm(isa, xc->data_ptr<float>(), K, M, K, packed.data_ptr<float>(), b ? b->data_ptr<float>() : nullptr,
       y.data_ptr<float>(), n, relu);
  return y;
}

at::Tensor tsimpl::linear_packed(const at::Tensor& x, const at::Tensor& packed, const c10::optional<at::Tensor>& bias,
                                 int64_t n, bool relu) {
  return linear_packed_with(tsfast::cpu_isa(), x, packed, bias, n, relu, false);
}

void tsimpl::register_linear(torch::Library& m) {
  m.def("linear_packed(Tensor x, Tensor packed, Tensor? bias, int n, bool relu) -> Tensor", &tsimpl::linear_packed);
}
