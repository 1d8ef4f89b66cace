package pipeline

import (
	"math"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// nonFiniteCount counts NaN and both infinities (a reference holding them is refused or noted).
func TestNonFiniteCount(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
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
