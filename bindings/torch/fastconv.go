package torch

/*
#include "torchspeed.h"
*/
import "C"

// FastConv returns a clone whose graphs (every method of the module and its submodules) call
// torchspeed::conv2d_gemm where they called aten::_convolution, aten::convolution or aten::conv2d
// with a constant 4-D float32 weight (and constant or no bias), constant stride, padding and
// dilation, groups 1 and not transposed (a frozen graph's convolutions), whose depth IC x kh x kw
// the kernel takes (576 at most). The op is im2col into rows of output positions followed by
// FastLinear's GEMM over the weight packed once here, bias and a relu fused (a relu that is the
// conv's only use); its output is channels-last. A 2-D one whose (relu's) only use is a
// max_pool2d without padding, dilation or ceil mode takes the pool too (torchspeed::conv2d_pool,
// NCHW output). Inputs with more output positions than the
// kernel takes (256; 1024 for a 1x1 conv needing no im2col) run ATen's convolution on the
// original weight. A depthwise convolution (groups = input = output channels, weight [C, 1, kh, kw])
// calls torchspeed::conv_dw instead: a vectorized loop over output positions, ATen's convolution past
// 8192 output elements. Other grouped and deeper convolutions are left as they are. It returns how many convolutions were swapped and how many of them took
// a relu. Outputs equal the original's up to float rounding. On a CPU without AVX2 and FMA nothing
// is swapped. The result runs only where this shim is loaded: never save it for stock PyTorch.
func (m *Module) FastConv() (mod *Module, convs, relus int, err error) {
	var nc, nr C.int64_t
	mod, err = m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_fast_conv(c, o, &nc, &nr)
	})
	if err != nil {
		return nil, 0, 0, err
	}
	return mod, int(nc), int(nr), nil
}
