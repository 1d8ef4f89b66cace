// Package kernels holds two things torchspeed measures and checks with, not the kernels it
// runs (those are libtorch's and csrc's):
//
//   - the peak probe (MeasurePeak): in-register FP32 FMA and INT8 multiply-add loops in Go
//     assembly for AVX2, AVX-VNNI, AVX-512 and AVX-512 VNNI (plain Go elsewhere), run on every
//     allowed CPU at once, plus a memory-bandwidth read; the roofline (pkg/roofline, Roofline)
//     divides a model's measured rate by it;
//   - the independent INT8 reference (QuantizedLinearRef, QuantizedConv2dRef, RequantizeU8):
//     quantized Linear and Conv2d layers in plain Go loops, an exact integer sum then float32
//     requantization as fbgemm and oneDNN define it, against which internal/int8check holds
//     libtorch's quantized operators. It shares no code with any kernel it checks, and is
//     written for being read, not for speed.
//
// The package builds without cgo and on every platform; the purego build tag drops the
// assembly.
package kernels
