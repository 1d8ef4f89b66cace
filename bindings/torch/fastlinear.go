package torch

/*
#include "torchspeed.h"
*/
import "C"

import "slices"

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

// LinearKernel chooses whose linear Linear runs.
type LinearKernel int32

const (
	// LinearATen is libtorch's at::linear.
	LinearATen LinearKernel = 0
	// LinearFast is torchspeed::linear_packed as FastLinear's graphs run it: the widest kernel
	// this CPU has, at::linear for what it does not cover (other dtypes, autograd, more rows
	// than BLAS needs to win).
	LinearFast LinearKernel = 1
	// LinearAVX2 and LinearAVX512 force one of torchspeed's kernels at any row count (for tests
	// and benchmarks); a CPU without the instructions gives an Unsupported error.
	LinearAVX2   LinearKernel = 2
	LinearAVX512 LinearKernel = 3
)

// Linear returns linear(x, w, b) (b may be nil), then relu when relu is set, computed by kernel
// (torchspeed's kernels pack w first, on every call). Parallel only on an inference thread (Do,
// Thread.Do).
func Linear(x, w, b *Tensor, relu bool, kernel LinearKernel) (*Tensor, error) {
	release, err := acquireAll(x, w, b)
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_tensor_linear(x.c, w.c, cTensor(b), cBool(relu), C.int32_t(kernel), &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// PackLinear returns the panels torchspeed's linear reads, made from a 2-D float32 weight [N, K]
// (what FastLinear does once per linear).
func PackLinear(w *Tensor) (*Tensor, error) {
	if err := w.acquire(); err != nil {
		return nil, err
	}
	defer w.g.release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_tensor_linear_pack(w.c, &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// LinearPacked returns torchspeed::linear_packed(x, packed, b, n, relu): what FastLinear's graphs
// run, on a weight of n output features packed by PackLinear. kernel is LinearFast (the graph
// op, fallbacks and all), LinearAVX2 or LinearAVX512.
func LinearPacked(x, packed, b *Tensor, n int, relu bool, kernel LinearKernel) (*Tensor, error) {
	release, err := acquireAll(x, packed, b)
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_tensor_linear_packed(x.c, packed.c, cTensor(b), C.int64_t(n), cBool(relu), C.int32_t(kernel), &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// acquireAll takes the guards of x and w, and of b unless it is nil, each handle once (a second
// read lock behind a waiting Close would deadlock).
func acquireAll(x, w, b *Tensor) (release func(), err error) {
	ts := []*Tensor{x, w}
	if b != nil {
		ts = append(ts, b)
	}
	var held []*Tensor
	release = func() {
		for _, t := range held {
			t.g.release()
		}
	}
	for _, t := range ts {
		if slices.Contains(held, t) {
			continue
		}
		if err := t.acquire(); err != nil {
			release()
			return nil, err
		}
		held = append(held, t)
	}
	return release, nil
}

func cTensor(t *Tensor) *C.ts_tensor {
	if t == nil {
		return nil
	}
	return t.c
}
