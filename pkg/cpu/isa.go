package cpu

// ISA is the instruction sets that decide which inference kernels run. A field is true
// only when the CPU has the feature and the OS enabled its register state: an
// instruction the OS did not enable faults, so for speed it does not exist.
type ISA struct {
	// Source is "cpuid" (the live machine) or "cpuinfo" (flags from a /proc copy).
	Source string `json:"source"`
	// XCR0 is the OS-enabled state mask in hex, "" when not read.
	XCR0 string `json:"xcr0,omitempty"`
	// NotEnabledByOS lists features the CPU has that the OS left disabled.
	NotEnabledByOS []string `json:"not_enabled_by_os,omitempty"`

	SSE42      bool `json:"sse4_2"`
	AVX        bool `json:"avx"`
	AVX2       bool `json:"avx2"`
	FMA        bool `json:"fma"`
	F16C       bool `json:"f16c"`
	AVX512F    bool `json:"avx512f"`
	AVX512BW   bool `json:"avx512bw"`
	AVX512VL   bool `json:"avx512vl"`
	AVX512DQ   bool `json:"avx512dq"`
	AVX512VNNI bool `json:"avx512_vnni"`
	AVXVNNI    bool `json:"avx_vnni"`
	AVX512BF16 bool `json:"avx512_bf16"`
	AMXTile    bool `json:"amx_tile"`
	AMXInt8    bool `json:"amx_int8"`
	AMXBF16    bool `json:"amx_bf16"`
}

// Features lists the names of the supported features, in the order of the fields
// (roughly oldest first), with the names /proc/cpuinfo uses.
func (i ISA) Features() []string {
	var out []string
	for _, f := range []struct {
		name string
		on   bool
	}{
		{"sse4_2", i.SSE42}, {"avx", i.AVX}, {"avx2", i.AVX2}, {"fma", i.FMA}, {"f16c", i.F16C},
		{"avx512f", i.AVX512F}, {"avx512bw", i.AVX512BW}, {"avx512vl", i.AVX512VL}, {"avx512dq", i.AVX512DQ},
		{"avx512_vnni", i.AVX512VNNI}, {"avx_vnni", i.AVXVNNI}, {"avx512_bf16", i.AVX512BF16},
		{"amx_tile", i.AMXTile}, {"amx_int8", i.AMXInt8}, {"amx_bf16", i.AMXBF16},
	} {
		if f.on {
			out = append(out, f.name)
		}
	}
	return out
}

// AVX512Core reports the AVX-512 subset oneDNN's and fbgemm's AVX-512 kernels need
// (F, BW, VL, DQ: "avx512_core" in oneDNN's terms).
func (i ISA) AVX512Core() bool { return i.AVX512F && i.AVX512BW && i.AVX512VL && i.AVX512DQ }

// VNNI reports whether INT8 dot products have a one-instruction path (AVX512-VNNI or
// AVX-VNNI); without it INT8 GEMMs need three instructions per step and gain less.
func (i ISA) VNNI() bool { return i.AVX512VNNI || i.AVXVNNI }

// AMX reports whether the AMX tile unit can run INT8 matrix multiplies.
func (i ISA) AMX() bool { return i.AMXTile && i.AMXInt8 }

// Level names the best kernel family oneDNN would pick for FP32 and INT8 on this ISA,
// for display: "avx512_core_amx", "avx512_core_vnni", "avx512_core", "avx2_vnni",
// "avx2", "avx", "sse41" or "none".
func (i ISA) Level() string {
	switch {
	case i.AVX512Core() && i.AMX():
		return "avx512_core_amx"
	case i.AVX512Core() && i.AVX512VNNI:
		return "avx512_core_vnni"
	case i.AVX512Core():
		return "avx512_core"
	case i.AVX2 && i.AVXVNNI:
		return "avx2_vnni"
	case i.AVX2 && i.FMA:
		return "avx2"
	case i.AVX:
		return "avx"
	case i.SSE42:
		return "sse41"
	}
	return "none"
}
