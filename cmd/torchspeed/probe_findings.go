package main

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// capabilityRank orders ATen's CPU dispatch levels (show_config's "CPU capability usage").
var capabilityRank = map[string]int{"DEFAULT": 0, "AVX": 1, "AVX2": 2, "AVX512": 3}

// isaFinding says when libtorch's own kernels dispatch below what the CPU offers: the CPU
// has AVX-512 (and maybe VNNI) while ATen runs its AVX2 kernels, so every figure measured here
// leaves speed on the table that a build with AVX-512 kernels would take. nil when they match
// or libtorch is not known.
func isaFinding(p *cpu.Probe) *cpu.Finding {
	if p == nil || p.Torch == nil || p.Torch.CPUCapability == "" {
		return nil
	}
	have, ok := capabilityRank[strings.ToUpper(p.Torch.CPUCapability)]
	if !ok {
		return nil
	}
	best, bestName := 0, "DEFAULT"
	switch {
	case p.ISA.AVX512Core():
		best, bestName = 3, "AVX512"
	case p.ISA.AVX2 && p.ISA.FMA:
		best, bestName = 2, "AVX2"
	case p.ISA.AVX:
		best, bestName = 1, "AVX"
	}
	if have >= best {
		return nil
	}
	return &cpu.Finding{
		Severity: cpu.Warning,
		Code:     "libtorch-isa-below-cpu",
		Message: fmt.Sprintf("libtorch dispatches its %s kernels (CPU capability usage: %s) while this CPU offers %s (%s)",
			p.Torch.CPUCapability, p.Torch.CPUCapability, bestName, p.ISA.Level()),
		Fix: "use a libtorch built with " + bestName + " kernels (the official libtorch 2.x CPU build), and check ATEN_CPU_CAPABILITY is not set lower; " +
			"ONEDNN_VERBOSE=1 shows the ISA oneDNN picks for each convolution",
	}
}

// emptyLists replaces nil slices and maps reachable from v (a pointer) with empty ones, so
// --json prints [] and {} for "none" rather than null, which scripts read as "not measured".
func emptyLists(v any) {
	fill(reflect.ValueOf(v))
}

func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			fill(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.CanSet() {
				fill(f)
			}
		}
	case reflect.Slice:
		if v.IsNil() && v.CanSet() {
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		}
		for i := 0; i < v.Len(); i++ {
			fill(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() && v.CanSet() {
			v.Set(reflect.MakeMap(v.Type()))
		}
	}
}
