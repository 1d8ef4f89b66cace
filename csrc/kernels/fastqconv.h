#pragma once
// The fused op of fastqconv.cpp (built only with TS_HAVE_CONV_ADD), as the test library's
// qconv2d_add runs it. Not part of the C ABI.
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace tsimpl {

// torchspeed::conv2d_add as the graph op runs it; packed holds a Conv2dPackedParamsBase.
// *ran_fused says whether the fused oneDNN convolution ran (false: ATen's conv + add computed it).
at::Tensor conv2d_add_run(const at::Tensor& qx, const c10::IValue& packed, double conv_scale, int64_t conv_zero_point,
                          const at::Tensor& residual, double scale, int64_t zero_point, bool relu, bool conv_first,
                          bool* ran_fused);

}  // namespace tsimpl
