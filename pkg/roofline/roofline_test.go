package roofline

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/kernels"
)

func TestPlace(t *testing.T) {
	peak := kernels.PeakResult{
		CPUs:     []int{0, 1},
		BestFP32: 400e9, BestINT8: 1600e9,
		FP32: []kernels.ComputeFigure{{ISA: "avx2-fma", AllCores: 200e9}, {ISA: "avx512-fma", AllCores: 400e9}},
		INT8: []kernels.ComputeFigure{{ISA: "avx512-vnni", AllCores: 1600e9}},
	}
	cases := []struct {
		name     string
		flops    float64
		p50      time.Duration
		int8     bool
		achieved float64
		fraction float64
		isa      string
		summary  string
		err      string
	}{
		{name: "fp32", flops: 4e9, p50: 20 * time.Millisecond, achieved: 200e9, fraction: 0.5, isa: "avx512-fma",
			summary: "4 GFLOP per inference (counted on m.pt) at p50 20 ms: 200 GFLOP/s, 50.0% of the measured FP32 peak (400 GFLOP/s, avx512-fma, 2 CPUs)"},
		{name: "int8", flops: 4e9, p50: 10 * time.Millisecond, int8: true, achieved: 400e9, fraction: 0.25, isa: "avx512-vnni",
			summary: "4 GOP per inference (counted on m.pt) at p50 10 ms: 400 GOP/s, 25.0% of the measured INT8 peak (1.6 TOP/s, avx512-vnni, 2 CPUs)"},
		{name: "no work", flops: 0, p50: time.Millisecond, err: "no convolution or matrix product"},
		{name: "no latency", flops: 1e6, p50: 0, err: "positive latency"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Place(c.flops, map[string]float64{"aten::_convolution": c.flops}, "m.pt", c.p50, c.int8, peak)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(r.Achieved-c.achieved) > 1e-6*c.achieved || math.Abs(r.Fraction-c.fraction) > 1e-9 || r.PeakISA != c.isa {
				t.Errorf("achieved %g, fraction %g, isa %q; want %g, %g, %q", r.Achieved, r.Fraction, r.PeakISA, c.achieved, c.fraction, c.isa)
			}
			if got := r.Summary(); got != c.summary {
				t.Errorf("summary\n got %s\nwant %s", got, c.summary)
			}
		})
	}
	if _, err := Place(1e9, nil, "m.pt", time.Millisecond, false, kernels.PeakResult{}); err == nil || !strings.Contains(err.Error(), "measured") {
		t.Errorf("unmeasured peak: err = %v", err)
	}
}

func TestIsINT8(t *testing.T) {
	for prec, want := range map[string]bool{"fp32": false, "int8-static": true, "int8-dynamic": true, "INT8": true, "": false} {
		if got := IsINT8(prec); got != want {
			t.Errorf("IsINT8(%q) = %v, want %v", prec, got, want)
		}
	}
}

// Measure on the digits fixture: the count is the architecture's, the peak is measured once per
// CPU set and reused, and the achieved rate lies below the peak.
func TestMeasureDigits(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "digits")
	m, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	arr := f.InputArrays(t)[0]
	x, err := torch.NewTensorAny(arr.Data, arr.Shape)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	start := time.Now()
	r, err := Measure(m, "digits.pt", []*torch.Tensor{x}, 100*time.Microsecond, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	if r.FLOPs != 675072 || len(r.CPUs) != 1 || r.Peak <= 0 || r.Fraction <= 0 || r.Fraction > 1 {
		t.Errorf("roofline %+v: want 675072 FLOP on 1 CPU, a positive peak, a fraction in (0, 1]", r)
	}
	r2, err := Measure(m, "digits.pt", []*torch.Tensor{x}, 100*time.Microsecond, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Both placed against the one peak measured for this CPU set: a second measurement would
	// give other figures (timing, not a test of speed).
	peak, err := Peak(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    *Roofline
		int8 bool
	}{{r, false}, {r2, true}} {
		want, err := Place(c.r.FLOPs, c.r.ByOp, c.r.CountedOn, 100*time.Microsecond, c.int8, peak)
		if err != nil {
			t.Fatal(err)
		}
		if c.r.Peak != want.Peak || c.r.PeakISA != want.PeakISA {
			t.Errorf("%s roofline against a peak of %g (%s), the cached one is %g (%s): the peak was measured again",
				c.r.Precision, c.r.Peak, c.r.PeakISA, want.Peak, want.PeakISA)
		}
	}
	if r2.Precision != "int8" || r2.Peak <= r.Peak/2 {
		t.Errorf("int8 roofline %+v: want the INT8 peak (above half the FP32 one %g)", r2, r.Peak)
	}
	t.Logf("%s (first call %v)", r.Summary(), first)
	t.Logf("%s", r2.Summary())
}
