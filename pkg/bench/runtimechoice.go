package bench

import (
	"errors"
	"fmt"
	"strings"
)

// RuntimeVerdict is one runtime setting measured against the runtime's defaults.
type RuntimeVerdict struct {
	Name string `json:"name"`
	// Processes is how many processes measured it; Stats summarizes all their latencies.
	Processes int     `json:"processes"`
	Stats     Summary `json:"stats"`
	// Ratio is its typical latency over the defaults' (1 for the defaults; see
	// ProcessRatioCI), with the 95% interval over rounds and processes; P95Ratio is its p95
	// over the defaults' (all processes pooled, no interval).
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
	// Noisy: the two groups of processes with the defaults differed beyond doubt, so only a
	// setting faster by more than that difference could be kept; Why says so.
	Noisy bool   `json:"noisy"`
	Why   string `json:"why"`
	// Spread is how far apart the control's interval says two groups of processes with the
	// same settings can be (1 when it includes 1, else its end farthest from 1, as a factor
	// >= 1); a setting wins only when its interval's upper end times Spread is below 1.
	Spread float64 `json:"spread"`
}

// ChooseRuntime decides between runtime settings measured in the same rounds, each in
// processes of its own: defaults (the runtime's own, always a candidate) and others. A setting
// wins when it is faster than the defaults beyond doubt (the 95% interval of ProcessRatioCI,
// which spans the differences between processes, lies below 1), by at least minSpeedup
// (1 or less: any), and its p95 is not higher than the defaults'. Of the winners the one with
// the lowest ratio is kept; with none, the defaults are. Defaults are what plain libtorch runs
// with, so a setting that only ties, or trades the tail for the median, is not worth changing
// a user's environment for.
//
// control, when not nil, is a second group of processes with the defaults, measured in the
// same rounds; the others are compared with both groups together. When the control differs
// from the defaults beyond doubt (its interval excludes 1), processes differ by more than the
// intervals show: a setting must then be faster by more than that difference too (Spread),
// and Why says the machine was too noisy to decide the others. The control is the last
// verdict.
func ChooseRuntime(defaults, control *ProcessResult, others []*ProcessResult, minSpeedup float64, seed uint64) (*RuntimeChoice, error) {
	if defaults == nil || len(defaults.Blocks) == 0 {
		return nil, errors.New("choose runtime: no measurement of the defaults")
	}
	base := defaults
	if control != nil {
		base = joinProcesses(defaults, control)
	}
	baseStats, err := Summarize(base.Samples())
	if err != nil {
		return nil, fmt.Errorf("choose runtime: %s: %w", defaults.Name, err)
	}
	verdict := func(o, against *ProcessResult, s uint64) (RuntimeVerdict, error) {
		st, err := Summarize(o.Samples())
		if err != nil {
			return RuntimeVerdict{}, fmt.Errorf("choose runtime: %s: %w", o.Name, err)
		}
		v := RuntimeVerdict{Name: o.Name, Processes: o.Processes(), Stats: st}
		if v.Ratio, v.RatioLo, v.RatioHi, err = ProcessRatioCI(against, o, DefaultResamples, s); err != nil {
			return v, fmt.Errorf("choose runtime: %w", err)
		}
		if baseStats.P95 > 0 {
			v.P95Ratio = float64(st.P95) / float64(baseStats.P95)
		}
		return v, nil
	}
	ch := &RuntimeChoice{Chosen: defaults.Name, Spread: 1}
	var controlV *RuntimeVerdict
	if control != nil {
		v, err := verdict(control, defaults, seed)
		if err != nil {
			return nil, err
		}
		ci := fmt.Sprintf("ratio %.3f (95%% CI %.3f-%.3f) vs the first group", v.Ratio, v.RatioLo, v.RatioHi)
		v.Why = fmt.Sprintf("control: the same settings in a second group of %d process(es): %s", v.Processes, ci)
		if v.RatioLo > 1 || v.RatioHi < 1 {
			ch.Noisy = true
			ch.Spread = max(v.RatioLo, 1/v.RatioHi)
			ch.Why = fmt.Sprintf("noisy: two groups of processes with libtorch's defaults differed beyond doubt (%s), so a setting had to be faster by more than %.2fx to be kept", ci, ch.Spread)
		}
		controlV = &v
	}
	ch.Verdicts = append(ch.Verdicts, RuntimeVerdict{Name: defaults.Name, Processes: base.Processes(), Stats: baseStats, Ratio: 1, RatioLo: 1, RatioHi: 1, P95Ratio: 1})
	best := -1
	for i, o := range others {
		if o == nil {
			return nil, fmt.Errorf("choose runtime: setting %d has no measurement", i+1)
		}
		v, err := verdict(o, base, seed+uint64(i)+1)
		if err != nil {
			return nil, err
		}
		judgeRuntime(&v, defaults.Name, minSpeedup, ch.Spread)
		ch.Verdicts = append(ch.Verdicts, v)
		if v.Wins && (best < 0 || v.Ratio < ch.Verdicts[best].Ratio) {
			best = len(ch.Verdicts) - 1
		}
	}
	if controlV != nil {
		ch.Verdicts = append(ch.Verdicts, *controlV)
	}
	if best < 0 {
		ch.Verdicts[0].Kept = true
		ch.Verdicts[0].Why = "kept: no other setting was faster at p50 beyond doubt without a worse p95"
		if ch.Noisy {
			ch.Why = "too noisy to decide: " + strings.TrimPrefix(ch.Why, "noisy: ") + "; libtorch's defaults kept: rerun on a quiet machine"
			ch.Verdicts[0].Why = "kept: " + ch.Why
		}
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
	if ch.Noisy {
		ch.Why = fmt.Sprintf("%s; %s was", ch.Why, w.Name)
	}
	return ch, nil
}

// judgeRuntime sets v.Wins and v.Why (without "kept"/"not kept" for a winner). spread >= 1
// is how far apart processes of the same settings were seen (1: within the intervals).
func judgeRuntime(v *RuntimeVerdict, base string, minSpeedup, spread float64) {
	ci := fmt.Sprintf("ratio %.3f (95%% CI %.3f-%.3f over %d process(es)), p95 ratio %.3f vs %s", v.Ratio, v.RatioLo, v.RatioHi, v.Processes, v.P95Ratio, base)
	switch {
	case v.RatioHi >= 1 && v.RatioLo > 1:
		v.Why = "not kept: slower at p50: " + ci
	case v.RatioHi >= 1:
		v.Why = "not kept: not faster at p50 beyond doubt (the interval reaches 1): " + ci
	case v.RatioHi*spread >= 1:
		v.Why = fmt.Sprintf("not kept: too noisy to decide: faster, but by less than the %.2fx the control's processes differed by: %s", spread, ci)
	case minSpeedup > 1 && v.Ratio > 1/minSpeedup:
		v.Why = fmt.Sprintf("not kept: faster by less than the minimum speedup %.2fx: %s", minSpeedup, ci)
	case v.P95Ratio > 1:
		v.Why = "not kept: faster at p50 but with a worse p95: " + ci
	default:
		v.Wins = true
		v.Why = fmt.Sprintf("%.2fx faster at p50: %s", 1/v.Ratio, ci)
	}
}
