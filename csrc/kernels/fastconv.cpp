// Small FP32 2-D (and 1-D) convolutions through torchspeed's GEMM: torchspeed::conv2d_gemm (the
// graph pass that swaps it in for aten::_convolution / aten::convolution / aten::conv2d /
// aten::conv1d with a constant weight, fusing a following relu, is passes/fastconv.cpp).
//
// Why: libtorch 1.13 runs a batch-1 float conv with a 3x3 kernel and fewer than 20480 input
// elements as thnn_conv2d (_slow_conv2d_forward: im2col, then OpenBLAS's sgemm with Haswell's
// kernels on Zen 5, and a per-call set-up cost that dominates at these sizes); the digits CNN
// spent half its time there. Here the conv is im2col into rows = output positions (N*OH*OW rows,
// K = kh*kw*IC in that order, channels innermost, so a channels-last input copies runs of kw*IC
// floats; an NCHW one is made channels-last first), built a block of rows at a time into a
// buffer that stays in cache, each block then multiplied by csrc/kernels/fastlinear.cpp's
// register-blocked kernel against the weight packed once at pass time as [OC, kh, kw, IC], bias
// and relu fused. The GEMM writes [N*OH*OW, OC], which is
// the output [N, OC, OH, OW] in channels-last memory: the op returns it with those strides (the
// next torchspeed conv reads it with no copy; ATen's pooling and elementwise ops have
// channels-last kernels). A 1x1 conv with stride 1 and no padding on a channels-last input needs
// no im2col: the input is the GEMM's left operand as it is.
//
// Anything it does not cover (autograd, other dtypes or devices, inputs that are not 4-D, shapes
// that do not match, more output positions than the limits below, a CPU without AVX2+FMA) goes to
// at::conv2d with the original weight (the op carries it beside the packed one), which gives
// ATen's bits and ATen's own error for arguments it refuses. The pass leaves convs deeper than
// kMaxK as they are.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "fastconvsmall.h"
#include "fastlinear.h"
#include "fastq.h"
#include "ops.h"

namespace {

using tsimpl::plain_float;
using tsimpl::no_grad;
using tsimpl::pair_of;

// Output positions (N*OH*OW) and depth (IC*kh*kw) past which ATen's convolution runs instead:
// below them this kernel beat ATen in BenchmarkConv2d (bindings/torch/fastconv_test.go; figures
// in docs/architecture.md), above them it lost or could not be told apart. Small convs only.
constexpr int64_t kMaxRows = 1024;
constexpr int64_t kMaxDirectRows = 1024;  // 1x1, stride 1, no padding, channels-last input: no im2col
constexpr int64_t kMaxK = tsimpl::kConvMaxDepth;
constexpr int64_t kBlockFloats = 1 << 13;  // im2col rows built at once: 32 KB
constexpr int64_t kTaskFlops = 1 << 21;    // FLOPs per parallel task, as csrc/kernels/fastlinear.cpp's

// Rows begin..end-1 of the im2col matrix into col ([end - begin, K]): row r = output position (n,
// oh, ow), column (i, j, c) = x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw], 0 outside; x is a
// 4-D float tensor whose channels are adjacent in memory (stride 1), any other strides.
void im2col(const at::Tensor& x, int64_t kh, int64_t kw, const int64_t s[2], const int64_t p[2], const int64_t d[2],
            int64_t OH, int64_t OW, int64_t begin, int64_t end, float* col) {
  const int64_t C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t sn = x.stride(0), sh = x.stride(2), sw = x.stride(3);
  const int64_t K = C * kh * kw;
  const float* src = x.data_ptr<float>();
  // Channels-last with dilation 1 in width: a kernel row's kw x C values are one run in memory.
  const bool runs = sw == C && d[1] == 1;
  {
    for (int64_t r = begin; r < end; r++) {
      const int64_t n = r / (OH * OW), oh = (r / OW) % OH, ow = r % OW;
      float* dst = col + (r - begin) * K;
      const int64_t iw0 = ow * s[1] - p[1];
      for (int64_t i = 0; i < kh; i++) {
        const int64_t ih = oh * s[0] - p[0] + i * d[0];
        if (runs && ih >= 0 && ih < H && iw0 >= 0 && iw0 + kw <= W) {
          std::memcpy(dst, src + n * sn + ih * sh + iw0 * sw, kw * C * sizeof(float));
          dst += kw * C;
          continue;
        }
        for (int64_t j = 0; j < kw; j++, dst += C) {
          const int64_t iw = ow * s[1] - p[1] + j * d[1];
          if (ih < 0 || ih >= H || iw < 0 || iw >= W) {
            std::memset(dst, 0, C * sizeof(float));
            continue;
          }
          std::memcpy(dst, src + n * sn + ih * sh + iw * sw, C * sizeof(float));
        }
      }
    }
  }
}

}  // namespace

at::Tensor tsimpl::conv2d_gemm_impl(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                            const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                            at::IntArrayRef dilation, bool relu, bool* fast) {
  constexpr int64_t kNR = tsimpl::kLinearPanel;
  TORCH_CHECK(weight.dim() == 4, "torchspeed::conv2d_gemm: the weight has ", weight.dim(), " dimensions, want 4");
  const int64_t oc = weight.size(0), kh = weight.size(2), kw = weight.size(3), IC = weight.size(1), K = IC * kh * kw;
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == kNR && packed.size(0) == (oc + kNR - 1) / kNR &&
                  packed.size(1) == K && plain_float(packed) && packed.is_contiguous(),
              "torchspeed::conv2d_gemm: the packed weight [", packed.sizes(), "] does not hold the weight [",
              weight.sizes(), "] in panels of ", kNR);
  const at::Tensor* b = bias.has_value() && bias->defined() ? &*bias : nullptr;
  int64_t s[2], p[2], d[2];
  bool ok = tsfast::cpu_isa() != tsfast::Isa::Scalar && plain_float(x) && x.dim() == 4 && x.size(1) == IC &&
            no_grad(x) && no_grad(packed) && no_grad(weight) && kh > 0 && kw > 0 && pair_of(stride, s) && pair_of(padding, p) && pair_of(dilation, d) &&
            s[0] > 0 && s[1] > 0 && d[0] > 0 && d[1] > 0 && p[0] >= 0 && p[1] >= 0 && K <= kMaxK && oc > 0;
  if (ok && b != nullptr) ok = plain_float(*b) && b->dim() == 1 && b->size(0) == oc && b->is_contiguous() && no_grad(*b);
  int64_t N = 0, OH = 0, OW = 0;
  if (ok) {
    N = x.size(0);
    OH = (x.size(2) + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1;
    OW = (x.size(3) + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
    ok = N > 0 && OH > 0 && OW > 0 && x.size(2) + 2 * p[0] >= d[0] * (kh - 1) + 1 &&
         x.size(3) + 2 * p[1] >= d[1] * (kw - 1) + 1 && K > 0;
  }
  const bool direct = ok && kh == 1 && kw == 1 && s[0] == 1 && s[1] == 1 && p[0] == 0 && p[1] == 0 &&
                      x.is_contiguous(at::MemoryFormat::ChannelsLast);
  if (ok) ok = N * OH * OW <= (direct ? kMaxDirectRows : kMaxRows);
  if (!ok) {
    *fast = false;
    at::Tensor y = at::conv2d(x, weight, bias, stride, padding, dilation, 1);
    return relu ? at::relu(y) : y;
  }
  // Tiny images: the direct kernel (fastconvsmall.cpp), no im2col, the same bits.
  if (at::Tensor yd; !direct && tsimpl::conv2d_direct(tsfast::cpu_isa(), x, weight, packed, b, s, p, d, relu, nullptr,
                                                      nullptr, &yd)) {
    *fast = true;
    return yd;
  }
  const int64_t rows = N * OH * OW;
  at::Tensor y = at::empty({N, oc, OH, OW}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  const float* bp = b ? b->data_ptr<float>() : nullptr;
  const float* pp = packed.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  if (direct) {
    *fast = tsimpl::gemm_packed(x.data_ptr<float>(), K, rows, K, pp, bp, yp, oc, relu);
  } else {
    // im2col copies runs of channels: an NCHW input (more than one channel) is made channels-last
    // first, in one vectorized pass, rather than gathered one float at a time.
    at::Tensor xin = x.stride(1) == 1 || IC == 1 ? x : x.contiguous(at::MemoryFormat::ChannelsLast);
    // Blocks of rows, each built into a buffer that stays in L1/L2 and multiplied at once.
    const int64_t mb = std::clamp<int64_t>(kBlockFloats / K / 8 * 8, 8, 512);
    const int64_t blocks = (rows + mb - 1) / mb;
    const int64_t grain = std::max<int64_t>(1, kTaskFlops / std::max<int64_t>(1, 2 * mb * K * oc));
    std::atomic<bool> ran{true};
    at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
      std::vector<float> buf(mb * K);
      for (int64_t blk = b0; blk < b1; blk++) {
        const int64_t r0 = blk * mb, r1 = std::min(rows, r0 + mb);
        im2col(xin, kh, kw, s, p, d, OH, OW, r0, r1, buf.data());
        if (!tsimpl::gemm_packed(buf.data(), K, r1 - r0, K, pp, bp, yp + r0 * oc, oc, relu)) ran = false;
      }
    });
    *fast = ran;
  }
  TORCH_INTERNAL_ASSERT(*fast, "torchspeed::conv2d_gemm: no GEMM kernel on this CPU");  // checked above
  return y;
}

// The panels conv2d_gemm reads, from a weight [OC, IC, kh, kw]: rows of K = kh*kw*IC, channels
// innermost (im2col's column order).
at::Tensor tsimpl::pack_conv_weight(const at::Tensor& w) {
  return tsimpl::pack_linear_weight(w.permute({0, 2, 3, 1}).reshape({w.size(0), -1}));
}

at::Tensor tsimpl::conv2d_gemm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                               const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef dilation, bool relu) {
  bool fast = false;
  return conv2d_gemm_impl(x, weight, packed, bias, stride, padding, dilation, relu, &fast);
}

// Depthwise convolutions (groups == C, one filter per channel): torchspeed::conv_dw.
//
// Why: libtorch 1.13 sends a small grouped float conv to oneDNN (or ATen's slow path), whose
// per-call set-up dwarfs the few thousand multiply-adds of a VAD's depthwise 1-D convs (Silero VAD
// v4: C 258/16/32/32, kernel 5, a handful of frames). Here it is a plain loop over output positions,
// channels innermost on a channels-last input (an NCHW one is made channels-last first), the taps
// packed once at pass time as [kh*kw, C] so each tap is one contiguous multiply-add over the
// channels, which the compiler vectorizes: one copy of the loop per instruction set, chosen at run
// time (TORCHSPEED_MAX_ISA caps it), a plain one without AVX2.
namespace {

// Output elements (N*OH*OW*C) past which ATen's convolution runs instead: the loop has no cache
// blocking, and oneDNN's depthwise kernels are built for large feature maps. Below it the loop beat
// ATen in BenchmarkConvDepthwise (bindings/torch/fastconv_test.go; figures in
// docs/architecture.md); larger sizes (mobilenet_v2's, 576 x 7 x 7 and up) were not measured and
// stay oneDNN's.
constexpr int64_t kMaxDwOutputs = 1 << 13;
constexpr int64_t kDwTaskMacs = 1 << 16;  // multiply-adds per parallel task

struct DwArgs {
  const float* x;
  int64_t sn, sh, sw;  // x's strides (channels adjacent)
  int64_t C, H, W, OH, OW, kh, kw;
  int64_t s[2], p[2], d[2];
  const float* taps;  // [kh*kw, C]
  const float* bias;  // [C] or null
  float* y;           // [N, OH, OW, C]
  bool relu;
};

// Output positions begin..end-1 (row r = (n, oh, ow)).
__attribute__((always_inline)) inline void dw_rows(const DwArgs& a, int64_t begin, int64_t end) {
  const int64_t C = a.C;
  for (int64_t r = begin; r < end; r++) {
    const int64_t n = r / (a.OH * a.OW), oh = (r / a.OW) % a.OH, ow = r % a.OW;
    float* __restrict__ out = a.y + r * C;
    if (a.bias != nullptr) {
      for (int64_t c = 0; c < C; c++) out[c] = a.bias[c];
    } else {
      for (int64_t c = 0; c < C; c++) out[c] = 0.0f;
    }
    for (int64_t i = 0; i < a.kh; i++) {
      const int64_t ih = oh * a.s[0] - a.p[0] + i * a.d[0];
      if (ih < 0 || ih >= a.H) continue;
      for (int64_t j = 0; j < a.kw; j++) {
        const int64_t iw = ow * a.s[1] - a.p[1] + j * a.d[1];
        if (iw < 0 || iw >= a.W) continue;
        const float* __restrict__ xp = a.x + n * a.sn + ih * a.sh + iw * a.sw;
        const float* __restrict__ wp = a.taps + (i * a.kw + j) * C;
        for (int64_t c = 0; c < C; c++) out[c] += wp[c] * xp[c];
      }
    }
    if (a.relu) {
      for (int64_t c = 0; c < C; c++) out[c] = out[c] > 0.0f ? out[c] : 0.0f;
    }
  }
}

__attribute__((target("avx512f,fma"))) void dw_rows_avx512(const DwArgs& a, int64_t b, int64_t e) { dw_rows(a, b, e); }
__attribute__((target("avx2,fma"))) void dw_rows_avx2(const DwArgs& a, int64_t b, int64_t e) { dw_rows(a, b, e); }
void dw_rows_plain(const DwArgs& a, int64_t b, int64_t e) { dw_rows(a, b, e); }

}  // namespace

at::Tensor tsimpl::pack_dw_weight(const at::Tensor& w) {
  return w.reshape({w.size(0), -1}).t().contiguous();
}

at::Tensor tsimpl::conv_dw_impl(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                                const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation, bool relu, bool* fast) {
  TORCH_CHECK(weight.dim() == 4 && weight.size(1) == 1 && weight.size(0) > 0,
              "torchspeed::conv_dw: the weight [", weight.sizes(), "] is not a depthwise [C, 1, kh, kw] one");
  const int64_t C = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  TORCH_CHECK(packed.dim() == 2 && packed.size(0) == kh * kw && packed.size(1) == C && plain_float(packed) &&
                  packed.is_contiguous(),
              "torchspeed::conv_dw: the packed taps [", packed.sizes(), "] do not hold the weight [", weight.sizes(),
              "]");
  const at::Tensor* b = bias.has_value() && bias->defined() ? &*bias : nullptr;
  int64_t s[2], p[2], d[2];
  bool ok = plain_float(x) && x.dim() == 4 && x.size(1) == C && no_grad(x) && no_grad(packed) && no_grad(weight) &&
            kh > 0 && kw > 0 && pair_of(stride, s) && pair_of(padding, p) && pair_of(dilation, d) && s[0] > 0 &&
            s[1] > 0 && d[0] > 0 && d[1] > 0 && p[0] >= 0 && p[1] >= 0;
  if (ok && b != nullptr) ok = plain_float(*b) && b->dim() == 1 && b->size(0) == C && b->is_contiguous() && no_grad(*b);
  int64_t N = 0, OH = 0, OW = 0;
  if (ok) {
    N = x.size(0);
    ok = N > 0 && x.size(2) + 2 * p[0] >= d[0] * (kh - 1) + 1 && x.size(3) + 2 * p[1] >= d[1] * (kw - 1) + 1;
  }
  if (ok) {
    OH = (x.size(2) + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1;
    OW = (x.size(3) + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
    ok = OH > 0 && OW > 0 && N * OH * OW * C <= kMaxDwOutputs;
  }
  if (fast != nullptr) *fast = ok;
  if (!ok) {
    at::Tensor y = at::conv2d(x, weight, bias, stride, padding, dilation, C);
    return relu ? at::relu(y) : y;
  }
  const at::Tensor xin = x.stride(1) == 1 || C == 1 ? x : x.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor y = at::empty({N, C, OH, OW}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  DwArgs a{xin.data_ptr<float>(), xin.stride(0), xin.stride(2), xin.stride(3), C, x.size(2), x.size(3), OH, OW, kh,
           kw, {s[0], s[1]}, {p[0], p[1]}, {d[0], d[1]}, packed.data_ptr<float>(),
           b != nullptr ? b->data_ptr<float>() : nullptr, y.data_ptr<float>(), relu};
  void (*run)(const DwArgs&, int64_t, int64_t) = dw_rows_plain;
  if (tsfast::cpu_isa() == tsfast::Isa::Avx512) run = dw_rows_avx512;
  if (tsfast::cpu_isa() == tsfast::Isa::Avx2) run = dw_rows_avx2;
  const int64_t rows = N * OH * OW;
  const int64_t grain = std::max<int64_t>(1, kDwTaskMacs / std::max<int64_t>(1, C * kh * kw));
  if (rows <= grain) {
    run(a, 0, rows);
  } else {
    at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) { run(a, r0, r1); });
  }
  return y;
}

at::Tensor tsimpl::conv_dw(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                           const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                           at::IntArrayRef dilation, bool relu) {
  return conv_dw_impl(x, weight, packed, bias, stride, padding, dilation, relu, nullptr);
}

void tsimpl::register_conv(torch::Library& m) {
  m.def(
      "conv2d_gemm(Tensor x, Tensor weight, Tensor packed, Tensor? bias, int[] stride, int[] padding, "
      "int[] dilation, bool relu) -> Tensor",
      &tsimpl::conv2d_gemm);
  m.def(
      "conv_dw(Tensor x, Tensor weight, Tensor packed, Tensor? bias, int[] stride, int[] padding, "
      "int[] dilation, bool relu) -> Tensor",
      &tsimpl::conv_dw);
}
