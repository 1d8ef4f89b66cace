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
