// Fused quantized convolution + residual add: torchspeed::conv2d_add, the u8 result of
// quantized::add[_relu](quantized::conv2d(qx, w, s_c, z_c), residual, scale, zero_point) as ONE
// oneDNN convolution whose sum post-op accumulates into the residual's own buffer.
//
// Why: every residual block of a static INT8 ResNet ends in a quantized::conv2d whose u8 output is
// read once, by a quantized::add_relu that reads the residual and writes a third tensor. The
// convolution can write the sum itself (as PyTorch 2.x's x86 backend, IPEX and Intel Neural
// Compressor do): no add pass, no round trip of the conv's output through u8.
//
// oneDNN 2.x int8 arithmetic, in units of the add's output quanta:
//   acc = op_scale[c] * (sum((x - z_x) * w) + bias[c] / (s_x * s_w[c]))  op_scale = s_x * s_w[c] / scale
//   acc += (s_r / scale) * (r - z_r)                                     (sum post-op)
//   acc = max(acc, 0) when relu                                          (eltwise post-op)
//   out = saturate_u8(round(acc + zero_point))                           (dst zero point)
// The result is not ATen's bit for bit: the unfused pair rounds (and saturates) the conv's output
// to u8 at (s_c, z_c) first. The fused value is the closer one to the float computation.
//
// Built only against libtorch 1.13 with oneDNN 2.x headers (ideep, dnnl): PackedConvWeightsOnednn's
// layout and oneDNN 2's attribute API are what this file uses. Everything it does not cover (packed
// params of another engine, transposed or 3-D convs, inputs or residuals that are not per-tensor
// quint8, a residual whose shape or layout is not the output's) computes ATen's unfused pair.
#include <ATen/Parallel.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/native/quantized/cpu/OnednnUtils.h>
#include <ATen/quantized/Quantizer.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/version.h>

#include <atomic>
#include <map>
#include <mutex>

#include "fastqconv.h"
#include "ops.h"

#if TORCH_VERSION_MAJOR != 1 || TORCH_VERSION_MINOR != 13 || DNNL_VERSION_MAJOR != 2
#error "csrc/kernels/fastqconv.cpp reads libtorch 1.13's onednn packed conv params and uses oneDNN 2's API: CMake builds it only there"
#endif

namespace {

using Packed = ConvPackedParamsBase<2>;
using Onednn = PackedConvWeightsOnednn<2>;

// What a primitive was built for: ATen's cache key plus the add's and the residual's qparams.
struct Key {
  double sx;
  int64_t zx;
  std::vector<int64_t> src_dims;
  double scale;
  int64_t zero_point;
  double sr;
  int64_t zr;
  bool relu;
  int threads;
  // The bias's version counter (-1: no bias): the primitive holds the bias pre-scaled, so an
  // in-place change of the packed weight's bias must rebuild it, as ATen re-reads its own.
  int64_t bias_version;
  bool operator==(const Key& o) const {
    return sx == o.sx && zx == o.zx && src_dims == o.src_dims && scale == o.scale && zero_point == o.zero_point &&
           sr == o.sr && zr == o.zr && relu == o.relu && threads == o.threads && bias_version == o.bias_version;
  }
};

// One built convolution: read-only once made, so calls on several threads share it (each call
// brings its own scratchpad).
struct Prim {
  Key key;
  bool usable = true;  // false: oneDNN refused this configuration; ATen's pair computes it
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  ideep::tensor weights;  // in pd's layout (shares the packed weight's buffer where that is it)
  dnnl::memory bias;      // f32, pre-scaled by 1 / (s_x * s_w[c]); empty without a bias
  dnnl::memory src_zp;    // s32 [1]
  std::vector<int64_t> dst_dims;
};

// Per packed-param object: its last primitive (ATen keeps one too) and the lock that guards it.
struct Entry {
  explicit Entry(const c10::intrusive_ptr<Packed>& w) : owner(w) {}
  c10::weak_intrusive_ptr<Packed> owner;
  std::mutex mu;
  std::shared_ptr<const Prim> prim;
};

std::mutex g_entries_mu;
std::map<const Packed*, std::shared_ptr<Entry>> g_entries;  // weak owners keep addresses unique

std::shared_ptr<Entry> entry_for(const c10::intrusive_ptr<Packed>& w) {
  std::lock_guard<std::mutex> lock(g_entries_mu);
  auto it = g_entries.find(w.get());
  if (it != g_entries.end() && !it->second->owner.expired()) return it->second;
  for (auto i = g_entries.begin(); i != g_entries.end();) {  // forget the objects that died
    i = i->second->owner.expired() ? g_entries.erase(i) : std::next(i);
  }
  auto e = std::make_shared<Entry>(w);
  g_entries[w.get()] = e;
  return e;
}

thread_local int64_t tl_fused_calls = 0;

std::shared_ptr<const Prim> build(const Onednn& w, const Key& key) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const auto& eng = ideep::engine::cpu_engine();
  const int64_t groups = w.groups();
  const auto kdims = w.orig_weight_.sizes().vec();  // [O, I/g, kh, kw]
  ideep::dims src_dims = key.src_dims;
  auto dst_dims = at::native::conv_output_size(src_dims, kdims, w.padding().vec(), w.stride().vec(),
                                              w.dilation().vec());
  ideep::dims wdims = kdims;
  if (groups > 1) wdims = {groups, kdims[0] / groups, kdims[1], kdims[2], kdims[3]};
  const int64_t oc = dst_dims[1];
  ideep::dims strides = w.stride().vec(), pad = w.padding().vec();
  ideep::dims dil = w.dilation().vec();
  for (auto& d : dil) d -= 1;  // oneDNN counts dilation from 0

  // Scales as ATen's conv computes them (oneDNN's are reciprocal to PyTorch's), for the add's output.
  const float src_scale = static_cast<float>(1.0 / key.sx);
  const float dst_scale = static_cast<float>(1.0 / key.scale);
  const ideep::scale_t& wscales = w.weight_->get_scale();
  std::vector<float> bias_scales(wscales.size()), op_scales(wscales.size());
  for (size_t i = 0; i < wscales.size(); i++) {
    bias_scales[i] = src_scale * wscales[i];
    op_scales[i] = dst_scale / bias_scales[i];
  }

  dnnl::primitive_attr attr;
  attr.set_output_scales(wscales.size() > 1 ? 2 : 0, op_scales);
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  if (key.zero_point != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {static_cast<int32_t>(key.zero_point)});
  dnnl::post_ops ops;
  ops.append_sum(static_cast<float>(key.sr / key.scale), static_cast<int32_t>(key.zr));
  if (key.relu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  attr.set_post_ops(ops);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

  dnnl::memory::desc src_md(src_dims, dt::u8, tag::nhwc), dst_md(dst_dims, dt::u8, tag::nhwc);
  // memory::dims is std::vector<dnnl_dim_t> (int64_t), as oc is: nothing narrows.
  // NOLINTNEXTLINE(bugprone-narrowing-conversions)
  dnnl::memory::desc w_md(wdims, dt::s8, tag::any), b_md({oc}, dt::f32, tag::x);
  const bool with_bias = w.orig_bias_.has_value() && w.orig_bias_->defined();
  auto desc = with_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                          dnnl::algorithm::convolution_direct, src_md, w_md, b_md,
                                                          dst_md, strides, dil, pad, pad)
                        : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                          dnnl::algorithm::convolution_direct, src_md, w_md, dst_md,
                                                          strides, dil, pad, pad);
  auto p = std::make_shared<Prim>();
  p->key = key;
  p->pd = dnnl::convolution_forward::primitive_desc(desc, attr, eng);
  p->prim = dnnl::convolution_forward(p->pd);
  // From the plain s8 weight ATen keeps ([O, I/g, kh, kw]): its prepacked copy is laid out for
  // ATen's primitive and oneDNN cannot always reorder one blocked layout into another (resnet50's
  // 1x1 convolutions), while a plain one reorders into any (computing the compensation the
  // layout asks for).
  at::Tensor wq = w.orig_weight_.contiguous();
  ideep::tensor plain({wdims, dt::s8, groups > 1 ? tag::goihw : tag::oihw}, wq.data_ptr());
  p->weights = ideep::tensor(p->pd.weights_desc());
  plain.reorder_to(p->weights);
  if (with_bias) {
    at::Tensor b = w.orig_bias_->to(at::kFloat).contiguous();
    p->bias = dnnl::memory(b_md, eng);
    auto* dst = static_cast<float*>(p->bias.get_data_handle());
    const float* src = b.data_ptr<float>();
    for (int64_t c = 0; c < oc; c++) dst[c] = src[c] * bias_scales[bias_scales.size() > 1 ? c : 0];
  }
  p->src_zp = dnnl::memory({{1}, dt::s32, tag::x}, eng);
  *static_cast<int32_t*>(p->src_zp.get_data_handle()) = static_cast<int32_t>(key.zx);
  p->dst_dims = dst_dims;
  return p;
}

at::Tensor aten_pair(const at::Tensor& qx, const c10::intrusive_ptr<Packed>& w, double conv_scale,
                     int64_t conv_zero_point, const at::Tensor& residual, double scale, int64_t zero_point, bool relu,
                     bool conv_first) {
  static const auto conv = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("quantized::conv2d", "new")
                               .typed<at::Tensor(at::Tensor, const c10::intrusive_ptr<Packed>&, double, int64_t)>();
  static const auto add =
      c10::Dispatcher::singleton().findSchemaOrThrow("quantized::add", "").typed<at::Tensor(at::Tensor, at::Tensor, double, int64_t)>();
  static const auto add_relu = c10::Dispatcher::singleton()
                                   .findSchemaOrThrow("quantized::add_relu", "")
                                   .typed<at::Tensor(at::Tensor, at::Tensor, double, int64_t)>();
  at::Tensor c = conv.call(qx, w, conv_scale, conv_zero_point);
  const auto& op = relu ? add_relu : add;
  return conv_first ? op.call(c, residual, scale, zero_point) : op.call(residual, c, scale, zero_point);
}

bool plain_quint8(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kQUInt8 &&
         t.qscheme() == at::kPerTensorAffine;
}

// The fused computation, or an empty tensor when it does not apply.
at::Tensor fused(const at::Tensor& qx, const c10::intrusive_ptr<Packed>& w, const at::Tensor& residual, double scale,
                 int64_t zero_point, bool relu) {
  const auto* ow = dynamic_cast<const Onednn*>(w.get());
  if (ow == nullptr || ow->transpose() || !ow->weight_ || qx.dim() != 4 || !plain_quint8(qx) ||
      !plain_quint8(residual) || residual.dim() != 4 || zero_point < 0 || zero_point > 255 ||
      residual.q_zero_point() < 0 || residual.q_zero_point() > 255 || !(scale > 0) || !(residual.q_scale() > 0) ||
      qx.requires_grad() || residual.requires_grad()) {
    return {};
  }
  if (!residual.is_contiguous(at::MemoryFormat::ChannelsLast)) return {};
  const auto& wsizes = ow->orig_weight_.sizes();
  if (wsizes.size() != 4 || qx.size(1) != wsizes[1] * ow->groups() || wsizes[0] % ow->groups() != 0) {
    return {};  // ATen's error, through ATen
  }
  auto x = qx.contiguous(at::MemoryFormat::ChannelsLast);
  if (x.storage().is_alias_of(residual.storage())) return {};  // the conv would read what it writes
  const bool has_bias = ow->orig_bias_.has_value() && ow->orig_bias_->defined();
  Key key{x.q_scale(),        x.q_zero_point(), x.sizes().vec(), scale, zero_point, residual.q_scale(),
          residual.q_zero_point(), relu, at::get_num_threads(), has_bias ? ow->orig_bias_->_version() : -1};
  auto e = entry_for(w);
  std::shared_ptr<const Prim> p;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    p = e->prim;
  }
  if (!p || !(p->key == key)) {
    try {
      p = build(*ow, key);
    } catch (const dnnl::error&) {  // remembered: the next calls go straight to ATen's pair
      auto bad = std::make_shared<Prim>();
      bad->key = key;
      bad->usable = false;
      p = bad;
    }
    std::lock_guard<std::mutex> lock(e->mu);
    e->prim = p;
  }
  if (!p->usable || !residual.sizes().equals(p->dst_dims)) return {};
  if (residual.numel() == 0) return {};
  const auto& eng = ideep::engine::cpu_engine();
  dnnl::memory src(p->pd.src_desc(), eng, x.data_ptr());
  dnnl::memory dst(p->pd.dst_desc(), eng, residual.data_ptr());
  at::Tensor scratch = at::empty({static_cast<int64_t>(p->pd.scratchpad_desc().get_size())}, at::kByte);
  dnnl::memory pad(p->pd.scratchpad_desc(), eng, scratch.data_ptr());
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src},
                                             {DNNL_ARG_WEIGHTS, p->weights},
                                             {DNNL_ARG_DST, dst},
                                             {DNNL_ARG_SCRATCHPAD, pad},
                                             {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, p->src_zp}};
  if (p->bias) args.emplace(DNNL_ARG_BIAS, p->bias);
  p->prim.execute(ideep::stream::default_stream(), args);
  tl_fused_calls++;
  // The same bytes under the add's qparams (double, as ATen's add gives them); the view keeps
  // the residual's storage alive.
  at::Tensor keep = residual;
  at::Tensor out = at::from_blob_quantized_per_tensor_affine(
      residual.data_ptr(), residual.sizes(), residual.strides(), [keep](void*) mutable { keep.reset(); },
      static_cast<float>(scale), zero_point, residual.options());
  at::set_quantizer_(out, at::make_per_tensor_affine_quantizer(scale, zero_point, at::kQUInt8));
  return out;
}

at::Tensor conv2d_add(const at::Tensor& qx, const c10::intrusive_ptr<Packed>& w, double conv_scale,
                      int64_t conv_zero_point, const at::Tensor& residual, double scale, int64_t zero_point, bool relu,
                      bool conv_first) {
  at::Tensor r = fused(qx, w, residual, scale, zero_point, relu);
  if (r.defined()) return r;
  return aten_pair(qx, w, conv_scale, conv_zero_point, residual, scale, zero_point, relu, conv_first);
}

}  // namespace

void tsimpl::register_conv_add(torch::Library& m) {
  m.def(
      "conv2d_add(Tensor qx, __torch__.torch.classes.quantized.Conv2dPackedParamsBase packed_weight, float conv_scale, "
      "int conv_zero_point, Tensor(a!) residual, float scale, int zero_point, bool relu, bool conv_first) -> Tensor(a!)",
      &conv2d_add);
}

at::Tensor tsimpl::conv2d_add_run(const at::Tensor& qx, const c10::IValue& packed, double conv_scale,
                                  int64_t conv_zero_point, const at::Tensor& residual, double scale, int64_t zero_point,
                                  bool relu, bool conv_first, bool* ran_fused) {
  auto w = packed.toCustomClass<Packed>();
  int64_t before = tl_fused_calls;
  at::Tensor r = conv2d_add(qx, w, conv_scale, conv_zero_point, residual, scale, zero_point, relu, conv_first);
  *ran_fused = tl_fused_calls != before;
  return r;
}
