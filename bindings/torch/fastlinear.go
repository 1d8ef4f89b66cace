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

// LinearBF16 returns a clone of a module FastLinear made whose torchspeed::linear_packed and
// torchspeed::transformer_encoder_layer nodes take their weights as BF16 (rounded to nearest
// even) in place of FP32; the ops then round each input row to BF16 too and sum the products in
// float: with vdpbf16ps on a CPU with AVX512_BF16, with the BF16 values widened to float on
// AVX-512F or AVX2 elsewhere (the same products, summed in another order), with ATen's linear on
// the widened weight without AVX2. It returns how many linears were converted (four per encoder
// layer). The precision is lower than FP32 (8 significant bits per operand): callers validate the
// result. It runs only where this shim is loaded: never save it for stock PyTorch.
func (m *Module) LinearBF16() (mod *Module, linears int, err error) {
	var nl C.int64_t
	mod, err = m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_linear_bf16(c, o, &nl)
	})
	if err != nil {
		return nil, 0, err
	}
	return mod, int(nl), nil
}
