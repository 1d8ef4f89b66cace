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

// procs returns a setting measured in one process per ms given, each timing rounds rounds of
// 10 latencies around its ms (see lat; tailEvery and tailX as there).
func procs(name string, rounds, tailEvery int, tailX float64, ms ...float64) *ProcessResult {
	r := &ProcessResult{Name: name}
	for _, m := range ms {
		b, err := SplitRounds(lat(m, rounds*10, tailEvery, tailX), 10)
		if err != nil {
			panic(err)
		}
		r.Blocks = append(r.Blocks, b)
	}
	return r
}

// one is a setting measured in one process of 20 rounds.
func one(name string, s []time.Duration) *ProcessResult {
	b, err := SplitRounds(s, 10)
	if err != nil {
		panic(err)
	}
	return &ProcessResult{Name: name, Blocks: [][][]time.Duration{b}}
}

func TestChooseRuntime(t *testing.T) {
	def := one("default", lat(10, 200, 0, 1))
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
			var others []*ProcessResult
			// A fixed order: map iteration is random, the decision must not depend on it.
			for _, n := range []string{"passive-short-spin", "passive", "active", "jemalloc"} {
				if s, ok := c.others[n]; ok {
					others = append(others, one(n, s))
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
	def := one("default", lat(10, 20, 0, 1))
	if _, err := ChooseRuntime(def, nil, []*ProcessResult{{Name: "x"}}, 1, 1); err == nil || !strings.Contains(err.Error(), "x") {
		t.Errorf("a setting without samples: %v", err)
	}
	if _, err := ChooseRuntime(def, nil, []*ProcessResult{nil}, 1, 1); err == nil {
		t.Error("a nil setting: no error")
	}
	if _, err := ChooseRuntime(def, nil, []*ProcessResult{procs("x", 3, 0, 1, 9)}, 1, 1); err == nil || !strings.Contains(err.Error(), "rounds") {
		t.Errorf("a setting with fewer rounds: %v", err)
	}
	if _, err := SplitRounds(lat(1, 15, 0, 1), 10); err == nil {
		t.Error("15 latencies in rounds of 10: no error")
	}
}

// The interval of a ratio spans the differences between processes: two processes of the same
// setting 20% apart give an interval at least that wide, however steady each one is.
func TestProcessRatioCI(t *testing.T) {
	base := procs("default", 6, 0, 1, 10, 10)
	steady := procs("same", 6, 0, 1, 10, 10)
	r, lo, hi, err := ProcessRatioCI(base, steady, DefaultResamples, 1)
	if err != nil || r < 0.99 || r > 1.01 || lo > 1 || hi < 1 || hi-lo > 0.05 {
		t.Errorf("same latencies: ratio %.3f [%.3f, %.3f], %v", r, lo, hi, err)
	}
	spread := procs("spread", 6, 0, 1, 9, 11)
	r, lo, hi, err = ProcessRatioCI(base, spread, DefaultResamples, 1)
	if err != nil || r < 0.99 || r > 1.01 || lo > 0.92 || hi < 1.08 {
		t.Errorf("processes 9 and 11 ms: ratio %.3f [%.3f, %.3f], want about [0.9, 1.1]: %v", r, lo, hi, err)
	}
	if _, _, _, err := ProcessRatioCI(base, procs("longer", 12, 0, 1, 10), DefaultResamples, 1); err == nil {
		t.Error("12 rounds against 6: no error")
	}
}

// Golden cases of the multi-process decision. Groups of processes with libtorch's defaults
// differ by themselves: a 2x effect is decided all the same, a control whose processes
// differ only between groups makes a 20% effect "too noisy to decide".
func TestChooseRuntimeProcesses(t *testing.T) {
	t.Run("2x effect with a wide spread between processes", func(t *testing.T) {
		def := procs("default", 6, 0, 1, 10, 13)
		ctl := procs("default (second group)", 6, 0, 1, 11.5, 12)
		thp := procs("thp", 6, 0, 1, 5, 6.5)
		ch, err := ChooseRuntime(def, ctl, []*ProcessResult{thp}, 1.02, 1)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Noisy || ch.Chosen != "thp" || ch.Spread != 1 {
			t.Fatalf("noisy %v chosen %s spread %.2f: %s %+v", ch.Noisy, ch.Chosen, ch.Spread, ch.Why, ch.Verdicts)
		}
		v := ch.Verdicts[1]
		if v.Processes != 2 || v.RatioHi >= 0.7 || v.RatioLo > v.Ratio || v.RatioHi-v.RatioLo < 0.1 || !strings.Contains(v.Why, "over 2 process(es)") {
			t.Errorf("thp verdict %+v", v)
		}
		if ch.Verdicts[0].Processes != 4 {
			t.Errorf("defaults compared over %d processes, want both groups (4)", ch.Verdicts[0].Processes)
		}
	})
	t.Run("control differing only between groups", func(t *testing.T) {
		def := procs("default", 6, 0, 1, 10, 10.5)
		ctl := procs("default (second group)", 6, 0, 1, 13, 13.5)
		passive := procs("passive", 6, 0, 1, 9, 9.5)
		ch, err := ChooseRuntime(def, ctl, []*ProcessResult{passive}, 1.02, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !ch.Noisy || ch.Chosen != "default" || ch.Spread < 1.2 || !strings.Contains(ch.Why, "too noisy to decide") {
			t.Fatalf("noisy %v chosen %s spread %.2f: %s", ch.Noisy, ch.Chosen, ch.Spread, ch.Why)
		}
		if v := ch.Verdicts[1]; !strings.Contains(v.Why, "not kept: too noisy to decide") {
			t.Errorf("passive: %s", v.Why)
		}
		last := ch.Verdicts[len(ch.Verdicts)-1]
		if last.Name != "default (second group)" || last.Kept || !strings.HasPrefix(last.Why, "control:") || last.RatioLo <= 1 {
			t.Errorf("control verdict %+v", last)
		}
		// A 2x effect clears even that spread.
		thp := procs("thp", 6, 0, 1, 5, 5.2)
		ch, err = ChooseRuntime(def, ctl, []*ProcessResult{passive, thp}, 1.02, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !ch.Noisy || ch.Chosen != "thp" || !strings.Contains(ch.Verdicts[2].Why, "kept: ") {
			t.Errorf("noisy %v chosen %s: %s %+v", ch.Noisy, ch.Chosen, ch.Why, ch.Verdicts)
		}
	})
}
