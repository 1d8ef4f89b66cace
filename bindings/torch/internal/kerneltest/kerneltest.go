// Package kerneltest runs torchspeed's kernels one at a time, each against libtorch's own op, for
// the tests of bindings/torch: Go over the test-only entry points of csrc/testing/ts_testing.h,
// in libtorchspeed_testing.so, which is never installed. Nothing outside bindings/torch can
// import it, and the public bindings/torch API does not offer these calls.
//
// Unlike the public bindings, these calls do not keep OpenMP pools off the calling thread: run
// them on an inference thread (torch.Do, Thread.Do), as the tests do, where they are parallel.
package kerneltest

/*
#cgo !torchspeed_pkgconfig CFLAGS: -I${SRCDIR}/../../../../csrc/abi -I${SRCDIR}/../../../../csrc/testing
#cgo !torchspeed_pkgconfig LDFLAGS: -L${SRCDIR}/../../../../build/cmake -ltorchspeed_testing -ltorchspeed -Wl,-rpath,${SRCDIR}/../../../../build/cmake
#cgo torchspeed_pkgconfig CFLAGS: -I${SRCDIR}/../../../../csrc/abi -I${SRCDIR}/../../../../csrc/testing
#cgo torchspeed_pkgconfig LDFLAGS: -L${SRCDIR}/../../../../build/cmake -ltorchspeed_testing -Wl,-rpath,${SRCDIR}/../../../../build/cmake
#cgo torchspeed_pkgconfig pkg-config: torchspeed
#include <stdlib.h>
#include "ts_testing.h"
*/
import "C"

import (
	"unsafe"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/bindings/torch/internal/handle"
)

// Kernel chooses whose implementation a call runs: C's ts_kernel, value for value.
type Kernel int32

const (
	// ATen is libtorch's own op.
	ATen Kernel = C.TS_KERNEL_ATEN
	// Fast is torchspeed's op as its graphs run it: the widest kernel this CPU has, and ATen's op
	// for what it does not cover.
	Fast Kernel = C.TS_KERNEL_FAST
	// Scalar, AVX2 and AVX512 force one of torchspeed's kernels; a CPU without the instructions
	// gives a torch.Unsupported error. Linear and LinearPacked have no Scalar kernel.
	Scalar Kernel = C.TS_KERNEL_SCALAR
	AVX2   Kernel = C.TS_KERNEL_AVX2
	AVX512 Kernel = C.TS_KERNEL_AVX512
	// AVX512BF16 forces the BF16 GEMM's vdpbf16ps kernel (LinearBF16 only).
	AVX512BF16 Kernel = C.TS_KERNEL_AVX512BF16
)

// Forced says whether k forces one of torchspeed's instruction sets (Scalar, AVX2, AVX512,
// AVX512BF16).
func (k Kernel) Forced() bool { return k >= Scalar }

func tensors(ts ...*torch.Tensor) ([]*C.ts_tensor, func(), error) {
	args := make([]any, len(ts))
	for i, t := range ts {
		args[i] = t
	}
	ptrs, release, err := handle.Tensors(args...)
	if err != nil {
		return nil, nil, err
	}
	out := make([]*C.ts_tensor, len(ptrs))
	for i, p := range ptrs {
		out[i] = (*C.ts_tensor)(p)
	}
	return out, release, nil
}

// required refuses a nil tensor where one is needed, as the public bindings do.
func required(ts ...*torch.Tensor) error {
	for _, t := range ts {
		if t == nil {
			return torch.ErrNilHandle
		}
	}
	return nil
}

func statusErr(st *C.ts_status) error { return handle.StatusErr(unsafe.Pointer(st)) }

func wrap(t *C.ts_tensor) *torch.Tensor { return handle.WrapTensor(unsafe.Pointer(t)).(*torch.Tensor) }

func cBool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// QuantizePerTensor returns quantize_per_tensor(t, scale, zeroPoint, dtype) for dtype QUint8,
// QInt8 or QInt32, computed by kernel.
func QuantizePerTensor(t *torch.Tensor, scale float64, zeroPoint int64, dtype torch.DType, kernel Kernel) (*torch.Tensor, error) {
	if err := required(t); err != nil {
		return nil, err
	}
	c, release, err := tensors(t)
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_test_quantize_per_tensor(c[0], C.double(scale), C.int64_t(zeroPoint), C.int32_t(dtype), C.ts_kernel(kernel), &out)); err != nil {
		return nil, err
	}
	return wrap(out), nil
}

// Dequantize returns dequantize(t) computed by kernel.
func Dequantize(t *torch.Tensor, kernel Kernel) (*torch.Tensor, error) {
	if err := required(t); err != nil {
		return nil, err
	}
	c, release, err := tensors(t)
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_test_dequantize(c[0], C.ts_kernel(kernel), &out)); err != nil {
		return nil, err
	}
	return wrap(out), nil
}

// QAdd returns quantized::add(a, b, scale, zeroPoint), or quantized::add_relu when relu is true,
// computed by kernel (what torchspeed's does not cover goes to ATen's).
func QAdd(a, b *torch.Tensor, scale float64, zeroPoint int64, relu bool, kernel Kernel) (*torch.Tensor, error) {
	if err := required(a, b); err != nil {
		return nil, err
	}
	c, release, err := tensors(a, b)
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_test_qadd(c[0], c[1], C.double(scale), C.int64_t(zeroPoint), cBool(relu), C.ts_kernel(kernel), &out)); err != nil {
		return nil, err
	}
	return wrap(out), nil
}

// Linear returns linear(x, w, b) (b may be nil), then relu when relu is set, computed by kernel
// (ATen, Fast, AVX2 or AVX512; torchspeed's kernels pack w first, on every call, and a forced
// one runs at any row count).
func Linear(x, w, b *torch.Tensor, relu bool, kernel Kernel) (*torch.Tensor, error) {
	if err := required(x, w); err != nil {
		return nil, err
	}
	c, release, err := tensors(x, w, b)
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_test_linear(c[0], c[1], c[2], cBool(relu), C.ts_kernel(kernel), &out)); err != nil {
		return nil, err
	}
	return wrap(out), nil
}

// LinearBF16 returns linear(x, w, b) (b may be nil), then relu when relu is set, through the BF16
// GEMM on w packed as BF16 (on every call): kernel Fast (the graph op), Scalar (ATen's linear on
// the widened BF16 weight), AVX2, AVX512 (BF16 widened to float), AVX512BF16 (vdpbf16ps); ATen is
// FP32 at::linear on w as given.
func LinearBF16(x, w, b *torch.Tensor, relu bool, kernel Kernel) (*torch.Tensor, error) {
	if err := required(x, w); err != nil {
		return nil, err
	}
	c, release, err := tensors(x, w, b)
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_test_linear_bf16(c[0], c[1], c[2], cBool(relu), C.ts_kernel(kernel), &out)); err != nil {
		return nil, err
	}
	return wrap(out), nil
}

// PackLinear returns the panels torchspeed's linear reads, made from a 2-D float32 weight [N, K]
// (what FastLinear does once per linear).
func PackLinear(w *torch.Tensor) (*torch.Tensor, error) {
	if err := required(w); err != nil {
		return nil, err
	}
	c, release, err := tensors(w)
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_test_linear_pack(c[0], &out)); err != nil {
		return nil, err
	}
	return wrap(out), nil
}

// LinearPacked returns torchspeed::linear_packed(x, packed, b, n, relu) on a weight of n output
// features packed by PackLinear; kernel is Fast (the graph op, fallbacks and all), AVX2 or
// AVX512.
func LinearPacked(x, packed, b *torch.Tensor, n int, relu bool, kernel Kernel) (*torch.Tensor, error) {
	if err := required(x, packed); err != nil {
		return nil, err
	}
	c, release, err := tensors(x, packed, b)
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_test_linear_packed(c[0], c[1], c[2], C.int64_t(n), cBool(relu), C.ts_kernel(kernel), &out)); err != nil {
		return nil, err
	}
	return wrap(out), nil
}

// ConvParams are a 2-D convolution's stride, padding and dilation (height, width) and groups.
type ConvParams struct {
	Stride, Padding, Dilation [2]int64
	Groups                    int64
}

// Conv2d returns conv2d(x, w, b) with p (b may be nil), then relu when relu is set, computed by
// kernel: ATen, or Fast (torchspeed::conv2d_gemm as FastConv's graphs run it, w packed on every
// call; torchspeed::conv_dw for a depthwise w [C, 1, kh, kw] with groups C; ATen's convolution for
// what they do not cover and for other groups). fast says whether torchspeed's kernel ran.
func Conv2d(x, w, b *torch.Tensor, p ConvParams, relu bool, kernel Kernel) (y *torch.Tensor, fast bool, err error) {
	if err := required(x, w); err != nil {
		return nil, false, err
	}
	c, release, err := tensors(x, w, b)
	if err != nil {
		return nil, false, err
	}
	defer release()
	args := p.cArgs(relu)
	var out *C.ts_tensor
	var f C.int32_t
	if err := statusErr(C.ts_test_conv2d(c[0], c[1], c[2], &args, C.ts_kernel(kernel), &out, &f)); err != nil {
		return nil, false, err
	}
	return wrap(out), f != 0, nil
}

// cArgs is p with relu as the test shim takes them.
func (p ConvParams) cArgs(relu bool) C.ts_test_conv2d_args {
	args := C.ts_test_conv2d_args{groups: C.int64_t(p.Groups), relu: cBool(relu)}
	for i := 0; i < 2; i++ {
		args.stride[i] = C.int64_t(p.Stride[i])
		args.padding[i] = C.int64_t(p.Padding[i])
		args.dilation[i] = C.int64_t(p.Dilation[i])
	}
	return args
}

// PoolParams are a max_pool2d's kernel and stride (height, width); no padding, dilation 1, floor.
type PoolParams struct {
	Kernel, Stride [2]int64
}

// Conv2dPool returns max_pool2d(conv2d(x, w, b) with p, then relu when relu is set, pool) (pool
// nil: the convolution alone), groups 1, computed by kernel: ATen; Fast (torchspeed::conv2d_pool
// as FastConv's graphs run it, conv2d_gemm without a pool); AVX2 or AVX512 (the direct tiny-image
// kernel on that instruction set, falling back as the op does). w is packed on every call. fast
// says whether the direct kernel ran.
func Conv2dPool(x, w, b *torch.Tensor, p ConvParams, relu bool, pool *PoolParams, kernel Kernel) (y *torch.Tensor, fast bool, err error) {
	if err := required(x, w); err != nil {
		return nil, false, err
	}
	c, release, err := tensors(x, w, b)
	if err != nil {
		return nil, false, err
	}
	defer release()
	args := p.cArgs(relu)
	var pa *C.ts_test_pool_args
	if pool != nil {
		pa = &C.ts_test_pool_args{}
		for i := 0; i < 2; i++ {
			pa.kernel[i] = C.int64_t(pool.Kernel[i])
			pa.stride[i] = C.int64_t(pool.Stride[i])
		}
	}
	var out *C.ts_tensor
	var f C.int32_t
	if err := statusErr(C.ts_test_conv2d_pool(c[0], c[1], c[2], &args, pa, C.ts_kernel(kernel), &out, &f)); err != nil {
		return nil, false, err
	}
	return wrap(out), f != 0, nil
}

// QConvAddArgs describe one quantized conv + add for QConv2dAdd: the float weight
// [O, I/Groups, kh, kw] is quantized to qint8 (zero point 0) with WeightScales (one per output
// channel, or one for the tensor) and prepacked on the current quantized engine.
type QConvAddArgs struct {
	Weight, WeightScales, Bias *torch.Tensor // Bias may be nil
	Stride, Padding, Dilation  int64
	Groups                     int64
	ConvScale                  float64
	ConvZeroPoint              int64
	Scale                      float64 // the add's output
	ZeroPoint                  int64
	Relu                       bool
	ResidualFirst              bool // add(residual, conv) instead of add(conv, residual)
}

// QConv2dAdd returns quantized::add[_relu](quantized::conv2d(qx, W, ...), residual, ...) computed
// by ATen's two ops (kernel ATen) or by torchspeed::conv2d_add as FuseConvAdd's graphs run it
// (kernel Fast; residual itself is left unchanged: the op writes into a copy). fused says whether
// the fused oneDNN convolution ran (false where it fell back to ATen's pair).
func QConv2dAdd(qx, residual *torch.Tensor, a QConvAddArgs, kernel Kernel) (out *torch.Tensor, fused bool, err error) {
	if err := required(qx, residual, a.Weight, a.WeightScales); err != nil {
		return nil, false, err
	}
	c, release, err := tensors(qx, residual, a.Weight, a.WeightScales, a.Bias)
	if err != nil {
		return nil, false, err
	}
	defer release()
	args := C.ts_test_qconv_add_args{
		weight: c[2], wscales: c[3], bias: c[4],
		stride: C.int64_t(a.Stride), padding: C.int64_t(a.Padding), dilation: C.int64_t(a.Dilation), groups: C.int64_t(a.Groups),
		conv_scale: C.double(a.ConvScale), conv_zero_point: C.int64_t(a.ConvZeroPoint),
		scale: C.double(a.Scale), zero_point: C.int64_t(a.ZeroPoint),
		relu: cBool(a.Relu), residual_first: cBool(a.ResidualFirst),
	}
	var o *C.ts_tensor
	var f C.int32_t
	if err := statusErr(C.ts_test_qconv2d_add(c[0], c[1], &args, C.ts_kernel(kernel), &o, &f)); err != nil {
		return nil, false, err
	}
	return wrap(o), f != 0, nil
}

// LSTM returns aten::lstm(input, [h0, c0], params, has_biases, layers, dropout 0, eval,
// unidirectional, batchFirst) as (output, h_n, c_n), with params per layer w_ih, w_hh, b_ih, b_hh:
// ATen's op (kernel ATen), torchspeed::lstm as FastLinear's graphs run it (Fast), or one of its
// loops forced (Scalar, AVX2, AVX512). fast says whether torchspeed's loop ran.
func LSTM(input, h0, c0 *torch.Tensor, params []*torch.Tensor, layers int, batchFirst bool, kernel Kernel) (out, hn, cn *torch.Tensor, fast bool, err error) {
	if err := required(append([]*torch.Tensor{input, h0, c0}, params...)...); err != nil {
		return nil, nil, nil, false, err
	}
	c, release, err := tensors(append([]*torch.Tensor{input, h0, c0}, params...)...)
	if err != nil {
		return nil, nil, nil, false, err
	}
	defer release()
	var ps **C.ts_tensor
	if len(params) > 0 {
		ps = &c[3]
	}
	var o, h, cc *C.ts_tensor
	var f C.int32_t
	if err := statusErr(C.ts_test_lstm(c[0], c[1], c[2], ps, C.int64_t(len(params)), C.int64_t(layers), cBool(batchFirst), C.ts_kernel(kernel), &o, &h, &cc, &f)); err != nil {
		return nil, nil, nil, false, err
	}
	return wrap(o), wrap(h), wrap(cc), f != 0, nil
}
