package torch

/*
#include "torchspeed.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/torchspeed/torchspeed/bindings/torch/internal/handle"
)

// The handles kerneltest (the tests' entry points into the kernels, in their own library) needs,
// without a public API for them.
func init() {
	handle.Tensors = internalTensors
	handle.WrapTensor = func(p unsafe.Pointer) any { return wrapTensor((*C.ts_tensor)(p)) }
	handle.StatusErr = func(p unsafe.Pointer) error { return statusErr((*C.ts_status)(p)) }
}

// internalTensors takes the guard of each distinct non-nil *Tensor in ts once (a second read lock
// on one guard could wait behind a Close) and returns the C pointers in ts's order.
func internalTensors(ts ...any) (ptrs []unsafe.Pointer, release func(), err error) {
	var held []*Tensor
	release = func() {
		for _, t := range held {
			t.g.release()
		}
	}
	ptrs = make([]unsafe.Pointer, len(ts))
	for i, v := range ts {
		t, ok := v.(*Tensor)
		if !ok && v != nil {
			release()
			return nil, nil, fmt.Errorf("torch: argument %d is a %T, not a *torch.Tensor", i, v)
		}
		if t == nil {
			continue
		}
		if !slices.Contains(held, t) {
			if err := t.acquire(); err != nil {
				release()
				return nil, nil, err
			}
			held = append(held, t)
		}
		ptrs[i] = unsafe.Pointer(t.c)
	}
	return ptrs, release, nil
}
