package bench

import (
	"strings"
	"testing"
	"time"
)

// lat returns n latencies around ms (a deterministic spread of +-2%), with every tailEvery-th
// one (0: none) tailX times longer.
func lat(ms float64, n, tailEvery int, tailX float64) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		v := ms * (0.98 + 0.04*float64((i*37)%101)/100)
		if tailEvery > 0 && i%tailEvery == 0 {
			v *= tailX
		}
		out[i] = time.Duration(v * 1e6)
	}
	return out
}

func TestChooseRuntime(t *testing.T) {
	def := &Result{Name: "default", Samples: lat(10, 200, 0, 1)}
	cases := []struct {
		name       string
		others     map[string][]time.Duration
		minSpeedup float64
		chosen     string
		why        map[string]string
	}{
		{"nothing else", nil, 1.02, "default", map[string]string{"default": "kept: no other setting"}},
		{"faster wins", map[string][]time.Duration{"active": lat(9, 200, 0, 1)}, 1.02, "active",
			map[string]string{"active": "kept: 1.11x faster at p50", "default": "not kept: active is faster"}},
		{"tie keeps the defaults", map[string][]time.Duration{"passive": lat(10, 200, 0, 1)}, 1.02, "default",
			map[string]string{"passive": "not faster at p50 beyond doubt"}},
		{"slower", map[string][]time.Duration{"passive": lat(12, 200, 0, 1)}, 1.02, "default",
			map[string]string{"passive": "slower at p50"}},
		{"faster but a worse tail", map[string][]time.Duration{"passive-short-spin": lat(9, 200, 5, 3)}, 1.02, "default",
			map[string]string{"passive-short-spin": "worse p95"}},
		{"faster by less than min_speedup", map[string][]time.Duration{"jemalloc": lat(9.9, 200, 0, 1)}, 1.05, "default",
			map[string]string{"jemalloc": "less than the minimum speedup 1.05x"}},
		{"the fastest winner is kept", map[string][]time.Duration{"active": lat(9, 200, 0, 1), "jemalloc": lat(8, 200, 0, 1)}, 1.02, "jemalloc",
			map[string]string{"active": "jemalloc is faster still", "jemalloc": "kept: 1.25x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var others []*Result
			// A fixed order: map iteration is random, the decision must not depend on it.
			for _, n := range []string{"passive-short-spin", "passive", "active", "jemalloc"} {
				if s, ok := c.others[n]; ok {
					others = append(others, &Result{Name: n, Samples: s})
				}
			}
			ch, err := ChooseRuntime(def, nil, others, c.minSpeedup, 1)
			if err != nil {
				t.Fatal(err)
			}
			if ch.Chosen != c.chosen {
				t.Errorf("chose %s, want %s: %+v", ch.Chosen, c.chosen, ch.Verdicts)
			}
			if len(ch.Verdicts) != 1+len(others) || ch.Verdicts[0].Name != "default" || ch.Verdicts[0].Ratio != 1 {
				t.Fatalf("verdicts %+v", ch.Verdicts)
			}
			kept := 0
			for _, v := range ch.Verdicts {
				if v.Kept {
					kept++
					if v.Name != c.chosen {
						t.Errorf("%s kept, chose %s", v.Name, c.chosen)
					}
				}
				if want, ok := c.why[v.Name]; ok && !strings.Contains(v.Why, want) {
					t.Errorf("%s: why %q lacks %q", v.Name, v.Why, want)
				}
				if v.Name != "default" && (v.RatioLo > v.Ratio || v.Ratio > v.RatioHi) {
					t.Errorf("%s: ratio %.3f outside its interval %.3f-%.3f", v.Name, v.Ratio, v.RatioLo, v.RatioHi)
				}
			}
			if kept != 1 {
				t.Errorf("%d settings kept, want 1", kept)
			}
		})
	}
}

func TestChooseRuntimeBadInput(t *testing.T) {
	if _, err := ChooseRuntime(nil, nil, nil, 1, 1); err == nil {
		t.Error("no defaults: no error")
	}
	def := &Result{Name: "default", Samples: lat(10, 20, 0, 1)}
	if _, err := ChooseRuntime(def, nil, []*Result{{Name: "x"}}, 1, 1); err == nil || !strings.Contains(err.Error(), "x") {
		t.Errorf("a setting without samples: %v", err)
	}
	if _, err := ChooseRuntime(def, nil, []*Result{nil}, 1, 1); err == nil {
		t.Error("a nil setting: no error")
	}
}

// A second process with the defaults is the control: when it differs from the first beyond
// doubt, processes differ by themselves and nothing is kept, however fast a candidate looked.
func TestChooseRuntimeControl(t *testing.T) {
	def := &Result{Name: "default", Samples: lat(10, 200, 0, 1)}
	fast := &Result{Name: "active", Samples: lat(8, 200, 0, 1)}
	for _, c := range []struct {
		name    string
		control []time.Duration
		noisy   bool
		chosen  string
	}{
		{"control agrees", lat(10, 200, 0, 1), false, "active"},
		{"control differs", lat(30, 200, 0, 1), true, "default"},
		{"control faster", lat(7, 200, 0, 1), true, "default"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch, err := ChooseRuntime(def, &Result{Name: "default (second process)", Samples: c.control}, []*Result{fast}, 1.02, 1)
			if err != nil {
				t.Fatal(err)
			}
			if ch.Noisy != c.noisy || ch.Chosen != c.chosen {
				t.Fatalf("noisy %v chosen %s, want %v %s: %s %+v", ch.Noisy, ch.Chosen, c.noisy, c.chosen, ch.Why, ch.Verdicts)
			}
			last := ch.Verdicts[len(ch.Verdicts)-1]
			if last.Name != "default (second process)" || last.Kept || !strings.HasPrefix(last.Why, "control:") {
				t.Errorf("control verdict %+v", last)
			}
			if c.noisy && (!strings.Contains(ch.Why, "too noisy to decide") || !strings.Contains(ch.Verdicts[1].Why, "not kept: too noisy")) {
				t.Errorf("why %q, active %q", ch.Why, ch.Verdicts[1].Why)
			}
		})
	}
}
