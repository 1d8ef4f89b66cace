package kernels

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestMeasurePeak(t *testing.T) {
	res, err := MeasurePeak(PeakOptions{Duration: 30 * time.Millisecond, Burst: 500 * time.Microsecond, MemoryBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("frequency %.3f GHz (%s), pinned %v, CPUs %v", res.FrequencyHz/1e9, res.FrequencySource, res.Pinned, res.CPUs)
	if res.FrequencyHz < 2e8 || res.FrequencyHz > 8e9 {
		t.Errorf("frequency %g Hz is not plausible", res.FrequencyHz)
	}
	if len(res.FP32) == 0 || len(res.INT8) == 0 {
		t.Fatalf("no compute figures: %+v", res)
	}
	for _, f := range append(append([]ComputeFigure{}, res.FP32...), res.INT8...) {
		t.Logf("%-45s per core %8.1f G/s, all cores %8.1f G/s, theoretical per core %8.1f G/s", f.ISA, f.PerCore/1e9, f.AllCores/1e9, f.TheoreticalPerCore/1e9)
		if !(f.PerCore > 0) || !(f.AllCores > 0) {
			t.Errorf("%s: non-positive rate %+v", f.ISA, f)
		}
		if f.TheoreticalPerCore > 0 && f.PerCore > 1.5*f.TheoreticalPerCore {
			t.Errorf("%s: measured %g is far above the theoretical %g: the loop or its op count is wrong", f.ISA, f.PerCore, f.TheoreticalPerCore)
		}
	}
	t.Logf("theoretical per core: FP32 %.1f GFLOP/s, INT8 %.1f GOP/s (%s)", res.TheoreticalFP32/1e9, res.TheoreticalINT8/1e9, res.TheoreticalNote)
	if f := Detected(); f.AVX2 && f.FMA && res.TheoreticalFP32 < 16*res.FrequencyHz {
		t.Errorf("theoretical FP32 %g below one 256-bit FMA unit at %g Hz", res.TheoreticalFP32, res.FrequencyHz)
	}
	if res.BestFP32 <= 0 || res.BestINT8 <= 0 {
		t.Errorf("best rates %g, %g", res.BestFP32, res.BestINT8)
	}
	m := res.Memory
	if m == nil || m.ReadPerCore <= 0 || m.CopyPerCore <= 0 || m.ReadAllCores <= 0 || m.CopyAllCores <= 0 {
		t.Fatalf("memory figures %+v", m)
	}
	t.Logf("memory (%d MiB): read %.1f GB/s, copy %.1f GB/s per core; all cores %.1f / %.1f GB/s",
		m.BufferBytes>>20, m.ReadPerCore/1e9, m.CopyPerCore/1e9, m.ReadAllCores/1e9, m.CopyAllCores/1e9)
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back PeakResult
	if err := json.Unmarshal(b, &back); err != nil || back.BestFP32 != res.BestFP32 || back.FrequencySource != res.FrequencySource {
		t.Fatalf("JSON round trip: %v, %+v", err, back)
	}
	for _, key := range []string{`"fp32"`, `"int8"`, `"frequency_hz"`, `"memory"`, `"read_all_cores"`, `"theoretical_per_core"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

func TestMeasurePeakErrors(t *testing.T) {
	tests := []struct {
		name string
		opts PeakOptions
		want string
	}{
		{"duration", PeakOptions{Duration: time.Hour}, "duration 1h0m0s out of range"},
		{"burst", PeakOptions{Burst: time.Nanosecond}, "burst 1ns out of range"},
		{"burstLong", PeakOptions{Duration: time.Millisecond, Burst: time.Second}, "burst 1s out of range"},
		{"badCPU", PeakOptions{Duration: time.Millisecond, Burst: time.Millisecond, CPUs: []int{100000}}, "bind a thread"},
		{"dup", PeakOptions{CPUs: []int{0, 0}}, "negative or repeated"},
		{"neg", PeakOptions{CPUs: []int{-5}}, "negative or repeated"},
		{"fma", PeakOptions{FMAPerCycle256: -1}, "must not be negative"},
		{"membuf", PeakOptions{Duration: time.Millisecond, Burst: time.Millisecond, CPUs: []int{0}, MemoryBytes: 1000}, "memory buffer 1000 bytes out of range"},
	}
	for _, tc := range tests {
		_, err := MeasurePeak(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestRoofline(t *testing.T) {
	peak := PeakResult{BestFP32: 100e9, BestINT8: 400e9, Memory: &MemoryFigure{ReadAllCores: 10e9}}
	tests := []struct {
		name            string
		ops, bytes      float64
		lat             time.Duration
		int8            bool
		bound           string
		ceiling, ofPeak float64
	}{
		// Intensity 100 op/B: 100*10e9 = 1e12 > 100e9, compute bound.
		{"compute", 1e9, 1e7, 20 * time.Millisecond, false, "compute", 100e9, 0.5},
		// Intensity 1 op/B: 10e9 < 100e9, memory bound.
		{"memory", 1e8, 1e8, 20 * time.Millisecond, false, "memory", 10e9, 0.05},
		{"no-bytes", 4e9, 0, 20 * time.Millisecond, true, "compute", 400e9, 0.5},
	}
	for _, tc := range tests {
		f := Roofline
		if tc.int8 {
			f = RooflineINT8
		}
		p, err := f(tc.ops, tc.bytes, tc.lat, peak)
		if err != nil {
			t.Fatal(err)
		}
		if p.Bound != tc.bound || math.Abs(p.Ceiling-tc.ceiling) > 1 || math.Abs(p.FractionOfPeak-tc.ofPeak) > 1e-9 {
			t.Errorf("%s: %+v; want bound %s ceiling %g fraction %g", tc.name, p, tc.bound, tc.ceiling, tc.ofPeak)
		}
		if want := p.Achieved / p.Ceiling; math.Abs(p.FractionOfCeiling-want) > 1e-12 {
			t.Errorf("%s: fraction of ceiling %g, want %g", tc.name, p.FractionOfCeiling, want)
		}
	}
	if _, err := Roofline(1, 1, 0, peak); err == nil || !strings.Contains(err.Error(), "positive latency") {
		t.Errorf("zero latency: %v", err)
	}
	if _, err := Roofline(1, 1, time.Second, PeakResult{}); err == nil || !strings.Contains(err.Error(), "must be measured") {
		t.Errorf("empty peak: %v", err)
	}
}
