package torch

/*
#include "torchspeed.h"
*/
import "C"

import "slices"

// FastQDQ returns a clone whose graphs (every method of the module and its submodules) call
// torchspeed::quantize_per_tensor and torchspeed::dequantize where they called
// aten::quantize_per_tensor and aten::dequantize: the same tensors bit for bit, vectorized and
// parallel for float32 to quint8/qint8 and back, where libtorch's own (without FBGEMM) is a
// scalar loop on one thread. It also returns how many calls of each were swapped. The result
// runs only where this shim is loaded: never save it for stock PyTorch. Where libtorch has
// FBGEMM (FastQDQApplies is false) nothing is swapped.
func (m *Module) FastQDQ() (mod *Module, quantizes, dequantizes int, err error) {
	var nq, ndq C.int64_t
	mod, err = m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_fast_qdq(c, o, &nq, &ndq)
	})
	if err != nil {
		return nil, 0, 0, err
	}
	return mod, int(nq), int(ndq), nil
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
