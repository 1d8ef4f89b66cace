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
// conv's only use); its output is channels-last. Inputs with more output positions than the
// kernel takes (256; 1024 for a 1x1 conv needing no im2col) run ATen's convolution on the
// original weight; grouped and deeper convolutions are left as they are. It returns how many convolutions were swapped and how many of them took
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

// ConvKernel chooses whose convolution Conv2d runs.
type ConvKernel int32

const (
	// ConvATen is libtorch's at::conv2d.
	ConvATen ConvKernel = 0
	// ConvFast is torchspeed::conv2d_gemm as FastConv's graphs run it: torchspeed's GEMM where it
	// covers the convolution, at::conv2d for the rest (and for groups other than 1, which
	// FastConv leaves to ATen).
	ConvFast ConvKernel = 1
)

// ConvParams are a 2-D convolution's stride, padding and dilation (height, width) and groups.
type ConvParams struct {
	Stride, Padding, Dilation [2]int64
	Groups                    int64
}

// Conv2d returns conv2d(x, w, b) with p (b may be nil), then relu when relu is set, computed by
// kernel (ConvFast packs w first, on every call). fast says whether torchspeed's kernel ran
// (false: ATen's convolution did). Parallel only on an inference thread (Do, Thread.Do).
func Conv2d(x, w, b *Tensor, p ConvParams, relu bool, kernel ConvKernel) (y *Tensor, fast bool, err error) {
	release, err := acquireAll(x, w, b)
	if err != nil {
		return nil, false, err
	}
	defer release()
	var out *C.ts_tensor
	var f C.int32_t
	if err := statusErr(C.ts_tensor_conv2d(x.c, w.c, cTensor(b), C.int64_t(p.Stride[0]), C.int64_t(p.Stride[1]),
		C.int64_t(p.Padding[0]), C.int64_t(p.Padding[1]), C.int64_t(p.Dilation[0]), C.int64_t(p.Dilation[1]),
		C.int64_t(p.Groups), cBool(relu), C.int32_t(kernel), &out, &f)); err != nil {
		return nil, false, err
	}
	return wrapTensor(out), f != 0, nil
}
