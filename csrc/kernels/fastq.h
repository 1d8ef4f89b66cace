// What fastqdq.cpp (quantize/dequantize) and fastqadd.cpp (quantized add) share and offer: the
// kernel choice (fastlinear.cpp's too), ATen's scalar quantize_val and the kernels' entry points.
// Not part of the C ABI.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

namespace tsfast {

constexpr float kTwo63 = 9223372036854775808.0f;  // 2^63: float-to-int64 overflows from here

// ATen's quantize_val without FBGEMM (AffineQuantizerBase.cpp, 1.13): inv = 1.0f / (float)scale;
// s = (float)zero_point + nearbyint(x * inv) in float; q = clamp((int64_t)s, qmin, qmax). x86's
// float-to-int64 conversion gives INT64_MIN for NaN and for |s| >= 2^63, so NaN, +inf and huge
// values become qmin.
template <typename Q>
inline Q quantize_one(float x, float inv, float zpf) {
  constexpr float qmin = static_cast<float>(std::numeric_limits<Q>::min());
  constexpr float qmax = static_cast<float>(std::numeric_limits<Q>::max());
  float s = zpf + std::nearbyint(x * inv);
  if (!(s < kTwo63)) return static_cast<Q>(qmin);  // NaN or overflow: INT64_MIN, clamped up
  return static_cast<Q>(s < qmin ? qmin : (s > qmax ? qmax : s));
}

// Kernel choice: Best is the widest instruction set this CPU has (checked once); the others
// (for tests and benchmarks of each path) must be available.
enum class Isa { Best = 1, Scalar = 2, Avx2 = 3, Avx512 = 4 };

// TORCHSPEED_MAX_ISA ("scalar", "avx2", "avx512"; unset or anything else: no cap) caps the
// choice, as ONEDNN_MAX_CPU_ISA caps oneDNN's: the lower paths a fleet's older CPUs take can be
// run and tested on a newer one. It is read once, at the first kernel call.
inline Isa detect_isa() {
  __builtin_cpu_init();
  Isa have = Isa::Scalar;
  if (__builtin_cpu_supports("avx512f")) {
    have = Isa::Avx512;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    have = Isa::Avx2;
  }
  Isa cap = Isa::Avx512;
  if (const char* env = std::getenv("TORCHSPEED_MAX_ISA")) {
    const std::string v(env);
    if (v == "scalar" || v == "SCALAR" || v == "default") cap = Isa::Scalar;
    if (v == "avx2" || v == "AVX2") cap = Isa::Avx2;
  }
  return static_cast<int>(have) > static_cast<int>(cap) ? cap : have;
}

inline Isa cpu_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

inline Isa resolve(Isa want) {
  Isa have = cpu_isa();
  if (want == Isa::Best) return have;
  if (static_cast<int>(want) > static_cast<int>(have))
    // NotImplementedError: the C ABI reports it as TS_CODE_UNSUPPORTED.
    TORCH_CHECK_NOT_IMPLEMENTED(false, "this CPU lacks the instructions of the ",
                                want == Isa::Avx512 ? "AVX-512F" : "AVX2+FMA", " kernel");
  return want;
}

inline bool plain_cpu(const at::Tensor& t) { return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided; }

// Whether libtorch's own quantize/dequantize are the scalar loops torchspeed's ops reproduce:
// true without FBGEMM. With it, ATen calls FBGEMM's vectorized kernels, which are fast already and
// clamp and convert in another order (through int32, after a float clamp), so extreme values
// (NaN, infinities) need not come out as here: the pass leaves such graphs alone.
inline bool aten_is_scalar() {
  static const bool scalar = [] {
    for (auto e : at::globalContext().supportedQEngines()) {
      if (e == at::QEngine::FBGEMM) return false;
    }
    return true;
  }();
  return scalar;
}

// Whether torchspeed::add/add_relu give exactly quantized::add/add_relu's tensors with this
// libtorch (csrc/kernels/fastqadd.cpp): 1.13 without FBGEMM.
bool add_swappable();

// torchspeed::quantize_per_tensor and torchspeed::dequantize (fastqdq.cpp) on the kernel isa
// (resolved: not Best), and as the graph ops run them (the widest kernel this CPU has).
at::Tensor quantize_per_tensor_with(Isa isa, const at::Tensor& self, double scale, int64_t zero_point,
                                    at::ScalarType dtype);
at::Tensor dequantize_with(Isa isa, const at::Tensor& self);
at::Tensor fast_quantize_per_tensor(const at::Tensor& self, double scale, int64_t zero_point, at::ScalarType dtype);
at::Tensor fast_dequantize(const at::Tensor& self);

// torchspeed::add/add_relu (fastqadd.cpp) on the kernel isa, ATen's quantized::add/add_relu, and
// the graph ops.
at::Tensor add_with(Isa isa, bool relu, const at::Tensor& qa, const at::Tensor& qb, double scale, int64_t zero_point);
at::Tensor aten_add(bool relu, const at::Tensor& qa, const at::Tensor& qb, double scale, int64_t zero_point);
at::Tensor fast_add(const at::Tensor& qa, const at::Tensor& qb, double scale, int64_t zero_point);
at::Tensor fast_add_relu(const at::Tensor& qa, const at::Tensor& qb, double scale, int64_t zero_point);

}  // namespace tsfast
