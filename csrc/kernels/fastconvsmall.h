// What fastconvsmall.cpp offers fastconv.cpp, the passes and the tests: the direct convolution
// for tiny images and torchspeed::conv2d_pool. Not part of the C ABI.
#pragma once

#include <ATen/ATen.h>

#include "fastq.h"

namespace tsimpl {

// conv2d(x, weight, bias, stride s, padding p, dilation d) (then relu, then max_pool2d with
// kernel pool_k and stride pool_s, no padding, dilation 1, floor, when pool_k is not null) by the
// direct kernel on isa (Avx2 or Avx512), packed = pack_conv_weight(weight): *out is channels-last
// without the pool, NCHW-contiguous with it. Returns false, computing nothing, where the kernel
// does not apply (another isa, dtype or device, autograd, dilation, images or channels past its
// limits); the caller runs another path then.
bool conv2d_direct(tsfast::Isa isa, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                   const at::Tensor* bias, const int64_t s[2], const int64_t p[2], const int64_t d[2], bool relu,
                   const int64_t* pool_k, const int64_t* pool_s, at::Tensor* out);
// torchspeed::conv2d_pool on isa (Best: the widest this CPU has): max_pool2d(relu?(conv2d(...)),
// pool_kernel, pool_stride) (an empty pool_kernel: no pool, the convolution alone, channels-last).
// *fast says whether the direct kernel ran (false: conv2d_gemm's path, then ATen's max_pool2d).
at::Tensor conv2d_pool_impl(tsfast::Isa isa, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                            const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                            at::IntArrayRef dilation, bool relu, at::IntArrayRef pool_kernel,
                            at::IntArrayRef pool_stride, bool* fast);
// The graph op: conv2d_pool_impl on the widest kernel, a pool kernel required; flatten: the
// result flattened from dimension 1 (aten::flatten(y, 1)).
at::Tensor conv2d_pool(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& packed,
                       const c10::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                       at::IntArrayRef dilation, bool relu, at::IntArrayRef pool_kernel, at::IntArrayRef pool_stride,
                       bool flatten);

}  // namespace tsimpl
