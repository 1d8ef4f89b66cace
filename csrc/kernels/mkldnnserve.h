// torchspeed.MkldnnConstant and the ops that stand in for optimize_for_inference's unserializable
// prim:: nodes (mkldnnserve.cpp; built with TS_HAVE_MKLDNN_SERVE). Not part of the C ABI.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <cstdint>
#include <vector>

namespace tsimpl {

// A oneDNN-layout constant of an optimize_for_inference graph. Pickled as (dense, conv); loading
// rebuilds mkldnn on the loading CPU.
struct MkldnnConstant : torch::CustomClassHolder {
  at::Tensor dense;           // float32, plain layout
  std::vector<int64_t> conv;  // padding[2], stride[2], dilation[2], groups of the conv it is the weight of; or empty
  at::Tensor mkldnn;          // what the graph computes with
  static c10::intrusive_ptr<MkldnnConstant> make(at::Tensor dense, std::vector<int64_t> conv);
};

// Whether two MKLDNN tensors have the same oneDNN memory descriptor (dims, type and layout).
bool same_mkldnn_layout(const at::Tensor& a, const at::Tensor& b);

}  // namespace tsimpl
