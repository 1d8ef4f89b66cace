// Package int8check holds an independent check of libtorch's INT8 arithmetic and no code of its
// own: its test takes the quantized Linear and Conv2d layers of a quantized fixture apart through
// the bindings (int8 weights, per-channel or per-tensor scales and zero points, float bias,
// stride, padding, dilation, groups), recomputes each layer's quint8 output from a quantized
// input with pkg/kernels' reference (QuantizedLinearRef, QuantizedConv2dRef: an exact u8 x s8
// integer GEMM, then float32 requantization), and compares it with libtorch's output for that
// layer, element by element: equal, or one quantization step apart on a rounding tie.
//
// It lives apart from pkg/kernels because pkg/kernels must build without cgo, and apart from
// bindings/torch because it checks libtorch, not the bindings.
package int8check
