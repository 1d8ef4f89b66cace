// Package int8check holds an independent check of libtorch's INT8 arithmetic and no code of its
// own: its test takes the quantized Linear and Conv2d layers of a quantized fixture apart through
// the bindings (int8 weights, per-channel or per-tensor scales and zero points, float bias,
// stride, padding, dilation, groups), recomputes each layer's quint8 output from a quantized
// input with pkg/kernels' reference (QuantizedLinearRef, QuantizedConv2dRef: an exact u8 x s8
// integer GEMM, then float32 requantization), and compares it with libtorch's output for that
// layer, element by element: equal, or one quantization step apart on a rounding tie.
//
// On x86 CPUs without VNNI the engines' kernels add each pair of u8 x s8 products into int16
// with saturation (vpmaddubsw), so there full-range inputs are compared with a model of that
// saturation (pairsat_test.go), which must also differ from exact math somewhere, and 7-bit
// inputs (what torchspeed's reduce_range auto gives on such CPUs) with exact math. Measured on
// Zen 3 (AVX2): full-range outputs were up to 108 steps from exact math and within one step of
// the saturation model on every layer of digits and resnet18.
//
// It lives apart from pkg/kernels because pkg/kernels must build without cgo, and apart from
// bindings/torch because it checks libtorch, not the bindings.
package int8check
