package torchspeed

import (
	"strings"
	"testing"
)

func TestCPUWarnings(t *testing.T) {
	zen5 := &CPU{Vendor: "AuthenticAMD", Model: "AMD EPYC 9B45", Features: []string{"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"}, Cores: 2, ExactINT8: true}
	zen3 := &CPU{Vendor: "AuthenticAMD", Model: "AMD EPYC 7763", Features: []string{"avx2", "fma"}, Cores: 2}
	int8 := func(bits int, made *CPU) *Manifest {
		return &Manifest{Precision: "int8-static", QuantizedOps: map[string]int{"quantized::conv2d": 3}, ActivationBits: bits, CPU: made}
	}
	for _, tc := range []struct {
		name string
		m    *Manifest
		here *CPU
		want []string // substrings, one per warning
	}{
		{"same CPU", int8(8, zen5), zen5, nil},
		{"an older manifest", &Manifest{Precision: "fp32"}, zen3, nil},
		{"fp32 to Zen 3", &Manifest{Precision: "fp32", CPU: zen5}, zen3,
			[]string{`optimized and measured on AMD EPYC 9B45; this CPU (AMD EPYC 7763) lacks avx512f, avx512bw, avx512vl, avx512dq, avx512_vnni, avx512_bf16`}},
		{"Zen 3 artifact on Zen 5", &Manifest{Precision: "fp32", CPU: zen3}, zen5, []string{"adds avx512f"}},
		{"8-bit INT8 to Zen 3", int8(8, zen5), zen3, []string{"lacks avx512f", "saturating 16-bit arithmetic"}},
		{"7-bit INT8 to Zen 3", int8(7, zen5), zen3, []string{"lacks avx512f"}},
		{"8-bit dynamic linears to Zen 3", &Manifest{Precision: "int8-dynamic", QuantizedOps: map[string]int{"quantized::linear_dynamic": 4}, ActivationBits: 8, CPU: zen5}, zen3,
			[]string{"lacks avx512f"}},
		{"8-bit dynamic LSTM to Zen 3", &Manifest{Precision: "int8-dynamic", QuantizedOps: map[string]int{"quantized::quantized_lstm": 1}, ActivationBits: 8, CPU: zen5}, zen3,
			[]string{"lacks avx512f", "saturating"}},
		// Validated on saturating kernels already: nothing changes on another such CPU.
		{"8-bit INT8 made on Zen 3, to Haswell", int8(8, zen3), &CPU{Model: "Haswell", Features: []string{"avx2", "fma"}}, nil},
	} {
		got := tc.m.CPUWarnings("a.pt", tc.here)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d warnings %q, want %d", tc.name, len(got), got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: warning %q lacks %q", tc.name, got[i], w)
			}
		}
	}
}
