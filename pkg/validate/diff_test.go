package validate

import (
	"math"
	"testing"
)

func TestDiffCosine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ref, got []float64
		want     float64
	}{
		{"identical", []float64{1}, []float64{1}, 1},
		{"orthogonal", []float64{1, 0}, []float64{0, 1}, 0},
		{"opposite", []float64{2}, []float64{-1}, -1},
		{"both zero: identical", []float64{0, 0}, []float64{0, 0}, 1},
		{"one zero", []float64{0, 0}, []float64{1, 1}, 0},
		{"by hand", []float64{2, 0}, []float64{1.5, math.Sqrt(4 - 1.5*1.5)}, 0.75},
	} {
		if got := DiffOf(tc.ref, tc.got).Cosine(); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: cosine %g, want %g", tc.name, got, tc.want)
		}
	}
}

// NaN and infinities are compared explicitly: the same non-finite value at the same place
// agrees, anything else is an infinite difference with cosine 0 (never a silent 0 or a NaN
// that compares false against every threshold).
func TestDiffNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		name     string
		ref, got []float64
		maxAbs   float64
		cos      float64
	}{
		{"same NaN", []float64{1, nan, 2}, []float64{1, nan, 2}, 0, 1},
		{"same +Inf", []float64{inf, 3}, []float64{inf, 3}, 0, 1},
		{"NaN vs number", []float64{1, nan}, []float64{1, 0}, inf, 0},
		{"number vs NaN", []float64{1, 2}, []float64{1, nan}, inf, 0},
		{"+Inf vs -Inf", []float64{inf}, []float64{-inf}, inf, 0},
		{"finite", []float64{1, 2}, []float64{1, 2.5}, 0.5, 1},
	} {
		maxAbs, cos, err := CompareOutputs([][]float64{c.ref}, [][]float64{c.got})
		if err != nil || maxAbs != c.maxAbs || math.IsNaN(cos) || (c.cos == 0 && cos != 0) || (c.cos == 1 && cos < 0.99) {
			t.Errorf("%s: max abs %v (want %v), cosine %v (want %v), err %v", c.name, maxAbs, c.maxAbs, cos, c.cos, err)
		}
		// float32 data (what validation compares) gives the same verdict.
		r32, g32 := make([]float32, len(c.ref)), make([]float32, len(c.got))
		for i := range c.ref {
			r32[i], g32[i] = float32(c.ref[i]), float32(c.got[i])
		}
		if d := DiffOf(r32, g32); d.MaxAbs() != maxAbs || d.Cosine() != cos {
			t.Errorf("%s: float32 max abs %v cosine %v, float64 %v %v", c.name, d.MaxAbs(), d.Cosine(), maxAbs, cos)
		}
	}
	if _, _, err := CompareOutputs([][]float64{{1}}, nil); err == nil {
		t.Error("a missing output compares")
	}
	if _, _, err := CompareOutputs([][]float64{{1, 2}}, [][]float64{{1}}); err == nil {
		t.Error("outputs of different sizes compare")
	}
}

// Merged per-sample Diffs are the whole output's: sums add, maxima carry, a mismatch anywhere
// makes the whole cosine 0 and the mean error infinite.
func TestDiffMerge(t *testing.T) {
	a := DiffOf([]float32{1, 2}, []float32{1, 3})
	b := DiffOf([]float32{-4, 0}, []float32{-4, 0})
	var all Diff
	all.Merge(a)
	all.Merge(b)
	whole := DiffOf([]float32{1, 2, -4, 0}, []float32{1, 3, -4, 0})
	if all != whole {
		t.Errorf("merged %+v, whole %+v", all, whole)
	}
	if all.MaxAbs() != 1 || all.MeanAbs() != 0.25 || all.RefMaxAbs() != 4 {
		t.Errorf("max abs %v mean abs %v ref max %v, want 1 0.25 4", all.MaxAbs(), all.MeanAbs(), all.RefMaxAbs())
	}
	all.Merge(DiffOf([]float32{1}, []float32{float32(math.NaN())}))
	if all.Cosine() != 0 || !math.IsInf(all.MeanAbs(), 1) {
		t.Errorf("after a NaN: cosine %v mean abs %v, want 0 and +Inf", all.Cosine(), all.MeanAbs())
	}
}
