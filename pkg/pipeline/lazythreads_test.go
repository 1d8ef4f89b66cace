package pipeline

import (
	"strings"
	"testing"
	"time"
)

// spread is n latencies around med, spread evenly over ±frac of it.
func spread(med time.Duration, frac float64, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		f := 1 + frac*(2*float64(i)/float64(n-1)-1)
		out[i] = time.Duration(float64(med) * f)
	}
	return out
}

// INT8 measured at n threads against FP32 at n leaves FP32's own count unmeasured only when it
// wins by more than linear scaling could give FP32 at the most threads, beyond doubt, and only
// when no count below n is tried.
func TestINT8BeatsEveryCount(t *testing.T) {
	int8 := spread(10*time.Millisecond, 0.05, 30)
	cases := []struct {
		name   string
		fp32   time.Duration
		n      int
		counts []int
		want   bool
	}{
		{"2.5x at 1 thread, up to 2", 25 * time.Millisecond, 1, []int{1, 2}, true},
		{"1.9x at 1 thread, up to 2: 2 threads could win", 19 * time.Millisecond, 1, []int{1, 2}, false},
		{"2.05x at 1 thread: inside the interval of 2.04", 20500 * time.Microsecond, 1, []int{1, 2}, false},
		{"2.5x at 1 thread, up to 4", 25 * time.Millisecond, 1, []int{1, 2, 4}, false},
		{"5x at 1 thread, up to 4", 50 * time.Millisecond, 1, []int{1, 2, 4}, true},
		{"3x at 2 threads, 1 tried too", 30 * time.Millisecond, 2, []int{1, 2}, false},
		{"1.5x at 2 threads, 2 the only count", 15 * time.Millisecond, 2, []int{2}, true},
		{"no counts", 50 * time.Millisecond, 1, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			why := int8BeatsEveryCount(int8, spread(c.fp32, 0.05, 30), c.n, c.counts, 1.02, 1)
			if (why != "") != c.want {
				t.Fatalf("got %q, want holds=%v", why, c.want)
			}
			if c.want && !strings.Contains(why, "linear scaling") {
				t.Errorf("the reason does not name the bound: %q", why)
			}
		})
	}
}
