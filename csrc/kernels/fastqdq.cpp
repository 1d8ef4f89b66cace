// Fast per-tensor quantize/dequantize: torchspeed::quantize_per_tensor and torchspeed::dequantize,
// drop-in replacements for aten::quantize_per_tensor and aten::dequantize.self that give the same
// tensors bit for bit (the graph pass that swaps them in is passes/fastqdq.cpp).
//
// Why: a libtorch built without FBGEMM (Debian's 1.13) quantizes and dequantizes per-tensor
// affine tensors with a scalar per-element loop on one thread (quantize_val/dequantize_val), 10-40
// times slower than a copy. Every static INT8 model quantizes its input, and every FP32 island
// the accuracy fallback keeps is a dequantize + quantize pair.
//
// The contract is ATen's non-FBGEMM arithmetic (AffineQuantizerBase.cpp, 1.13):
//   quantize:   inv = 1.0f / (float)scale; s = (float)zero_point + nearbyint(x * inv) in float;
//               q = clamp((int64_t)s, qmin, qmax). x86's float-to-int64 conversion gives INT64_MIN
//               for NaN and for |s| >= 2^63, so NaN, +inf and huge values become qmin.
//   dequantize: x = (float)scale * (float)(q - (int32_t)zero_point).
// The output has the input's suggested memory format, as PerTensorAffineQuantizer's does. Anything
// the fast path does not cover (other dtypes, non-CPU tensors, other qschemes, unusual scales or
// zero points) calls the ATen op itself.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "fastq.h"
#include "ops.h"

using tsfast::cpu_isa;
using tsfast::Isa;
using tsfast::plain_cpu;
using tsfast::quantize_one;
using tsfast::kTwo63;

namespace {

// ---- kernels: scalar reference, AVX2, AVX-512F; all give the same bytes ----

// GCC 12 warns inside its own AVX-512 headers (_mm512_set1_* start from an undefined vector).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

template <typename Q>
void quantize_scalar(const float* src, Q* dst, int64_t n, float inv, float zpf) {
  for (int64_t i = 0; i < n; i++) dst[i] = quantize_one<Q>(src[i], inv, zpf);
}

// Eight floats to int32s already clamped to Q's range (NaN and overflow to its minimum).
__attribute__((target("avx2"))) inline __m256i quantize8_avx2(const float* p, __m256 inv, __m256 zp, __m256 lo,
                                                              __m256 hi) {
  __m256 s = _mm256_add_ps(zp, _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(p), inv),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  __m256 bad = _mm256_cmp_ps(s, _mm256_set1_ps(kTwo63), _CMP_NLT_UQ);  // NaN or >= 2^63
  __m256 c = _mm256_min_ps(_mm256_max_ps(s, lo), hi);
  return _mm256_cvttps_epi32(_mm256_blendv_ps(c, lo, bad));
}

template <typename Q>
__attribute__((target("avx2"))) void quantize_avx2(const float* src, Q* dst, int64_t n, float inv, float zpf) {
  constexpr bool is_signed = std::numeric_limits<Q>::is_signed;
  const __m256 vinv = _mm256_set1_ps(inv), vzp = _mm256_set1_ps(zpf);
  const __m256 lo = _mm256_set1_ps(static_cast<float>(std::numeric_limits<Q>::min()));
  const __m256 hi = _mm256_set1_ps(static_cast<float>(std::numeric_limits<Q>::max()));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  auto step = [&](const float* p) __attribute__((target("avx2"))) { return quantize8_avx2(p, vinv, vzp, lo, hi); };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a = _mm256_packs_epi32(step(src + i), step(src + i + 8));
    __m256i b = _mm256_packs_epi32(step(src + i + 16), step(src + i + 24));
    __m256i c = is_signed ? _mm256_packs_epi16(a, b) : _mm256_packus_epi16(a, b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_permutevar8x32_epi32(c, order));
  }
  quantize_scalar<Q>(src + i, dst + i, n - i, inv, zpf);
}

template <typename Q>
__attribute__((target("avx512f"))) void quantize_avx512(const float* src, Q* dst, int64_t n, float inv,
                                                        float zpf) {
  const __m512 vinv = _mm512_set1_ps(inv), vzp = _mm512_set1_ps(zpf), big = _mm512_set1_ps(kTwo63);
  const __m512 lo = _mm512_set1_ps(static_cast<float>(std::numeric_limits<Q>::min()));
  const __m512 hi = _mm512_set1_ps(static_cast<float>(std::numeric_limits<Q>::max()));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 s = _mm512_add_ps(vzp, _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(src + i), vinv),
                                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __mmask16 bad = _mm512_cmp_ps_mask(s, big, _CMP_NLT_UQ);
    __m512 c = _mm512_mask_mov_ps(_mm512_min_ps(_mm512_max_ps(s, lo), hi), bad, lo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(c)));
  }
  quantize_scalar<Q>(src + i, dst + i, n - i, inv, zpf);
}

template <typename Q>
void dequantize_scalar(const Q* src, float* dst, int64_t n, float scale, int32_t zp) {
  for (int64_t i = 0; i < n; i++) dst[i] = scale * static_cast<float>(static_cast<int32_t>(src[i]) - zp);
}

template <typename Q>
__attribute__((target("avx2"))) void dequantize_avx2(const Q* src, float* dst, int64_t n, float scale, int32_t zp) {
  const __m256 vs = _mm256_set1_ps(scale);
  const __m256i vzp = _mm256_set1_epi32(zp);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i));
    __m256i w = std::numeric_limits<Q>::is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_sub_epi32(w, vzp))));
  }
  dequantize_scalar<Q>(src + i, dst + i, n - i, scale, zp);
}

template <typename Q>
__attribute__((target("avx512f"))) void dequantize_avx512(const Q* src, float* dst, int64_t n, float scale,
                                                          int32_t zp) {
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i vzp = _mm512_set1_epi32(zp);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m512i w = std::numeric_limits<Q>::is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
    _mm512_storeu_ps(dst + i, _mm512_mul_ps(vs, _mm512_cvtepi32_ps(_mm512_sub_epi32(w, vzp))));
  }
  dequantize_scalar<Q>(src + i, dst + i, n - i, scale, zp);
}

#pragma GCC diagnostic pop

// Elements per parallel chunk: tensors up to this size stay on the calling thread.
constexpr int64_t kGrain = 64 * 1024;

template <typename Q>
void quantize_range(Isa isa, const float* src, Q* dst, int64_t n, float inv, float zpf) {
  at::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    if (isa == Isa::Avx512) {
      quantize_avx512<Q>(src + b, dst + b, e - b, inv, zpf);
    } else if (isa == Isa::Avx2) {
      quantize_avx2<Q>(src + b, dst + b, e - b, inv, zpf);
    } else {
      quantize_scalar<Q>(src + b, dst + b, e - b, inv, zpf);
    }
  });
}

template <typename Q>
void dequantize_range(Isa isa, const Q* src, float* dst, int64_t n, float scale, int32_t zp) {
  at::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    if (isa == Isa::Avx512) {
      dequantize_avx512<Q>(src + b, dst + b, e - b, scale, zp);
    } else if (isa == Isa::Avx2) {
      dequantize_avx2<Q>(src + b, dst + b, e - b, scale, zp);
    } else {
      dequantize_scalar<Q>(src + b, dst + b, e - b, scale, zp);
    }
  });
}

}  // namespace

at::Tensor tsfast::quantize_per_tensor_with(Isa isa, const at::Tensor& self, double scale, int64_t zero_point,
                                    at::ScalarType dtype) {
  bool u8 = dtype == at::kQUInt8, i8 = dtype == at::kQInt8;
  float fscale = static_cast<float>(scale);
  float inv = 1.0f / fscale;
  int64_t qmin = u8 ? 0 : -128, qmax = u8 ? 255 : 127;
  // Fast path only where ATen would succeed and the float arithmetic above is all it does.
  if (!(u8 || i8) || !plain_cpu(self) || self.scalar_type() != at::kFloat || !(scale > 0) || !std::isnormal(fscale) ||
      !std::isfinite(inv) || zero_point < qmin || zero_point > qmax) {
    return at::quantize_per_tensor(self, scale, zero_point, dtype);
  }
  auto fmt = self.suggest_memory_format();
  auto src = self.expect_contiguous(fmt);
  at::Tensor out = at::_empty_affine_quantized(self.sizes(), self.options().dtype(dtype), scale, zero_point, fmt);
  const float* s = src->data_ptr<float>();
  float zpf = static_cast<float>(zero_point);
  if (u8) {
    quantize_range<uint8_t>(isa, s, reinterpret_cast<uint8_t*>(out.data_ptr<c10::quint8>()), self.numel(), inv, zpf);
  } else {
    quantize_range<int8_t>(isa, s, reinterpret_cast<int8_t*>(out.data_ptr<c10::qint8>()), self.numel(), inv, zpf);
  }
  return out;
}

at::Tensor tsfast::dequantize_with(Isa isa, const at::Tensor& self) {
  if (!plain_cpu(self) || !self.is_quantized() || self.qscheme() != at::kPerTensorAffine ||
      (self.scalar_type() != at::kQUInt8 && self.scalar_type() != at::kQInt8)) {
    return at::dequantize(self);
  }
  auto fmt = self.suggest_memory_format();
  auto src = self.expect_contiguous(fmt);
  at::Tensor out = at::empty(self.sizes(), self.options().dtype(at::kFloat).memory_format(fmt));
  float scale = static_cast<float>(self.q_scale());
  auto zp = static_cast<int32_t>(self.q_zero_point());
  float* d = out.data_ptr<float>();
  // The branches differ in the element type (uint8_t, int8_t), which clang-tidy 14's branch-clone
  // does not compare.
  // NOLINTNEXTLINE(bugprone-branch-clone)
  if (self.scalar_type() == at::kQUInt8) {
    dequantize_range<uint8_t>(isa, reinterpret_cast<const uint8_t*>(src->data_ptr<c10::quint8>()), d, self.numel(), scale,
                              zp);
  } else {
    dequantize_range<int8_t>(isa, reinterpret_cast<const int8_t*>(src->data_ptr<c10::qint8>()), d, self.numel(), scale,
                             zp);
  }
  return out;
}

at::Tensor tsfast::fast_quantize_per_tensor(const at::Tensor& self, double scale, int64_t zero_point,
                                            at::ScalarType dtype) {
  return quantize_per_tensor_with(cpu_isa(), self, scale, zero_point, dtype);
}

at::Tensor tsfast::fast_dequantize(const at::Tensor& self) { return dequantize_with(cpu_isa(), self); }

void tsfast::register_qdq(torch::Library& m) {
  m.def("quantize_per_tensor(Tensor self, float scale, int zero_point, ScalarType dtype) -> Tensor",
        &fast_quantize_per_tensor);
  m.def("dequantize(Tensor self) -> Tensor", &fast_dequantize);
}
