package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

// Observer kinds understood by the shim's quantizer (csrc/abi/quantize.cpp).
const (
	ObserverMinMax           = "minmax"             // running min/max (PyTorch MinMaxObserver)
	ObserverMovingAverage    = "moving_average"     // MovingAverageMinMaxObserver
	ObserverHistogram        = "histogram"          // L2-minimizing range search (HistogramObserver)
	ObserverPercentile       = "percentile"         // histogram clipped at a percentile
	ObserverPerChannelMinMax = "per_channel_minmax" // per-channel weights (PerChannelMinMaxObserver)
	ObserverPlaceholder      = "placeholder"        // dynamic quantization's activations
)

// ObserverConfig describes one observer. Zero values mean the shim's defaults: for activations
// minmax quint8 per_tensor_affine, for weights per_channel_minmax qint8 per_channel_symmetric.
type ObserverConfig struct {
	Observer    string `json:"observer,omitempty"`
	DType       string `json:"dtype,omitempty"`   // quint8, qint8
	QScheme     string `json:"qscheme,omitempty"` // per_tensor_affine, per_tensor_symmetric, per_channel_symmetric, per_channel_affine
	ReduceRange bool   `json:"reduce_range,omitempty"`
	// QuantMin and QuantMax restrict the integer range (both or neither).
	QuantMin          *int64  `json:"quant_min,omitempty"`
	QuantMax          *int64  `json:"quant_max,omitempty"`
	AveragingConstant float64 `json:"averaging_constant,omitempty"` // moving_average (default 0.01)
	Bins              int     `json:"bins,omitempty"`               // histogram, percentile (default 2048)
	UpsampleRate      int     `json:"upsample_rate,omitempty"`      // histogram, percentile (default 128)
	Percentile        float64 `json:"percentile,omitempty"`         // percentile (default 99.99)
	ChAxis            int     `json:"ch_axis,omitempty"`            // per_channel_minmax (default 0)
}

// QConfig pairs the activation and weight observers of a module.
type QConfig struct {
	Activation ObserverConfig `json:"activation"`
	Weight     ObserverConfig `json:"weight"`
}

// QuantConfig is the whole-model quantization configuration: QConfig applies to every module
// unless Modules overrides it by submodule path; a nil entry keeps that module in FP32.
type QuantConfig struct {
	QConfig
	Modules map[string]*QConfig `json:"modules,omitempty"`
}

// MarshalJSON flattens the embedded QConfig into the shim's JSON shape.
func (c QuantConfig) MarshalJSON() ([]byte, error) {
	type wire struct {
		Activation ObserverConfig      `json:"activation"`
		Weight     ObserverConfig      `json:"weight"`
		Modules    map[string]*QConfig `json:"modules,omitempty"`
	}
	return json.Marshal(wire{c.Activation, c.Weight, c.Modules})
}

// QuantPrepare is static quantization's first step: it returns a copy of the module in eval
// mode with conv-bn folded and observers inserted. Run Forward on the result with calibration
// batches, then call QuantConvert. m is not modified.
func (m *Module) QuantPrepare(cfg QuantConfig) (*Module, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("quantize %q: %w", m.Name(), err)
	}
	cs := C.CString(string(js))
	defer C.free(unsafe.Pointer(cs))
	return m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status { return C.ts_quant_prepare(c, cs, o) })
}

// QuantConvert is static quantization's second step, on a module from QuantPrepare that has
// seen calibration data: it selects the quantized engine (process-wide; "" keeps the current
// one), inserts quantize/dequantize from the observers' statistics and finalizes. The result is
// frozen and INT8; m can be converted again.
//
// preserved names methods (a stateful model's reset method) and attributes that must survive
// the freeze finalizing does.
func (m *Module) QuantConvert(engine string, preserved ...string) (*Module, error) {
	ce := C.CString(engine)
	defer C.free(unsafe.Pointer(ce))
	arr, release := cStrings(preserved)
	defer release()
	var out *Module
	var err error
	// Conversion runs calculate_qparams and prepacking: keep it on an inference thread too.
	// It sets the engine and packs for it: hold the engine lock across both.
	Do(func() {
		engineMu.Lock()
		defer engineMu.Unlock()
		out, err = m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
			return C.ts_quant_convert_v2(c, ce, arr, C.size_t(len(preserved)), o)
		})
	})
	return out, err
}

// QuantDynamic returns the dynamically quantized model (quantize_dynamic_jit): linear layers
// get INT8 weights and quantize their inputs at run time; LSTM and GRU calls become
// aten::quantized_lstm/gru with qint8 cell weights (as eager quantize_dynamic does). The
// activation observer must be left empty or be "placeholder". m is not modified. preserved
// are kept through finalizing, as for QuantConvert.
func (m *Module) QuantDynamic(cfg QuantConfig, engine string, preserved ...string) (*Module, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("quantize %q: %w", m.Name(), err)
	}
	cs := C.CString(string(js))
	defer C.free(unsafe.Pointer(cs))
	ce := C.CString(engine)
	defer C.free(unsafe.Pointer(ce))
	arr, release := cStrings(preserved)
	defer release()
	var out *Module
	Do(func() {
		engineMu.Lock()
		defer engineMu.Unlock()
		out, err = m.derive(func(c *C.ts_module, o **C.ts_module) *C.ts_status {
			return C.ts_quant_dynamic_v2(c, cs, ce, arr, C.size_t(len(preserved)), o)
		})
	})
	return out, err
}

// QuantLayer is a submodule graph-mode quantization can make INT8.
type QuantLayer struct {
	Path   string `json:"path"`   // e.g. "layer1.0.conv1"
	Type   string `json:"type"`   // Conv1d, Conv2d, Conv3d, Linear, LSTM, GRU
	Params int64  `json:"params"` // parameter count of the module itself
}

// QuantLayers lists the quantizable submodules, depth first.
func (m *Module) QuantLayers() ([]QuantLayer, error) {
	s, err := m.stringOp(func(c *C.ts_module, p **C.char) *C.ts_status { return C.ts_quant_layers(c, p) })
	if err != nil {
		return nil, fmt.Errorf("quantizable layers of %q: %w", m.Name(), err)
	}
	var out []QuantLayer
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("quantizable layers of %q: %w", m.Name(), err)
	}
	return out, nil
}

// NewObserver builds a standalone observer module: Forward(x) records statistics,
// RunMethod("calculate_qparams") returns (scale, zero_point) and RunMethod("observed_range")
// (min, max). weightDefaults selects the weight defaults for fields left empty.
func NewObserver(cfg ObserverConfig, weightDefaults bool) (*Module, error) {
	if err := checkShim(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	if weightDefaults {
		obj["weight_defaults"] = true
	}
	b, err = json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	cs := C.CString(string(b))
	defer C.free(unsafe.Pointer(cs))
	var out *C.ts_module
	if err := statusErr(C.ts_quant_observer(cs, &out)); err != nil {
		return nil, fmt.Errorf("observer %s: %w", cfg.Observer, err)
	}
	return wrapModule(out, "observer "+cfg.Observer), nil
}
