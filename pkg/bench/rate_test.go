package bench

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestWindowRate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		streams [][]float64
		rate    float64 // items per second, worked by hand
		window  float64
	}{
		// One stream: all its calls in its own total time.
		{"one stream", [][]float64{{1e6, 1e6, 2e6}}, 3 / 4e-3, 4e6},
		// The window ends with stream 1 at 3 ms; stream 2 completed 1 call (2 ms) and half of
		// its second (2 ms long, 1 ms of it inside): 3 + 1.5 items in 3 ms.
		{"window ends with the first stream done", [][]float64{{1e6, 1e6, 1e6}, {2e6, 2e6, 2e6}}, 4.5 / 3e-3, 3e6},
		// Equal streams: every call of each counts.
		{"equal streams", [][]float64{{5e5, 5e5}, {5e5, 5e5}}, 4 / 1e-3, 1e6},
	} {
		rate, w, err := WindowRate(tc.streams)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if math.Abs(rate-tc.rate) > 1e-9*tc.rate || w != tc.window {
			t.Errorf("%s: rate %v window %v, want %v and %v", tc.name, rate, w, tc.rate, tc.window)
		}
	}
	for _, bad := range [][][]float64{nil, {{1e6}, {}}, {{1e6, 0}}, {{math.NaN()}}, {{-1}}, {{math.Inf(1)}}} {
		if _, _, err := WindowRate(bad); err == nil {
			t.Errorf("WindowRate(%v): want an error", bad)
		}
	}
}

func TestPairedRatioOfMediansCI(t *testing.T) {
	// Round-to-round swings shared by both sides cancel in pairs: other is base x 1.5 with a
	// machine that is twice as fast in some rounds, so the interval stays tight around 1.5.
	r := rand.New(rand.NewPCG(1, 2))
	var base, other []float64
	for i := range 12 {
		level := 1000.0
		if i%3 == 0 {
			level = 2000
		}
		base = append(base, level*(1+0.01*r.NormFloat64()))
		other = append(other, 1.5*level*(1+0.01*r.NormFloat64()))
	}
	ratio, lo, hi, err := PairedRatioOfMediansCI(base, other, Confidence, 2000, 7)
	if err != nil {
		t.Fatal(err)
	}
	want := median(append([]float64(nil), other...)) / median(append([]float64(nil), base...))
	if ratio != want {
		t.Errorf("ratio %v, want the ratio of medians %v", ratio, want)
	}
	if !(lo <= ratio && ratio <= hi) || lo < 1.3 || hi > 1.7 {
		t.Errorf("interval [%v, %v] around %v: want it to hold the ratio and stay near 1.5", lo, hi, ratio)
	}
	// NaN rounds are left out, and too few rounds are refused.
	base[0] = math.NaN()
	if _, _, _, err := PairedRatioOfMediansCI(base, other, Confidence, 100, 7); err != nil {
		t.Errorf("a NaN round: %v; want it left out", err)
	}
	if _, _, _, err := PairedRatioOfMediansCI(base[:3], other[:3], Confidence, 100, 7); err == nil {
		t.Error("3 rounds: want an error")
	}
	if _, _, _, err := PairedRatioOfMediansCI(base, other[:5], Confidence, 100, 7); err == nil {
		t.Error("unpaired lengths: want an error")
	}
}
