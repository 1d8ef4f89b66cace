package cpu

import "strings"

// ExactU8S8 says oneDNN's x86 INT8 kernels on a CPU with isa sum u8 x s8 products exactly:
// only with VNNI (vpdpbusd, from AVX512_VNNI or AVX_VNNI), and only where ONEDNN_MAX_CPU_ISA (or
// DNNL_MAX_CPU_ISA, read through getenv) does not keep oneDNN below its VNNI kernels. Without
// them, oneDNN (and FBGEMM) multiply with vpmaddubsw, which adds each pair of products into a
// saturating int16: 255*127*2 overflows it, 127*128*2 does not, so activations need 7 bits.
func ExactU8S8(isa ISA, getenv func(string) (string, bool)) bool {
	for _, name := range []string{"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"} {
		v, ok := getenv(name)
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "", "all":
		case "avx2_vnni":
			return isa.AVXVNNI // the AVX-512 kernels are off
		case "avx512_core_vnni", "avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx", "avx512_core_amx_fp16",
			"avx2_vnni_2", "avx10_1_512", "avx10_1_512_amx", "avx10_1_512_amx_fp16":
			return isa.AVX512VNNI || isa.AVXVNNI
		default: // sse41, avx, avx2, avx512_core, avx512_mic, ...: below VNNI
			return false
		}
		break // ONEDNN_MAX_CPU_ISA wins over its old name
	}
	return isa.AVX512VNNI || isa.AVXVNNI
}
