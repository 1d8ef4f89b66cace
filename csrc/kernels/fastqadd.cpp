// Fast quantized add: torchspeed::add and torchspeed::add_relu, drop-in replacements for
// quantized::add and quantized::add_relu (Tensor + Tensor, per-tensor affine, same shape) that give
// ATen 1.13's tensors bit for bit, vectorized with AVX2 or AVX-512 and split across threads.
//
// Why: every residual block of a static INT8 ResNet ends in quantized::add_relu; with Debian's
// libtorch (no FBGEMM, ATen's AVX2 kernel) it is ~10% of resnet18/resnet50's INT8 forward.
//
// The contract is ATen's qadd_kernel (native/quantized/cpu/kernels/QuantizedOpKernels.cpp, 1.13),
// run by TensorIterator's cpu_kernel_vec over the flat buffers in at::parallel_for chunks of
// GRAIN_SIZE. Within each chunk ATen's vectorized_loop takes blocks of 2 * Vectorized<T>::size()
// elements (64 with its AVX2 kernel, 128 with its AVX-512 one) from the chunk's start through the
// "vector" arithmetic, and the rest of the chunk through the "scalar" one; they differ in the last
// bit, so both are reproduced, and where the remainder starts:
//   vector: d = fma(s, (float)q, s * -(float)z) per input; c = da + db; relu: max(c, 0) with NaN
//           kept (as all ones); t = min(c * inv, 2147483520.f) (NaN gives 2147483520);
//           r = cvtps_epi32(t) (nearest even; INT32_MIN below int32) + z_out, wrapping in int32;
//           q = r saturated to the type.
//   scalar: d = ((float)q - (float)z) * s per input; c = da + db; relu: c < 0 ? 0 : c; then ATen's
//           quantize_val (tsfast::quantize_one).
// ATen's DEFAULT kernel (no AVX2, or ATEN_CPU_CAPABILITY=default) is the scalar arithmetic
// throughout. Which of ATen's kernels runs is chosen as ATen 1.13 chooses it (aten_block below).
// This file is compiled with -ffp-contract=off: a fused multiply-add must appear only where ATen
// has one.
//
// Anything else (QNNPACK engine, qint32, shapes that differ and broadcast, inputs not both
// contiguous in the first one's suggested memory format, other qschemes, unusual scales or zero
// points, a libtorch other than 1.13 or one with FBGEMM) calls the ATen op itself.
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "fastq.h"
#include "ops.h"

using tsfast::aten_add;
using tsfast::Isa;

namespace {

constexpr float kInt32FloatMax = 2147483520.0f;  // ATen's int32_float_max_val: INT32_MAX - 127

struct AddParams {
  float sa, sb;  // input scales
  float za, zb;  // input zero points
  float pa, pb;  // sa * -za, sb * -zb: the vector arithmetic's premultiplied offsets
  float inv;     // 1.0f / output scale
  float zf;      // output zero point
  int32_t z;
};

// ---- the two arithmetics, one element at a time ----

template <typename Q, bool Relu>
inline Q add_scalar_one(Q a, Q b, const AddParams& p) {
  float da = (static_cast<float>(a) - p.za) * p.sa;
  float db = (static_cast<float>(b) - p.zb) * p.sb;
  float c = da + db;
  if (Relu) c = c < 0.0f ? 0.0f : c;  // std::max<float>(c, 0.0): NaN stays
  return tsfast::quantize_one<Q>(c, p.inv, p.zf);
}

// _mm*_cvtps_epi32 of a value already at most kInt32FloatMax (not NaN): nearest even (the
// default rounding, as std::nearbyint's), INT32_MIN below int32's range.
inline int32_t cvtps_epi32_one(float t) {
  float r = std::nearbyint(t);
  return r >= -2147483648.0f ? static_cast<int32_t>(r) : std::numeric_limits<int32_t>::min();
}

template <typename Q, bool Relu>
inline Q add_vector_one(Q a, Q b, const AddParams& p) {
  float da = std::fma(p.sa, static_cast<float>(a), p.pa);
  float db = std::fma(p.sb, static_cast<float>(b), p.pb);
  float c = da + db;
  if (Relu && !std::isnan(c)) c = c > 0.0f ? c : 0.0f;
  float t = c * p.inv;
  t = std::isnan(t) ? kInt32FloatMax : std::min(t, kInt32FloatMax);  // _mm*_min_ps(t, max)
  auto r = static_cast<int32_t>(static_cast<uint32_t>(cvtps_epi32_one(t)) + static_cast<uint32_t>(p.z));
  // Q is int8_t or uint8_t, a number here, never a character.
  // NOLINTNEXTLINE(bugprone-signed-char-misuse)
  constexpr int32_t qmin = std::numeric_limits<Q>::min(), qmax = std::numeric_limits<Q>::max();
  return static_cast<Q>(r < qmin ? qmin : (r > qmax ? qmax : r));
}

// ---- the vector arithmetic, vectorized ----

// GCC 12 warns inside its own AVX-512 headers (_mm512_set1_* start from an undefined vector).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Eight sums, quantized to int32s already clamped to Q's range.
template <typename Q, bool Relu>
__attribute__((target("avx2,fma"))) inline __m256i add8_avx2(const Q* a, const Q* b, const AddParams& p) {
  constexpr bool is_signed = std::numeric_limits<Q>::is_signed;
  __m128i ra = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a));
  __m128i rb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b));
  __m256 fa = _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(ra) : _mm256_cvtepu8_epi32(ra));
  __m256 fb = _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(rb) : _mm256_cvtepu8_epi32(rb));
  __m256 c = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(p.sa), fa, _mm256_set1_ps(p.pa)),
                           _mm256_fmadd_ps(_mm256_set1_ps(p.sb), fb, _mm256_set1_ps(p.pb)));
  if (Relu) {
    __m256 zero = _mm256_setzero_ps();
    c = _mm256_or_ps(_mm256_max_ps(c, zero), _mm256_cmp_ps(c, zero, _CMP_UNORD_Q));
  }
  __m256 t = _mm256_min_ps(_mm256_mul_ps(c, _mm256_set1_ps(p.inv)), _mm256_set1_ps(kInt32FloatMax));
  __m256i r = _mm256_add_epi32(_mm256_cvtps_epi32(t), _mm256_set1_epi32(p.z));
  r = _mm256_max_epi32(r, _mm256_set1_epi32(std::numeric_limits<Q>::min()));
  return _mm256_min_epi32(r, _mm256_set1_epi32(std::numeric_limits<Q>::max()));
}

template <typename Q, bool Relu>
__attribute__((target("avx2,fma"))) void add_vector_avx2(const Q* a, const Q* b, Q* out, int64_t n,
                                                         const AddParams& p) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i lo = _mm256_packs_epi32(add8_avx2<Q, Relu>(a + i, b + i, p), add8_avx2<Q, Relu>(a + i + 8, b + i + 8, p));
    __m256i hi = _mm256_packs_epi32(add8_avx2<Q, Relu>(a + i + 16, b + i + 16, p),
                                    add8_avx2<Q, Relu>(a + i + 24, b + i + 24, p));
    __m256i q = std::numeric_limits<Q>::is_signed ? _mm256_packs_epi16(lo, hi) : _mm256_packus_epi16(lo, hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permutevar8x32_epi32(q, order));
  }
  for (; i < n; i++) out[i] = add_vector_one<Q, Relu>(a[i], b[i], p);
}

template <typename Q, bool Relu>
__attribute__((target("avx512f"))) void add_vector_avx512(const Q* a, const Q* b, Q* out, int64_t n,
                                                          const AddParams& p) {
  constexpr bool is_signed = std::numeric_limits<Q>::is_signed;
  const __m512 sa = _mm512_set1_ps(p.sa), pa = _mm512_set1_ps(p.pa), sb = _mm512_set1_ps(p.sb),
               pb = _mm512_set1_ps(p.pb), inv = _mm512_set1_ps(p.inv), big = _mm512_set1_ps(kInt32FloatMax);
  const __m512 zero = _mm512_setzero_ps(), ones = _mm512_castsi512_ps(_mm512_set1_epi32(-1));
  const __m512i z = _mm512_set1_epi32(p.z), lo = _mm512_set1_epi32(std::numeric_limits<Q>::min()),
                hi = _mm512_set1_epi32(std::numeric_limits<Q>::max());
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i ra = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    __m128i rb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    __m512 fa = _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(ra) : _mm512_cvtepu8_epi32(ra));
    __m512 fb = _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(rb) : _mm512_cvtepu8_epi32(rb));
    __m512 c = _mm512_add_ps(_mm512_fmadd_ps(sa, fa, pa), _mm512_fmadd_ps(sb, fb, pb));
    if (Relu) c = _mm512_mask_mov_ps(_mm512_max_ps(c, zero), _mm512_cmp_ps_mask(c, zero, _CMP_UNORD_Q), ones);
    __m512 t = _mm512_min_ps(_mm512_mul_ps(c, inv), big);
    __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(t), z);
    r = _mm512_min_epi32(_mm512_max_epi32(r, lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(r));
  }
  for (; i < n; i++) out[i] = add_vector_one<Q, Relu>(a[i], b[i], p);
}

#pragma GCC diagnostic pop

// One of ATen's parallel chunks: the vector arithmetic over whole blocks from its start, the
// scalar one after (all of it when block is 0).
template <typename Q, bool Relu>
void add_chunk(Isa isa, const Q* a, const Q* b, Q* out, int64_t n, int64_t block, const AddParams& p) {
  int64_t nv = block > 0 ? n / block * block : 0;
  if (isa == Isa::Avx512) {
    add_vector_avx512<Q, Relu>(a, b, out, nv, p);
  } else if (isa == Isa::Avx2) {
    add_vector_avx2<Q, Relu>(a, b, out, nv, p);
  } else {
    for (int64_t i = 0; i < nv; i++) out[i] = add_vector_one<Q, Relu>(a[i], b[i], p);
  }
  for (int64_t i = nv; i < n; i++) out[i] = add_scalar_one<Q, Relu>(a[i], b[i], p);
}

// The block of ATen 1.13's qadd kernel (2 * Vectorized<T>::size(); 0 for its DEFAULT kernel,
// which is the scalar arithmetic throughout), chosen as its compute_cpu_capability does: the
// ATEN_CPU_CAPABILITY it honours, else AVX2 where the CPU has AVX2 and FMA (AVX-512 is opt-in
// in 1.13). -1: ATen would run a kernel this CPU lacks (ATEN_CPU_CAPABILITY=avx512 without
// AVX-512); leave that to ATen.
int64_t detect_aten_block() {
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && avx2;
  if (const char* env = std::getenv("ATEN_CPU_CAPABILITY")) {
    if (std::strcmp(env, "avx512") == 0) return avx512 ? 128 : -1;
    if (std::strcmp(env, "avx2") == 0) return avx2 ? 64 : -1;
    if (std::strcmp(env, "default") == 0) return 0;
  }
  return avx2 ? 64 : 0;
}

int64_t aten_block() {
  static const int64_t block = detect_aten_block();
  return block;
}


bool usable_scale(double scale) {
  auto f = static_cast<float>(scale);
  return scale > 0 && std::isnormal(f) && std::isfinite(1.0f / f);
}

template <typename Q>
bool in_range(int64_t zp) {
  return zp >= std::numeric_limits<Q>::min() && zp <= std::numeric_limits<Q>::max();
}

AddParams params(const at::Tensor& qa, const at::Tensor& qb, double scale, int64_t zero_point) {
  AddParams p{};
  p.sa = static_cast<float>(qa.q_scale());
  p.sb = static_cast<float>(qb.q_scale());
  p.za = static_cast<float>(qa.q_zero_point());
  p.zb = static_cast<float>(qb.q_zero_point());
  p.pa = p.sa * -p.za;
  p.pb = p.sb * -p.zb;
  p.inv = 1.0f / static_cast<float>(scale);
  p.zf = static_cast<float>(zero_point);
  p.z = static_cast<int32_t>(zero_point);
  return p;
}

template <typename Q, typename T>
at::Tensor add_typed(Isa isa, bool relu, int64_t block, const at::Tensor& qa, const at::Tensor& qb, double scale,
                     int64_t zero_point) {
  if (!in_range<Q>(qa.q_zero_point()) || !in_range<Q>(qb.q_zero_point()) || !in_range<Q>(zero_point)) {
    return aten_add(relu, qa, qb, scale, zero_point);
  }
  auto fmt = qa.suggest_memory_format();
  at::Tensor out = at::_empty_affine_quantized(qa.sizes(), qa.options(), scale, zero_point, fmt);
  AddParams p = params(qa, qb, scale, zero_point);
  const Q* a = reinterpret_cast<const Q*>(qa.data_ptr<T>());
  const Q* b = reinterpret_cast<const Q*>(qb.data_ptr<T>());
  Q* o = reinterpret_cast<Q*>(out.data_ptr<T>());
  // The same chunks as ATen's TensorIterator (serial up to GRAIN_SIZE), so that each chunk's
  // scalar remainder is where ATen's is.
  at::parallel_for(0, qa.numel(), at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
    if (relu) {
      add_chunk<Q, true>(isa, a + begin, b + begin, o + begin, end - begin, block, p);
    } else {
      add_chunk<Q, false>(isa, a + begin, b + begin, o + begin, end - begin, block, p);
    }
  });
  return out;
}

// Whether swapping quantized::add for torchspeed::add changes nothing but speed: libtorch 1.13
// (whose qadd_kernel this file reproduces) without FBGEMM (whose quantize_val rounds extreme
// values otherwise).
bool add_reproducible() {
#if TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR == 13
  return tsfast::aten_is_scalar();
#else
  return false;
#endif
}

}  // namespace

at::Tensor tsfast::aten_add(bool relu, const at::Tensor& qa, const at::Tensor& qb, double scale, int64_t zero_point) {
  static auto add = c10::Dispatcher::singleton()
                        .findSchemaOrThrow("quantized::add", "")
                        .typed<at::Tensor(at::Tensor, at::Tensor, double, int64_t)>();
  static auto add_relu = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("quantized::add_relu", "")
                             .typed<at::Tensor(at::Tensor, at::Tensor, double, int64_t)>();
  return (relu ? add_relu : add).call(qa, qb, scale, zero_point);
}

at::Tensor tsfast::add_with(Isa isa, bool relu, const at::Tensor& qa, const at::Tensor& qb, double scale,
                            int64_t zero_point) {
  int64_t block = aten_block();
  bool fast = add_reproducible() && block >= 0 && at::globalContext().qEngine() != at::QEngine::QNNPACK &&
              tsfast::plain_cpu(qa) && tsfast::plain_cpu(qb) && qa.is_quantized() && qb.is_quantized() &&
              qa.qscheme() == at::kPerTensorAffine && qb.qscheme() == at::kPerTensorAffine &&
              qa.scalar_type() == qb.scalar_type() && qa.sizes() == qb.sizes() && usable_scale(scale) &&
              usable_scale(qa.q_scale()) && usable_scale(qb.q_scale());
  if (fast) {
    auto fmt = qa.suggest_memory_format();
    fast = qa.is_contiguous(fmt) && qb.is_contiguous(fmt);
  }
  if (fast && qa.scalar_type() == at::kQUInt8) {
    return add_typed<uint8_t, c10::quint8>(isa, relu, block, qa, qb, scale, zero_point);
  }
  if (fast && qa.scalar_type() == at::kQInt8) {
    return add_typed<int8_t, c10::qint8>(isa, relu, block, qa, qb, scale, zero_point);
  }
  return aten_add(relu, qa, qb, scale, zero_point);
}

at::Tensor tsfast::fast_add(const at::Tensor& qa, const at::Tensor& qb, double scale, int64_t zero_point) {
  return add_with(tsfast::cpu_isa(), false, qa, qb, scale, zero_point);
}

at::Tensor tsfast::fast_add_relu(const at::Tensor& qa, const at::Tensor& qb, double scale, int64_t zero_point) {
  return add_with(tsfast::cpu_isa(), true, qa, qb, scale, zero_point);
}

void tsfast::register_qadd(torch::Library& m) {
  m.def("add(Tensor qa, Tensor qb, float scale, int zero_point) -> Tensor qc", &fast_add);
  m.def("add_relu(Tensor qa, Tensor qb, float scale, int zero_point) -> Tensor qc", &fast_add_relu);
}

bool tsfast::add_swappable() { return add_reproducible(); }

