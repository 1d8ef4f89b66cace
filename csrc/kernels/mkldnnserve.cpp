// The oneDNN (MKLDNN-layout) graph optimize_for_inference makes of a CNN, in a form torch.jit.save
// writes and torch::jit::load reads back.
//
// Why: libtorch 1.13's optimize_for_inference keeps its weights as prim::ConstantMKLDNNTensor
// nodes (the tensor in a node attribute, which serialization drops: the saved graph does not load
// back) and its clamps and broadcasts as prim:: ops whose arguments are node attributes too. A
// server that loads the artifact plainly therefore ran the graph without the pass. These ops carry
// the same state as arguments: torchspeed.MkldnnConstant holds a weight as a plain float tensor
// when pickled and as the oneDNN tensor (reordered for a convolution as the pass did, on the CPU
// that loads it) once loaded, so the served graph runs the same oneDNN primitives as the pass's.
//
// Built only against libtorch 1.13 with the ideep headers, like fastqconv.cpp.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <ideep.hpp>
#include <torch/custom_class.h>
#include <torch/library.h>
#include <torch/version.h>

#include <tuple>
#include <vector>

#include "mkldnnserve.h"
#include "ops.h"

#if TORCH_VERSION_MAJOR != 1 || TORCH_VERSION_MINOR != 13
#error "csrc/kernels/mkldnnserve.cpp mirrors libtorch 1.13's optimize_for_inference ops: CMake builds it only there"
#endif

namespace at {
namespace native {
// libtorch_cpu exports it; its header (ATen/native/mkldnn/MKLDNNCommon.h) is not installed.
ideep::tensor& itensor_from_mkldnn(const at::Tensor& mkldnn_tensor);
}  // namespace native
}  // namespace at

namespace {

using tsimpl::MkldnnConstant;

// The oneDNN tensor a plain float tensor becomes: reordered as a convolution weight when conv
// holds (padding, stride, dilation, groups), as optimize_for_inference reorders it; else as is.
at::Tensor to_mkldnn(const at::Tensor& dense, const std::vector<int64_t>& conv) {
  TORCH_CHECK(dense.defined() && dense.device().is_cpu() && dense.layout() == at::kStrided &&
                  dense.scalar_type() == at::kFloat && dense.dim() > 0 && dense.numel() > 0,
              "torchspeed.MkldnnConstant: the saved tensor is not a non-empty float32 CPU tensor with dimensions (",
              dense.defined() ? dense.toString() : std::string("undefined"), "); re-export the model");
  at::Tensor m = dense.contiguous().to_mkldnn();
  if (conv.empty()) return m;
  TORCH_CHECK(conv.size() == 7 && dense.dim() == 4,
              "torchspeed.MkldnnConstant: a convolution weight needs a 4-D tensor and 7 parameters (got ", dense.dim(),
              "-D and ", conv.size(), "); re-export the model");
  for (size_t i = 0; i < conv.size(); ++i) {
    // padding may be 0; stride, dilation and groups are positive; all small.
    bool ok = i < 2 ? conv[i] >= 0 : conv[i] > 0;
    TORCH_CHECK(ok && conv[i] <= (1 << 16), "torchspeed.MkldnnConstant: convolution parameter ", i, " is ", conv[i],
                "; re-export the model");
  }
  TORCH_CHECK(dense.size(0) % conv[6] == 0, "torchspeed.MkldnnConstant: ", dense.size(0),
              " output channels do not split into ", conv[6], " groups; re-export the model");
  return at::mkldnn_reorder_conv2d_weight(m, {conv[0], conv[1]}, {conv[2], conv[3]}, {conv[4], conv[5]}, conv[6]);
}

at::Tensor mkldnn_constant(const c10::intrusive_ptr<MkldnnConstant>& c) { return c->mkldnn; }

// prim::BroadcastMKLDNNTensors: both operands at their broadcast size (oneDNN's add and mul
// take equal sizes).
std::tuple<at::Tensor, at::Tensor> mkldnn_broadcast(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes().equals(b.sizes())) return {a, b};
  auto size = at::infer_size(a.sizes(), b.sizes());
  auto fit = [&size](const at::Tensor& t) {
    if (t.sizes().equals(size)) return t;
    int64_t n = 1;
    for (auto s : size) n *= s;
    if (n == t.numel()) return t.reshape(size);
    return t.to_dense().expand(size).contiguous().to_mkldnn();
  };
  return {fit(a), fit(b)};
}

// prim::MKLDNNHardTanh_ / prim::MKLDNNClamp_: clamps a oneDNN tensor in place, over its whole
// physical buffer (blocked layouts pad channels; the padding is clamped too, as the prim ops do).
at::Tensor mkldnn_hardtanh_(at::Tensor self, double min_val, double max_val) {
  TORCH_CHECK(self.is_mkldnn() && self.scalar_type() == at::kFloat,
              "torchspeed::mkldnn_hardtanh_ takes a float32 MKLDNN tensor, not ", self.toString());
  // itensor_from_mkldnn asserts that autograd is out of the dispatch, as ATen's MKLDNN kernels have it.
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  ideep::tensor& it = at::native::itensor_from_mkldnn(self);
  auto n = static_cast<int64_t>(it.get_desc().get_size() / sizeof(float));
  at::Tensor flat = at::from_blob(it.get_data_handle(), {n}, self.options().layout(at::kStrided));
  flat.clamp_(min_val, max_val);
  return self;
}

}  // namespace

c10::intrusive_ptr<MkldnnConstant> tsimpl::MkldnnConstant::make(at::Tensor dense, std::vector<int64_t> conv) {
  auto c = c10::make_intrusive<MkldnnConstant>();
  c->mkldnn = to_mkldnn(dense, conv);
  c->dense = std::move(dense);
  c->conv = std::move(conv);
  return c;
}

bool tsimpl::same_mkldnn_layout(const at::Tensor& a, const at::Tensor& b) {
  if (!a.is_mkldnn() || !b.is_mkldnn()) return false;
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  return at::native::itensor_from_mkldnn(a).get_desc() == at::native::itensor_from_mkldnn(b).get_desc();
}

void tsimpl::register_mkldnn_serve(torch::Library& m) {
  using State = std::tuple<at::Tensor, std::vector<int64_t>>;
  m.class_<MkldnnConstant>("MkldnnConstant")
      .def_pickle([](const c10::intrusive_ptr<MkldnnConstant>& c) -> State { return {c->dense, c->conv}; },
                  [](State s) { return MkldnnConstant::make(std::get<0>(s), std::get<1>(s)); });
  m.def("mkldnn_constant(__torch__.torch.classes.torchspeed.MkldnnConstant c) -> Tensor", &mkldnn_constant);
  m.def("mkldnn_broadcast(Tensor(a) a, Tensor(b) b) -> (Tensor(a), Tensor(b))", &mkldnn_broadcast);
  m.def("mkldnn_hardtanh_(Tensor(a!) self, float min_val, float max_val) -> Tensor(a!)", &mkldnn_hardtanh_);
}
