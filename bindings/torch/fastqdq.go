package torch

/*
#include "torchspeed.h"
*/
import "C"

import (
	"slices"
	"strings"
)

// FastQDQCounts says how many calls FastQDQ swapped, by kind.
type FastQDQCounts struct {
	Quantizes, Dequantizes int
	// Adds counts quantized::add and quantized::add_relu.
	Adds int
}

// FastQDQ returns a clone whose graphs (every method of the module and its submodules) call
// torchspeed::quantize_per_tensor, torchspeed::dequantize, torchspeed::add and
// torchspeed::add_relu where they called aten::quantize_per_tensor, aten::dequantize,
// quantized::add and quantized::add_relu: the same tensors bit for bit, vectorized and parallel,
// where libtorch's own (without FBGEMM) are a scalar loop on one thread (quantize, dequantize)
// or one vector width (add). It also returns how many calls of each kind were swapped. The result
// runs only where this shim is loaded: never save it for stock PyTorch. Where libtorch has
// FBGEMM (FastQDQApplies is false) nothing is swapped; the adds are swapped with libtorch 1.13
// only, whose kernel torchspeed's reproduces.
func (m *Module) FastQDQ() (*Module, FastQDQCounts, error) {
	var nq, ndq, nadd C.int64_t
	mod, err := m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_fast_qdq_v2(c, o, &nq, &ndq, &nadd)
	})
	if err != nil {
		return nil, FastQDQCounts{}, err
	}
	return mod, FastQDQCounts{Quantizes: int(nq), Dequantizes: int(ndq), Adds: int(nadd)}, nil
}

// FastQDQApplies says whether FastQDQ swaps anything with this libtorch: only without FBGEMM,
// whose absence makes libtorch's own quantize/dequantize scalar loops (Debian's builds); with
// it they are vectorized already and round a few extreme values differently.
func FastQDQApplies() bool {
	engines, err := SupportedQEngines()
	return err == nil && !slices.Contains(engines, "fbgemm")
}

// FastQAddApplies says whether FastQDQ also swaps quantized::add and quantized::add_relu: with
// libtorch 1.13 without FBGEMM, whose add kernel torchspeed's reproduces.
func FastQAddApplies() bool {
	return FastQDQApplies() && strings.HasPrefix(Version(), "1.13.")
}
