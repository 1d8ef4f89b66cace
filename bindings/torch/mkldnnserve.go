package torch

/*
#include "torchspeed.h"
*/
import "C"

import (
	"fmt"
	"runtime"
)

// ServeMKLDNN returns a clone of an optimize_for_inference module that Save writes and a plain
// torch::jit::load reads back: optimize_for_inference's oneDNN constants (kept in node attributes,
// which serialization drops) become torchspeed::mkldnn_constant over a torchspeed.MkldnnConstant
// (saved as a plain float tensor and laid out for oneDNN again by the loading process, a
// convolution weight as the pass reordered it, for the loading CPU), and its broadcasts and
// clamps torchspeed's equivalents. The graph runs the same oneDNN primitives. It returns how
// many constants and other nodes were replaced: none where MKLDNNServeUnavailable is not empty.
// The result runs only where this shim or OpsLibraryName is loaded.
func (m *Module) ServeMKLDNN() (mod *Module, constants, others int, err error) {
	var nc, no C.int64_t
	mod, err = m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_serve_mkldnn(c, o, &nc, &no)
	})
	if err != nil {
		return nil, 0, 0, err
	}
	return mod, int(nc), int(no), nil
}

// MKLDNNServeUnavailable is empty when this build of the shim has torchspeed::mkldnn_constant;
// otherwise it says why not.
func MKLDNNServeUnavailable() string {
	if s := C.ts_mkldnn_serve_unavailable(); s != nil {
		return C.GoString(s)
	}
	return ""
}

// ChannelsLastInputs returns a clone whose forward converts its tensor inputs at the listed
// positions (0-based) to channels-last before anything else (aten::contiguous with
// memory_format=channels_last, a stock operator), so a server that passes contiguous tensors
// gets the layout the model was measured with.
func (m *Module) ChannelsLastInputs(inputs []int) (*Module, error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("model %q: channels-last inputs: no input positions given", m.Name())
	}
	idx := make([]C.int64_t, len(inputs))
	for i, v := range inputs {
		idx[i] = C.int64_t(v)
	}
	mod, err := m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
		return C.ts_module_channels_last_inputs(c, &idx[0], C.size_t(len(idx)), o)
	})
	runtime.KeepAlive(idx)
	return mod, err
}
