// A fused LSTM for small recurrent models: torchspeed::lstm (the fast_linear pass swaps it in for
// aten::lstm with constant weights; passes/fastlstm.cpp).
//
// Why: a voice-activity detector such as Silero VAD v4 calls a two-layer LSTM of 64 units on one
// time step per 32 ms chunk. libtorch 1.13 runs each layer step as two addmm calls into OpenBLAS,
// a stack, an unbind, a chunk into four gates, three sigmoids, two tanhs and the elementwise
// updates: some twenty ATen ops with their dispatch and allocation for 32K multiply-adds. Here a
// layer step is one matrix-vector product over [x; h] against the layer's two weights packed once
// at pass time as one transposed matrix ([W_ih | W_hh]^T, the two biases added into one row), then
// one loop over the hidden units computing the four gates and the state update, all in buffers
// that stay in L1. One copy of each loop per instruction set, chosen at run time
// (TORCHSPEED_MAX_ISA caps it).
//
// The gates' sigmoid and tanh go through one exp polynomial (Cephes' expf: within 2 ulp), so
// results differ from ATen's by float reordering and rounding only. What it does not cover
// (autograd, other dtypes or devices, bidirectional or projected LSTMs, which the pass leaves
// alone, inputs whose shapes do not match the weights, a CPU without AVX2+FMA) goes to at::lstm
// with the original weights, which gives ATen's bits and ATen's own errors.
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "fastlinear.h"
#include "fastq.h"
#include "ops.h"

namespace {

using tsimpl::plain_float;
using tsimpl::no_grad;

constexpr int64_t kCols = 16;  // packed gate columns are padded to a multiple of this

int64_t padded(int64_t n) { return (n + kCols - 1) / kCols * kCols; }

// exp(x) for the gates (Cephes' expf), written so that the compiler vectorizes a loop calling it:
// no libm call (n = round(x / ln 2) by adding and subtracting 1.5 * 2^23, whose low bits are then
// n), the clamps as selects. x is clamped to [-87, 88] (where 2^n stays a normal float); NaN stays
// NaN.
__attribute__((always_inline)) inline float exp_gate(float x) {
  x = x > 88.0f ? 88.0f : x;
  x = x < -87.0f ? -87.0f : x;
  const float big = x * 1.44269504088896341f + 12582912.0f;
  const float n = big - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = (__builtin_bit_cast(int32_t, big) - 0x4B400000 + 127) << 23;
  return p * __builtin_bit_cast(float, e);
}

__attribute__((always_inline)) inline float sigmoid_gate(float x) { return 1.0f / (1.0f + exp_gate(-x)); }

__attribute__((always_inline)) inline float tanh_gate(float x) { return 1.0f - 2.0f / (1.0f + exp_gate(2.0f * x)); }

// One layer over the whole sequence, in time order, all batch rows at each step: a weight row
// is read once per step and used for every batch row while it is in L1 (the weights, 132 KB a
// layer for 64 units, stream from L2).
struct LayerArgs {
  const float* x;      // the layer's input: x[t * xt + b * xb + k], k < in
  int64_t xt, xb, in;  // strides and width
  const float* w;      // [in + H, cols] then the bias row [cols]
  int64_t H, cols;     // hidden size, 4H padded to kCols
  float* h;            // [B, H]: h0 in, h_n out
  float* c;            // [B, H]: c0 in, c_n out
  float* y;            // [T, B, H]: the layer's output
  int64_t T, B;
  float* v;      // scratch [B, in + H]
  float* gates;  // scratch [B, cols]
};

__attribute__((always_inline)) inline void layer_loop(const LayerArgs& a) {
  const int64_t H = a.H, cols = a.cols, K = a.in + H, B = a.B;
  const float* __restrict__ bias = a.w + K * cols;
  for (int64_t t = 0; t < a.T; t++) {
    for (int64_t b = 0; b < B; b++) {
      std::memcpy(a.v + b * K, a.x + t * a.xt + b * a.xb, a.in * sizeof(float));
      std::memcpy(a.v + b * K + a.in, a.h + b * H, H * sizeof(float));
      float* __restrict__ g = a.gates + b * cols;
      for (int64_t j = 0; j < cols; j++) g[j] = bias[j];
    }
    for (int64_t k = 0; k < K; k++) {
      const float* __restrict__ wk = a.w + k * cols;
      for (int64_t b = 0; b < B; b++) {
        const float vk = a.v[b * K + k];
        float* __restrict__ g = a.gates + b * cols;
        for (int64_t j = 0; j < cols; j++) g[j] += vk * wk[j];
      }
    }
    for (int64_t b = 0; b < B; b++) {
      // PyTorch's gate order: input, forget, cell, output.
      const float* __restrict__ gi = a.gates + b * cols;
      const float* __restrict__ gf = gi + H;
      const float* __restrict__ gc = gi + 2 * H;
      const float* __restrict__ go = gi + 3 * H;
      float* __restrict__ c = a.c + b * H;
      float* __restrict__ y = a.y + (t * B + b) * H;
      for (int64_t j = 0; j < H; j++) {
        const float cn = sigmoid_gate(gf[j]) * c[j] + sigmoid_gate(gi[j]) * tanh_gate(gc[j]);
        c[j] = cn;
        y[j] = sigmoid_gate(go[j]) * tanh_gate(cn);
      }
      std::memcpy(a.h + b * H, y, H * sizeof(float));
    }
  }
}

__attribute__((target("avx512f,fma"))) void layer_avx512(const LayerArgs& a) { layer_loop(a); }
__attribute__((target("avx2,fma"))) void layer_avx2(const LayerArgs& a) { layer_loop(a); }
void layer_plain(const LayerArgs& a) { layer_loop(a); }

// Checks params against aten::lstm's layout (per layer w_ih [4H, in], w_hh [4H, H], then b_ih and
// b_hh [4H] when has_biases; in is the input width for layer 0, H after) and returns H, or 0 when
// they are not float CPU tensors of that layout.
int64_t lstm_hidden(at::TensorList params, bool has_biases, int64_t layers, int64_t* in0) {
  const int64_t per = has_biases ? 4 : 2;
  if (layers < 1 || static_cast<int64_t>(params.size()) != per * layers) return 0;
  if (params[1].dim() != 2) return 0;
  const int64_t H = params[1].size(1);
  if (H < 1 || params[0].dim() != 2) return 0;
  *in0 = params[0].size(1);
  for (int64_t l = 0; l < layers; l++) {
    const at::Tensor* p = &params[l * per];
    const int64_t in = l == 0 ? *in0 : H;
    if (!plain_float(p[0]) || !plain_float(p[1]) || p[0].sizes() != at::IntArrayRef{4 * H, in} ||
        p[1].sizes() != at::IntArrayRef{4 * H, H}) {
      return 0;
    }
    for (int64_t i = 2; i < per; i++) {
      if (!plain_float(p[i]) || p[i].sizes() != at::IntArrayRef{4 * H}) return 0;
    }
  }
  return H;
}

int64_t packed_floats(int64_t in0, int64_t H, int64_t layers) {
  int64_t n = 0;
  for (int64_t l = 0; l < layers; l++) n += ((l == 0 ? in0 : H) + H + 1) * padded(4 * H);
  return n;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> aten_lstm(const at::Tensor& input, at::TensorList hx,
                                                         at::TensorList params, bool has_biases, int64_t layers,
                                                         bool batch_first) {
  // Only eval-mode, unidirectional LSTMs are swapped: dropout applies in training only.
  return at::lstm(input, hx, params, has_biases, layers, 0.0, false, false, batch_first);
}

}  // namespace

bool tsimpl::lstm_packable(at::TensorList params, bool has_biases, int64_t num_layers) {
  int64_t in0 = 0;
  return lstm_hidden(params, has_biases, num_layers, &in0) > 0;
}

at::Tensor tsimpl::pack_lstm_weights(at::TensorList params, bool has_biases, int64_t num_layers) {
  int64_t in0 = 0;
  const int64_t H = lstm_hidden(params, has_biases, num_layers, &in0);
  TORCH_CHECK(H > 0, "torchspeed::lstm: the weights are not a unidirectional LSTM's without projections");
  const int64_t cols = padded(4 * H), per = has_biases ? 4 : 2;
  at::Tensor packed = at::zeros({packed_floats(in0, H, num_layers)}, params[0].options());
  int64_t off = 0;
  for (int64_t l = 0; l < num_layers; l++) {
    const at::Tensor* p = &params[l * per];
    const int64_t in = l == 0 ? in0 : H;
    // [in + H + 1, cols]: W_ih^T, W_hh^T, then b_ih + b_hh.
    at::Tensor block = packed.narrow(0, off, (in + H + 1) * cols).view({in + H + 1, cols});
    block.narrow(0, 0, in).narrow(1, 0, 4 * H).copy_(p[0].t());
    block.narrow(0, in, H).narrow(1, 0, 4 * H).copy_(p[1].t());
    if (has_biases) block.select(0, in + H).narrow(0, 0, 4 * H).copy_(p[2] + p[3]);
    off += (in + H + 1) * cols;
  }
  return packed;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> tsimpl::lstm_packed_with(
    tsfast::Isa isa, const at::Tensor& input, at::TensorList hx, at::TensorList params, const at::Tensor& packed,
    bool has_biases, int64_t num_layers, bool batch_first, bool* fast) {
  int64_t in0 = 0;
  const int64_t H = lstm_hidden(params, has_biases, num_layers, &in0);
  bool ok = H > 0 && plain_float(packed) && packed.is_contiguous() &&
            packed.dim() == 1 && packed.numel() == packed_floats(in0, H, num_layers) && no_grad(packed) &&
            plain_float(input) && input.dim() == 3 && input.size(2) == in0 && no_grad(input) && hx.size() == 2;
  for (const auto& p : params) ok = ok && no_grad(p);
  int64_t T = 0, B = 0;
  if (ok) {
    T = input.size(batch_first ? 1 : 0);
    B = input.size(batch_first ? 0 : 1);
    for (const auto& s : hx) {
      ok = ok && plain_float(s) && no_grad(s) && s.sizes() == at::IntArrayRef{num_layers, B, H};
    }
    ok = ok && T > 0 && B > 0;
  }
  if (fast != nullptr) *fast = ok;
  if (!ok) return aten_lstm(input, hx, params, has_biases, num_layers, batch_first);
  // Time-major view of the input, rows of in0 contiguous floats.
  at::Tensor x = batch_first ? input.transpose(0, 1) : input;
  if (x.stride(2) != 1) x = x.contiguous();
  at::Tensor h = hx[0].contiguous().clone(), c = hx[1].contiguous().clone();
  const int64_t cols = padded(4 * H);
  const int64_t K = std::max(in0, H) + H;
  std::vector<float> scratch(static_cast<size_t>(B * (K + cols)));
  void (*run)(const LayerArgs&) = layer_plain;
  if (isa == tsfast::Isa::Avx512) run = layer_avx512;
  if (isa == tsfast::Isa::Avx2) run = layer_avx2;
  at::Tensor y, prev;
  const float* w = packed.data_ptr<float>();
  for (int64_t l = 0; l < num_layers; l++) {
    const int64_t in = l == 0 ? in0 : H;
    y = at::empty({T, B, H}, input.options());
    LayerArgs a{l == 0 ? x.data_ptr<float>() : prev.data_ptr<float>(),
                l == 0 ? x.stride(0) : B * H,
                l == 0 ? x.stride(1) : H,
                in,
                w,
                H,
                cols,
                h.data_ptr<float>() + l * B * H,
                c.data_ptr<float>() + l * B * H,
                y.data_ptr<float>(),
                T,
                B,
                scratch.data(),
                scratch.data() + B * K};
    run(a);
    w += (in + H + 1) * cols;
    prev = y;
  }
  // ATen returns the batch-first output as a transposed view too.
  return {batch_first ? y.transpose(0, 1) : y, h, c};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> tsimpl::lstm_packed(const at::Tensor& input, at::TensorList hx,
                                                                   at::TensorList params, const at::Tensor& packed,
                                                                   bool has_biases, int64_t num_layers,
                                                                   bool batch_first) {
  return lstm_packed_with(tsfast::cpu_isa(), input, hx, params, packed, has_biases, num_layers, batch_first, nullptr);
}

void tsimpl::register_lstm(torch::Library& m) {
  m.def(
      "lstm(Tensor input, Tensor[] hx, Tensor[] params, Tensor packed, bool has_biases, int num_layers, "
      "bool batch_first) -> (Tensor, Tensor, Tensor)",
      &tsimpl::lstm_packed);
}
