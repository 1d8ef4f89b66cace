package torch

/*
#include "torchspeed.h"
*/
import "C"

// FastLinear returns a clone whose graphs (every method of the module and its submodules) call
// torchspeed::linear_packed, a register-blocked FP32 GEMM over a weight packed once here, where
// they called aten::linear with a constant weight (and constant or no bias), or aten::matmul
// with a constant 2-D right operand plus, when it is the product's only use, an aten::add of a
// constant bias (what optimize_for_inference leaves of a linear). A relu that is the only use of
// the result is fused. aten::_transformer_encoder_layer_fwd with constant weights (a scripted
// nn.TransformerEncoderLayer's eval fast path) becomes torchspeed::transformer_encoder_layer,
// its four linears through the same kernel and the rest through ATen's ops. It returns how many
// linears were swapped (four per encoder layer) and how many of them took a relu. Outputs equal
// the original's up to float rounding (the sums run in another order). On a CPU without AVX2
// and FMA nothing is swapped. The result runs only where this shim is loaded: never save it for
// stock PyTorch.
func (m *Module) FastLinear() (mod *Module, linears, relus int, err error) {
	var nl, nr C.int64_t
	mod, err = m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_fast_linear(c, o, &nl, &nr)
	})
	if err != nil {
		return nil, 0, 0, err
	}
	return mod, int(nl), int(nr), nil
}
