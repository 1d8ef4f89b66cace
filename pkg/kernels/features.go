package kernels

import "github.com/klauspost/cpuid/v2"

// Path names the instruction-set level a peak loop runs on.
type Path string

// The paths, lowest first.
const (
	Generic    Path = "generic"    // pure Go, every platform
	AVX2       Path = "avx2"       // AVX2 + FMA3
	AVXVNNI    Path = "avxvnni"    // AVX2 + FMA3 + VEX-encoded VNNI (vpdpbusd on ymm)
	AVX512     Path = "avx512"     // AVX-512 F, BW, VL (+ AVX2, FMA3)
	AVX512VNNI Path = "avx512vnni" // AVX-512 F, BW, VL, VNNI
)

// Features lists the CPU features the peak loops care about, as cpuid reports
// them (cpuid also checks that the OS saves the wide registers).
type Features struct {
	AVX2       bool `json:"avx2"`
	FMA        bool `json:"fma"`
	AVX512F    bool `json:"avx512f"`
	AVX512BW   bool `json:"avx512bw"`
	AVX512VL   bool `json:"avx512vl"`
	AVX512VNNI bool `json:"avx512vnni"`
	AVXVNNI    bool `json:"avxvnni"`
}

// Detected returns the features of the CPU this process runs on.
func Detected() Features { return detected }

var detected = Features{
	AVX2:       cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2),
	FMA:        cpuid.CPU.Supports(cpuid.FMA3),
	AVX512F:    cpuid.CPU.Supports(cpuid.AVX512F),
	AVX512BW:   cpuid.CPU.Supports(cpuid.AVX512BW),
	AVX512VL:   cpuid.CPU.Supports(cpuid.AVX512VL),
	AVX512VNNI: cpuid.CPU.Supports(cpuid.AVX512VNNI),
	AVXVNNI:    cpuid.CPU.Supports(cpuid.AVXVNNI),
}

// supports reports whether path p can run here: the CPU has the features and
// this build contains the assembly (amd64, gc, not purego).
func (f Features) supports(p Path) bool {
	if p == Generic {
		return true
	}
	if !asmBuilt {
		return false
	}
	avx2 := f.AVX2 && f.FMA
	avx512 := avx2 && f.AVX512F && f.AVX512BW && f.AVX512VL
	switch p {
	case AVX2:
		return avx2
	case AVXVNNI:
		return avx2 && f.AVXVNNI
	case AVX512:
		return avx512
	case AVX512VNNI:
		return avx512 && f.AVX512VNNI
	}
	return false
}
