package torch

/*
#include "torchspeed.h"
*/
import "C"

// FuseConvAdd returns a clone whose graphs (every method of the module and its submodules)
// compute each quantized::add or add_relu (or fast_qdq's torchspeed:: swaps of them) of a
// quantized::conv2d output that has no other use with torchspeed::conv2d_add: one oneDNN
// convolution whose sum post-op adds into the other operand's buffer. A pair is fused only where
// writing into that operand is safe: it is made in the add's block, it aliases no graph input or
// output, no constant and not the conv's input, and nothing that may alias it is used after the
// add. It also returns how many pairs were fused: none where ConvAddUnavailable is not empty.
//
// Outputs are not ATen's bit for bit: the unfused pair rounds the conv's output to u8 first; the
// fused value is within about convScale/(2*addScale)+1 quanta of it, and within one quantum of
// the float computation. The result runs only where this shim is loaded: never save it for
// stock PyTorch.
func (m *Module) FuseConvAdd() (*Module, int, error) {
	var n C.int64_t
	mod, err := m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_fuse_conv_add(c, o, &n)
	})
	if err != nil {
		return nil, 0, err
	}
	return mod, int(n), nil
}

// ConvAddUnavailable is empty when this build of the shim has torchspeed::conv2d_add; otherwise
// it says why not (the libtorch or the package it was built without).
func ConvAddUnavailable() string {
	if s := C.ts_conv_add_unavailable(); s != nil {
		return C.GoString(s)
	}
	return ""
}

// QConvAddArgs describe one quantized conv + add for QConv2dAdd: the float weight
// [O, I/Groups, kh, kw] is quantized to qint8 (zero point 0) with WeightScales (one per output
// channel, or one for the tensor) and prepacked on the current quantized engine.
type QConvAddArgs struct {
	Weight, WeightScales, Bias *Tensor // Bias may be nil
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
// by ATen's two ops (fused false) or by torchspeed::conv2d_add as FuseConvAdd's graphs run it
// (fused true; residual itself is left unchanged: the op writes into a copy). ran says whether
// the fused oneDNN convolution ran (false where it fell back to ATen's pair). Parallel only on an
// inference thread (Do, Thread.Do).
func (qx *Tensor) QConv2dAdd(residual *Tensor, a QConvAddArgs, fused bool) (out *Tensor, ran bool, err error) {
	ts := []*Tensor{qx, residual, a.Weight, a.WeightScales}
	if a.Bias != nil {
		ts = append(ts, a.Bias)
	}
	held := map[*Tensor]bool{}
	for _, t := range ts {
		if held[t] {
			continue
		}
		if err := t.acquire(); err != nil {
			return nil, false, err
		}
		held[t] = true
		defer t.g.release()
	}
	var bias *C.ts_tensor
	if a.Bias != nil {
		bias = a.Bias.c
	}
	var o *C.ts_tensor
	var f C.int32_t
	st := C.ts_tensor_qconv2d_add(qx.c, a.Weight.c, a.WeightScales.c, bias, C.int64_t(a.Stride), C.int64_t(a.Padding),
		C.int64_t(a.Dilation), C.int64_t(a.Groups), C.double(a.ConvScale), C.int64_t(a.ConvZeroPoint), residual.c,
		cBool(a.ResidualFirst), C.double(a.Scale), C.int64_t(a.ZeroPoint), cBool(a.Relu), cBool(fused), &o, &f)
	if err := statusErr(st); err != nil {
		return nil, false, err
	}
	return wrapTensor(o), f != 0, nil
}
