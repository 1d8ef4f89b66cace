package pipeline

import (
	"math"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// NaN and infinities are compared explicitly: the same non-finite value at the same place
// agrees, anything else is an infinite difference (never a silent 0 or a NaN that compares
// false against every threshold).
func TestAgreementNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		name     string
		ref, got []float64
		maxAbs   float64
	}{
		{"same NaN", []float64{1, nan, 2}, []float64{1, nan, 2}, 0},
		{"same +Inf", []float64{inf, 3}, []float64{inf, 3}, 0},
		{"NaN vs number", []float64{1, nan}, []float64{1, 0}, inf},
		{"number vs NaN", []float64{1, 2}, []float64{1, nan}, inf},
		{"+Inf vs -Inf", []float64{inf}, []float64{-inf}, inf},
		{"finite", []float64{1, 2}, []float64{1, 2.5}, 0.5},
	} {
		maxAbs, cos, err := agreement([][]float64{c.ref}, [][]float64{c.got})
		if err != nil || maxAbs != c.maxAbs || math.IsNaN(cos) {
			t.Errorf("%s: max abs %v (want %v), cosine %v, err %v", c.name, maxAbs, c.maxAbs, cos, err)
		}
	}
	if n := nonFiniteCount([][]float64{{1, nan}, {inf, -inf, 0}}); n != 3 {
		t.Errorf("nonFiniteCount = %d, want 3", n)
	}
}

// A cosine over a 1-element output (e.g. [1, 1]) is reported as not meaningful, not as a
// figure that can pass or fail.
func TestOneElementCosine(t *testing.T) {
	if cosineMeaningful([][]float64{{0.3}, {0.1}}) || !cosineMeaningful([][]float64{{0.3}, {0.1, 0.2}}) {
		t.Fatal("cosineMeaningful")
	}
	res := &validate.Result{Samples: 10, Cosine: 0, MaxAbsError: 0, Top1Agreement: -1, AccuracyDrop: -1}
	v := validationOf(&quant.Outcome{Validation: res}, "calib.npy", false, false)
	if v.Metrics.Cosine != nil || v.Metrics.MinSampleCosine != nil || v.Metrics.MaxAbsError == nil {
		t.Errorf("metrics %+v: want no cosine, a max abs error", v.Metrics)
	}
	if len(v.Notes) != 1 || !strings.Contains(v.Notes[0], "not meaningful") {
		t.Errorf("notes %q", v.Notes)
	}
	if v.Metrics.Top1Agreement != nil || v.Metrics.Top1Original != nil {
		t.Errorf("not measured figures are not null: %+v", v.Metrics)
	}
}
