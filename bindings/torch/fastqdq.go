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

// QDQKernel chooses whose quantize_per_tensor/dequantize QuantizePerTensor and Dequantize run.
type QDQKernel int32

const (
	// QDQATen is libtorch's own op.
	QDQATen QDQKernel = 0
	// QDQFast is torchspeed's op as FastQDQ's graphs run it: the widest kernel this CPU has.
	QDQFast QDQKernel = 1
	// QDQScalar, QDQAVX2 and QDQAVX512 force one of torchspeed's kernels (for tests); a CPU
	// without the instructions gives an Unsupported error.
	QDQScalar QDQKernel = 2
	QDQAVX2   QDQKernel = 3
	QDQAVX512 QDQKernel = 4
)

// QuantizePerTensor returns quantize_per_tensor(t, scale, zeroPoint, dtype) for dtype QUint8,
// QInt8 or QInt32, computed by kernel. Parallel only on an inference thread (Do, Thread.Do).
func (t *Tensor) QuantizePerTensor(scale float64, zeroPoint int64, dtype DType, kernel QDQKernel) (*Tensor, error) {
	if err := t.acquire(); err != nil {
		return nil, err
	}
	defer t.g.release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_tensor_quantize_per_tensor(t.c, C.double(scale), C.int64_t(zeroPoint), C.int32_t(dtype), C.int32_t(kernel), &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// Dequantize returns dequantize(t) computed by kernel.
func (t *Tensor) Dequantize(kernel QDQKernel) (*Tensor, error) {
	if err := t.acquire(); err != nil {
		return nil, err
	}
	defer t.g.release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_tensor_dequantize(t.c, C.int32_t(kernel), &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// QAdd returns quantized::add(t, other, scale, zeroPoint), or quantized::add_relu when relu is
// true, computed by kernel (the QDQKernel values: ATen's op or torchspeed's; what torchspeed's
// does not cover goes to ATen's). Parallel only on an inference thread (Do, Thread.Do).
func (t *Tensor) QAdd(other *Tensor, scale float64, zeroPoint int64, relu bool, kernel QDQKernel) (*Tensor, error) {
	if err := t.acquire(); err != nil {
		return nil, err
	}
	defer t.g.release()
	if other != t { // a second read lock on one guard could wait behind a Close
		if err := other.acquire(); err != nil {
			return nil, err
		}
		defer other.g.release()
	}
	r := C.int32_t(0)
	if relu {
		r = 1
	}
	var out *C.ts_tensor
	if err := statusErr(C.ts_tensor_qadd(t.c, other.c, C.double(scale), C.int64_t(zeroPoint), r, C.int32_t(kernel), &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// FastQAddApplies says whether FastQDQ also swaps quantized::add and quantized::add_relu: with
// libtorch 1.13 without FBGEMM, whose add kernel torchspeed's reproduces.
func FastQAddApplies() bool {
	return FastQDQApplies() && strings.HasPrefix(Version(), "1.13.")
}
