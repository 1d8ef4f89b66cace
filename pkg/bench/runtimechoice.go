package bench

import (
	"errors"
	"fmt"
	"strings"
)

// RuntimeVerdict is one runtime setting measured against the runtime's defaults.
type RuntimeVerdict struct {
	Name string `json:"name"`
	// Stats summarizes its latencies.
	Stats Summary `json:"stats"`
	// Ratio is its p50 over the defaults' (1 for the defaults), with the bootstrap 95%
	// interval; P95Ratio is the same for p95 (no interval).
	Ratio    float64 `json:"ratio"`
	RatioLo  float64 `json:"ratio_ci_lo"`
	RatioHi  float64 `json:"ratio_ci_hi"`
	P95Ratio float64 `json:"p95_ratio"`
	// Wins: faster at p50 beyond doubt and by at least the minimum speedup, with a p95 no
	// worse than the defaults'. Kept: the one chosen (the defaults when nothing wins).
	Wins bool `json:"wins"`
	Kept bool `json:"kept"`
	// Why says why it was kept or not, with the figures.
	Why string `json:"why"`
}

// RuntimeChoice is the outcome of ChooseRuntime.
type RuntimeChoice struct {
	// Chosen is the name of the setting kept.
	Chosen   string           `json:"chosen"`
	Verdicts []RuntimeVerdict `json:"verdicts"`
	// Noisy: two processes with the same (default) settings differed beyond doubt, so a
	// difference between settings cannot be told from one between processes; the defaults
	// are kept and Why says so.
	Noisy bool   `json:"noisy"`
	Why   string `json:"why"`
}

// ChooseRuntime decides between runtime settings measured in the same rounds: defaults (the
// runtime's own, always a candidate) and others. A setting wins when its p50 is lower than the
// defaults' beyond doubt (the 95% interval of the ratio of medians lies below 1), by at least
// minSpeedup (defaults' p50 / its p50; 1 or less: any), and its p95 is not higher than the
// defaults'. Of the winners the one with the lowest p50 is kept; with none, the defaults are.
// Defaults are what plain libtorch runs with, so a setting that only ties, or trades the tail
// for the median, is not worth changing a user's environment for.
//
// control, when not nil, is a second process with the defaults, measured in the same rounds:
// when its p50 differs from the first's beyond doubt (the interval excludes 1), processes
// differ by themselves (on a loaded machine one process's OpenMP workers can keep missing
// each other, 50x slower for its whole life), nothing is kept, and Why says the machine was
// too noisy to decide. It is the last verdict.
func ChooseRuntime(defaults, control *Result, others []*Result, minSpeedup float64, seed uint64) (*RuntimeChoice, error) {
	if defaults == nil {
		return nil, errors.New("choose runtime: no measurement of the defaults")
	}
	base, err := Summarize(defaults.Samples)
	if err != nil {
		return nil, fmt.Errorf("choose runtime: %s: %w", defaults.Name, err)
	}
	ch := &RuntimeChoice{Chosen: defaults.Name}
	ch.Verdicts = append(ch.Verdicts, RuntimeVerdict{Name: defaults.Name, Stats: base, Ratio: 1, RatioLo: 1, RatioHi: 1, P95Ratio: 1})
	best := -1
	for i, o := range others {
		if o == nil {
			return nil, fmt.Errorf("choose runtime: setting %d has no measurement", i+1)
		}
		st, err := Summarize(o.Samples)
		if err != nil {
			return nil, fmt.Errorf("choose runtime: %s: %w", o.Name, err)
		}
		p, err := ComparePair(defaults, o, DefaultResamples, seed+uint64(i)+1)
		if err != nil {
			return nil, err
		}
		v := RuntimeVerdict{Name: o.Name, Stats: st, Ratio: p.Ratio, RatioLo: p.RatioLo, RatioHi: p.RatioHi}
		if base.P95 > 0 {
			v.P95Ratio = float64(st.P95) / float64(base.P95)
		}
		judgeRuntime(&v, defaults.Name, minSpeedup)
		ch.Verdicts = append(ch.Verdicts, v)
		if v.Wins && (best < 0 || v.Stats.P50 < ch.Verdicts[best].Stats.P50) {
			best = len(ch.Verdicts) - 1
		}
	}
	if control != nil {
		st, err := Summarize(control.Samples)
		if err != nil {
			return nil, fmt.Errorf("choose runtime: %s: %w", control.Name, err)
		}
		p, err := ComparePair(defaults, control, DefaultResamples, seed)
		if err != nil {
			return nil, err
		}
		v := RuntimeVerdict{Name: control.Name, Stats: st, Ratio: p.Ratio, RatioLo: p.RatioLo, RatioHi: p.RatioHi}
		if base.P95 > 0 {
			v.P95Ratio = float64(st.P95) / float64(base.P95)
		}
		ci := fmt.Sprintf("p50 ratio %.3f (95%% CI %.3f-%.3f) vs %s", v.Ratio, v.RatioLo, v.RatioHi, defaults.Name)
		v.Why = "control: the same settings in another process: " + ci
		ch.Verdicts = append(ch.Verdicts, v)
		if v.RatioLo > 1 || v.RatioHi < 1 {
			ch.Noisy = true
			ch.Why = "too noisy to decide: two processes with libtorch's defaults differed beyond doubt (" + ci + "); libtorch's defaults kept: rerun on a quiet machine"
			ch.Verdicts[0].Kept = true
			ch.Verdicts[0].Why = "kept: " + ch.Why
			for i := 1; i < len(ch.Verdicts)-1; i++ {
				ch.Verdicts[i].Why = "not kept: too noisy to decide (see the control); " + strings.TrimPrefix(strings.TrimPrefix(ch.Verdicts[i].Why, "not kept: "), "kept: ")
			}
			return ch, nil
		}
	}
	if best < 0 {
		ch.Verdicts[0].Kept = true
		ch.Verdicts[0].Why = "kept: no other setting was faster at p50 beyond doubt without a worse p95"
		return ch, nil
	}
	w := &ch.Verdicts[best]
	w.Kept, ch.Chosen = true, w.Name
	w.Why = "kept: " + w.Why
	ch.Verdicts[0].Why = fmt.Sprintf("not kept: %s is faster", w.Name)
	for i := range ch.Verdicts[1:] {
		v := &ch.Verdicts[i+1]
		if v.Wins && !v.Kept {
			v.Why = fmt.Sprintf("not kept: %s; %s is faster still", v.Why, w.Name)
		}
	}
	return ch, nil
}

// judgeRuntime sets v.Wins and v.Why (without "kept"/"not kept" for a winner).
func judgeRuntime(v *RuntimeVerdict, base string, minSpeedup float64) {
	ci := fmt.Sprintf("p50 ratio %.3f (95%% CI %.3f-%.3f), p95 ratio %.3f vs %s", v.Ratio, v.RatioLo, v.RatioHi, v.P95Ratio, base)
	switch {
	case v.RatioHi >= 1 && v.RatioLo > 1:
		v.Why = "not kept: slower at p50: " + ci
	case v.RatioHi >= 1:
		v.Why = "not kept: not faster at p50 beyond doubt (the interval reaches 1): " + ci
	case minSpeedup > 1 && v.Ratio > 1/minSpeedup:
		v.Why = fmt.Sprintf("not kept: faster by less than the minimum speedup %.2fx: %s", minSpeedup, ci)
	case v.P95Ratio > 1:
		v.Why = "not kept: faster at p50 but with a worse p95: " + ci
	default:
		v.Wins = true
		v.Why = fmt.Sprintf("%.2fx faster at p50: %s", 1/v.Ratio, ci)
	}
}
