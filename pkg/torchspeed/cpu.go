package torchspeed

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// CPU is the processor an artifact was optimized and measured on: what its choices of passes,
// precision, kernels, threads and runtime settings hold for.
type CPU struct {
	Vendor string `json:"vendor"`
	Model  string `json:"model"`
	// Features are the instruction sets that change which kernels run (KernelFeatures), as
	// /proc/cpuinfo names them.
	Features []string `json:"features"`
	// Cores is the number of CPUs the process could run on.
	Cores int `json:"cores"`
	// ExactINT8 says oneDNN's INT8 kernels summed u8 x s8 products exactly there (VNNI, not
	// capped by ONEDNN_MAX_CPU_ISA: cpu.ExactU8S8); without it they saturate 8-bit activations.
	ExactINT8 bool `json:"exact_int8"`
}

// KernelFeatures are the instruction sets whose presence changes the kernels libtorch, oneDNN,
// OpenBLAS and torchspeed run, and so the speed and, for INT8 (VNNI), the arithmetic.
var KernelFeatures = []string{"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx_vnni",
	"avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"}

// CPUOf describes the probed processor for a manifest; nil without a probe.
func CPUOf(p *cpu.Probe) *CPU {
	if p == nil {
		return nil
	}
	c := &CPU{Vendor: p.CPU.Vendor, Model: p.CPU.Model, Cores: p.Topology.LogicalCPUs,
		ExactINT8: cpu.ExactU8S8(p.ISA, func(k string) (string, bool) { v, ok := p.Env[k]; return v, ok })}
	if n := len(p.Affinity); n > 0 {
		c.Cores = n
	}
	for _, f := range p.ISA.Features() {
		if slices.Contains(KernelFeatures, f) {
			c.Features = append(c.Features, f)
		}
	}
	if c.Features == nil {
		c.Features = []string{}
	}
	return c
}

// Name is the model name, or the vendor's when the model is unknown.
func (c *CPU) Name() string {
	switch {
	case c == nil:
		return "an unrecorded CPU"
	case c.Model != "":
		return c.Model
	case c.Vendor != "":
		return c.Vendor + " CPU"
	}
	return "an unnamed CPU"
}

// Has says the CPU has feature f (a KernelFeatures name).
func (c *CPU) Has(f string) bool { return c != nil && slices.Contains(c.Features, f) }

// FeatureDiff lists the kernel features one of the two CPUs has and the other lacks: missing
// here (from has them, here does not) and extra here.
func FeatureDiff(from, here *CPU) (missing, extra []string) {
	if from == nil || here == nil {
		return nil, nil
	}
	for _, f := range KernelFeatures {
		switch a, b := from.Has(f), here.Has(f); {
		case a && !b:
			missing = append(missing, f)
		case b && !a:
			extra = append(extra, f)
		}
	}
	return missing, extra
}

// CPUWarnings says how this CPU differs from the one the artifact at path was measured on:
// nothing when the kernel features are the same (or the manifest predates the record).
func (m *Manifest) CPUWarnings(path string, here *CPU) []string {
	if m == nil || m.CPU == nil || here == nil {
		return nil
	}
	missing, extra := FeatureDiff(m.CPU, here)
	if len(missing) == 0 && len(extra) == 0 {
		return nil
	}
	var diff []string
	if len(missing) > 0 {
		diff = append(diff, "lacks "+strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		diff = append(diff, "adds "+strings.Join(extra, ", "))
	}
	out := []string{fmt.Sprintf("artifact %q was optimized and measured on %s; this CPU (%s) %s: its passes, precision, kernels, threads and runtime settings were chosen there; run torchspeed check -m %s to re-validate its accuracy and re-measure its settings here",
		path, m.CPU.Name(), here.Name(), strings.Join(diff, " and "), path)}
	if m.INT8SaturationRisk(here) {
		out = append(out, fmt.Sprintf("artifact %q is INT8 with 8-bit activations, validated where oneDNN summed u8 x s8 products exactly (VNNI); here it cannot (no VNNI, or ONEDNN_MAX_CPU_ISA below it) and adds pairs of u8 x s8 products in saturating 16-bit arithmetic: outputs can clip and differ from the validated ones; run torchspeed check -m %s, or re-optimize with quantize.reduce_range: true for 7-bit activations, exact on every x86 CPU",
			path, path))
	}
	return out
}

// INT8SaturationRisk says the artifact's quantized kernels can saturate on CPU here where they
// did not where it was validated: an INT8 artifact whose activations use all 8 bits (static
// layers, or dynamic LSTM/GRU cells), validated on a CPU with VNNI, run on one without.
func (m *Manifest) INT8SaturationRisk(here *CPU) bool {
	if m == nil || here == nil || len(m.QuantizedOps) == 0 {
		return false
	}
	switch m.Precision {
	case "int8-static":
	case "int8-dynamic":
		// Its linears are 7-bit whatever the setting; only recurrent cells read it.
		if !slices.ContainsFunc(slices.Collect(maps.Keys(m.QuantizedOps)), func(k string) bool {
			k = strings.ToLower(k)
			return strings.Contains(k, "lstm") || strings.Contains(k, "gru") || strings.Contains(k, "rnn")
		}) {
			return false
		}
	default:
		return false
	}
	// 8 bits validated on a CPU without VNNI were validated with the saturation in place.
	return m.ActivationBits == 8 && m.CPU != nil && m.CPU.ExactINT8 && !here.ExactINT8
}
