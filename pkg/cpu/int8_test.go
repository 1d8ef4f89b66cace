package cpu

import "testing"

func TestExactU8S8(t *testing.T) {
	zen4 := ISA{AVX2: true, AVX512F: true, AVX512VNNI: true}
	alder := ISA{AVX2: true, AVXVNNI: true}
	zen3 := ISA{AVX2: true}
	for _, tc := range []struct {
		isa  ISA
		env  map[string]string
		want bool
	}{
		{zen4, nil, true},
		{alder, nil, true},
		{zen3, nil, false},
		{zen3, map[string]string{"ONEDNN_MAX_CPU_ISA": "ALL"}, false},
		// A cap below VNNI makes oneDNN take vpmaddubsw on a VNNI CPU.
		{zen4, map[string]string{"ONEDNN_MAX_CPU_ISA": "AVX2"}, false},
		{zen4, map[string]string{"ONEDNN_MAX_CPU_ISA": "avx512_core"}, false},
		{zen4, map[string]string{"DNNL_MAX_CPU_ISA": "AVX512_CORE"}, false},
		{zen4, map[string]string{"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, true},
		{zen4, map[string]string{"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"}, true},
		// avx2_vnni turns the AVX-512 kernels off: only AVX-VNNI counts then.
		{zen4, map[string]string{"ONEDNN_MAX_CPU_ISA": "AVX2_VNNI"}, false},
		{alder, map[string]string{"ONEDNN_MAX_CPU_ISA": "AVX2_VNNI"}, true},
		// The new name wins over the old one.
		{zen4, map[string]string{"ONEDNN_MAX_CPU_ISA": "ALL", "DNNL_MAX_CPU_ISA": "AVX2"}, true},
	} {
		got := ExactU8S8(tc.isa, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		if got != tc.want {
			t.Errorf("%v with %v: %v, want %v", tc.isa.Features(), tc.env, got, tc.want)
		}
	}
}
