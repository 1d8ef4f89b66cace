// Package kernels holds torchspeed's own small compute kernels: FP32 and
// u8 x s8 -> s32 dot products and register-blocked GEMM micro-kernels,
// quantize/dequantize/requantize, a peak-compute and memory-bandwidth probe,
// and reference INT8 Linear/Conv2d math used to check libtorch's quantized
// operators.
//
// Each kernel has a pure-Go generic path and, on amd64 with the gc
// toolchain (and without the purego build tag), Go assembly paths for AVX2
// (+FMA), AVX-VNNI, AVX-512 (F/BW/VL) and AVX-512 VNNI. The best path the CPU
// and OS support is chosen once at start from cpuid; SetPath caps the paths
// used (tests run every path against the generic one), and Chosen reports
// which implementation each kernel uses.
//
// Exactness: the integer kernels and quantize/dequantize/requantize give
// bit-identical results on every path. The FP32 GEMM micro-kernels are also
// bit-identical: every output element is one fused multiply-add chain over k
// (the generic path models FMA exactly). The FP32 dot product sums in a
// different order on each path (vector lanes), so paths agree to within the
// usual floating-point error bound, not bit for bit.
//
// The AVX2 and AVX-512 (non-VNNI) u8 x s8 kernels do not use vpmaddubsw,
// which saturates its pairwise int16 sums (255*127*2 > 32767) and would give
// wrong answers for activations >= 128 unless activations are reduced to
// 7 bits. They widen both operands to int16 and use vpmaddwd, which is exact
// for all u8 x s8 inputs. The VNNI paths use vpdpbusd, which is exact.
package kernels
