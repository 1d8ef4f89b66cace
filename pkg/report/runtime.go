package report

import (
	"fmt"
	"strings"
)

// Runtime is how optimize chose the runtime settings the artifact's manifest carries: each
// candidate (libtorch's defaults always one) timed by the artifact in processes of its own, the
// processes taking turns in shuffled rounds.
type Runtime struct {
	// Measured is false when the candidates were not timed; Note says why. Noisy: timed, but
	// two groups of processes with the same settings differed, so only a setting faster by
	// more than that could be kept (Note says so).
	Measured bool   `json:"measured"`
	Noisy    bool   `json:"noisy"`
	Note     string `json:"note,omitempty"`
	// Chosen names the candidate kept ("default": libtorch's own).
	Chosen string `json:"chosen"`
	// Threads is the intra-op thread count every candidate ran with.
	Threads int `json:"threads"`
	// Processes is how many processes timed each candidate, in Rounds of RunsPerRound timed
	// inferences each (after WarmupPerRound untimed).
	Processes      int                `json:"processes"`
	Rounds         int                `json:"rounds"`
	RunsPerRound   int                `json:"runs_per_round"`
	WarmupPerRound int                `json:"warmup_per_round"`
	Candidates     []RuntimeCandidate `json:"candidates"`
	// Screen is the quick search's first round, in which every candidate left ran in one
	// process of its own for a few rounds (nil: the full search measured every candidate in
	// full). Its rows are in Candidates with Processes 1 and a Why that says so.
	Screen *RuntimeScreen `json:"screen,omitempty"`
	// NotMeasured are the candidates the search left out, each with the reason and how to
	// have it measured.
	NotMeasured []RuntimeSkip `json:"not_measured,omitempty"`
	// Precision is the INT8-or-FP32 decision taken again under the setting kept (nil: there
	// was no such decision, or it was forced).
	Precision *PrecisionCheck `json:"precision,omitempty"`
}

// RuntimeScreen is the quick search's screening round: each candidate served the artifact in
// one process for Rounds shuffled rounds of RunsPerRound timed inferences; the Contenders (at
// most a few, faster than the defaults at p50 there) were then measured in full.
type RuntimeScreen struct {
	Rounds       int      `json:"rounds"`
	RunsPerRound int      `json:"runs_per_round"`
	Contenders   []string `json:"contenders"`
	// AllocationsPerMs estimates how often the artifact allocates a tensor: its graph's
	// tensor-producing operations per call over its p50 (null: not estimated); ModelBytes is
	// the artifact's size. The allocator and huge-page candidates are screened only where
	// these are high.
	AllocationsPerMs *float64 `json:"allocations_per_ms"`
	ModelBytes       int64    `json:"model_bytes"`
}

// RuntimeSkip is a runtime candidate not measured, and why.
type RuntimeSkip struct {
	Name string   `json:"name"`
	Env  []string `json:"env"`
	Why  string   `json:"why"`
}

// PrecisionCheck is the model the INT8-or-FP32 decision in optimize's own process kept (First)
// and the one of the other precision (Other: FP32 when INT8 was kept, INT8 when it lost), each
// served in Processes processes of its own with its own best runtime setting, beside a second
// group of the first (the control). Ratio is the other's typical latency over the first's,
// with a 95% interval; the other replaces the first (Switched) only when it is faster beyond
// doubt, by more than the control's spread and the minimum speedup, without a worse p95.
// OtherCandidates are the runtime settings measured on the model not kept, in the same rounds
// as Runtime.Candidates (which are always the artifact's: the two swap on a switch).
type PrecisionCheck struct {
	Measured        bool               `json:"measured"`
	First           string             `json:"first"`
	FirstPrecision  string             `json:"first_precision"`
	FirstThreads    int                `json:"first_threads"`
	FirstRuntime    string             `json:"first_runtime"`
	Other           string             `json:"other"`
	OtherPrecision  string             `json:"other_precision"`
	OtherThreads    int                `json:"other_threads"`
	OtherRuntime    string             `json:"other_runtime"`
	OtherCandidates []RuntimeCandidate `json:"other_candidates"`
	Processes       int                `json:"processes"`
	Rounds          int                `json:"rounds"`
	RunsPerRound    int                `json:"runs_per_round"`
	FirstP50Ms      float64            `json:"first_p50_ms"`
	FirstP95Ms      float64            `json:"first_p95_ms"`
	OtherP50Ms      float64            `json:"other_p50_ms"`
	OtherP95Ms      float64            `json:"other_p95_ms"`
	Ratio           float64            `json:"ratio"`
	RatioLo         float64            `json:"ratio_ci_lo"`
	RatioHi         float64            `json:"ratio_ci_hi"`
	P95Ratio        float64            `json:"p95_ratio"`
	ControlRatio    float64            `json:"control_ratio"`
	ControlLo       float64            `json:"control_ratio_ci_lo"`
	ControlHi       float64            `json:"control_ratio_ci_hi"`
	Switched        bool               `json:"switched"`
	Why             string             `json:"why"`
}

// RuntimeCandidate is one runtime setting's figures. Ratio is its typical latency over the
// defaults' (the median over its processes of each one's median), with a 95% bootstrap
// interval over rounds and processes; P95Ratio is its p95 over the defaults'.
type RuntimeCandidate struct {
	Name string `json:"name"`
	// Env is what it sets on top of libtorch's defaults.
	Env       []string `json:"env"`
	Processes int      `json:"processes"`
	N         int      `json:"n"`
	P50Ms     float64  `json:"p50_ms"`
	P95Ms     float64  `json:"p95_ms"`
	Ratio     float64  `json:"ratio"`
	RatioLo   float64  `json:"ratio_ci_lo"`
	RatioHi   float64  `json:"ratio_ci_hi"`
	P95Ratio  float64  `json:"p95_ratio"`
	Kept      bool     `json:"kept"`
	Why       string   `json:"why"`
}

func (r *Report) writeRuntime(p func(string, ...any)) {
	rt := r.Runtime
	if rt == nil {
		return
	}
	p("\n## Runtime settings measured\n\n")
	if !rt.Measured {
		p("Not measured: %s. The artifact runs with libtorch's defaults.\n", rt.Note)
		return
	}
	procs := fmt.Sprintf("%d processes", rt.Processes)
	if rt.Processes == 1 {
		procs = "1 process"
	}
	p("Each candidate served the artifact in %s of its own at %s, started in a shuffled order, the processes taking turns (the others stopped) in %d shuffled rounds of %d timed inferences after %d untimed. Processes with the same settings differ by themselves, so each ratio's interval spans the candidate's processes and the defaults' as well as the rounds. A candidate is kept only when it is faster than the defaults beyond doubt (the interval of the ratio lies below 1) without a higher p95, and, when a second group of processes with the defaults (the control) differed from the first beyond doubt, by more than they did. Kept: **%s**.\n\n",
		procs, Plural(rt.Threads, "intra-op thread"), rt.Rounds, rt.RunsPerRound, rt.WarmupPerRound, rt.Chosen)
	if sc := rt.Screen; sc != nil {
		contenders := "none"
		if len(sc.Contenders) > 0 {
			contenders = strings.Join(sc.Contenders, ", ")
		}
		rate := "not estimated"
		if sc.AllocationsPerMs != nil {
			rate = fmt.Sprintf("about %.1f tensor allocations a millisecond", *sc.AllocationsPerMs)
		}
		p("Quick search: first every setting left served the artifact in one process of its own for %d shuffled rounds of %d timed inferences (the screening round); only those faster than the defaults at p50 there (at most two: %s) were measured as above. The allocator and huge-page settings are screened only where the model allocates often or is large (here %s, %.1f MiB). Rows with 1 process are from the screening round. `--search full` measures every setting in full.\n\n",
			sc.Rounds, sc.RunsPerRound, contenders, rate, float64(sc.ModelBytes)/(1<<20))
	}
	if rt.Noisy || (rt.Precision != nil && rt.Precision.Switched && rt.Note != "") {
		p("**%s.**\n\n", strings.ToUpper(rt.Note[:1])+rt.Note[1:])
	}
	p("| candidate | environment | processes | p50 ms | p95 ms | ratio [95%% CI] | p95 ratio | kept | why |\n|---|---|---:|---:|---:|---|---:|---|---|\n")
	for _, c := range rt.Candidates {
		env := strings.Join(c.Env, " ")
		if env == "" {
			env = "(libtorch's defaults)"
		}
		kept := "no"
		if c.Kept {
			kept = "**yes**"
		}
		p("| %s | %s | %d | %s | %s | %.3f [%.3f, %.3f] | %.3f | %s | %s |\n", c.Name, env, c.Processes, ms(c.P50Ms), ms(c.P95Ms), c.Ratio, c.RatioLo, c.RatioHi, c.P95Ratio, kept, c.Why)
	}
	for _, c := range rt.NotMeasured {
		p("| %s | %s | 0 | - | - | - | - | not measured | %s |\n", c.Name, strings.Join(c.Env, " "), c.Why)
	}
	writePrecision(p, rt.Precision)
}

// writePrecision is the precision check's section.
func writePrecision(p func(string, ...any), pc *PrecisionCheck) {
	if pc == nil {
		return
	}
	p("\n### INT8 or FP32, where the artifact runs\n\n")
	if !pc.Measured {
		p("Not measured: %s. %s (%s) stays.\n", pc.Why, pc.First, pc.FirstPrecision)
		return
	}
	p("The INT8-or-FP32 decision was first taken in optimize's own process (glibc malloc, every candidate loaded at once), and kept %s (%s). The runtime settings were measured on %s (%s) too, in the same rounds; then %s with %s and %s with %s each served in %d processes of their own, with a second group of the first (the control), in %d shuffled rounds of %d timed inferences. The other precision replaces the first only when it is faster beyond doubt, by more than the control's spread, without a worse p95.\n\n",
		pc.First, pc.FirstPrecision, pc.Other, pc.OtherPrecision, pc.First, pc.FirstRuntime, pc.Other, pc.OtherRuntime, pc.Processes, pc.Rounds, pc.RunsPerRound)
	p("| model | precision | threads | runtime setting | p50 ms | p95 ms | ratio [95%% CI] | p95 ratio |\n|---|---|---:|---|---:|---:|---|---:|\n")
	p("| %s | %s | %d | %s | %s | %s | 1.000 | 1.000 |\n", pc.First, pc.FirstPrecision, pc.FirstThreads, pc.FirstRuntime, ms(pc.FirstP50Ms), ms(pc.FirstP95Ms))
	p("| %s | %s | %d | %s | %s | %s | %.3f [%.3f, %.3f] | %.3f |\n", pc.Other, pc.OtherPrecision, pc.OtherThreads, pc.OtherRuntime, ms(pc.OtherP50Ms), ms(pc.OtherP95Ms), pc.Ratio, pc.RatioLo, pc.RatioHi, pc.P95Ratio)
	p("| %s (control) | %s | %d | %s | | | %.3f [%.3f, %.3f] | |\n\n", pc.First, pc.FirstPrecision, pc.FirstThreads, pc.FirstRuntime, pc.ControlRatio, pc.ControlLo, pc.ControlHi)
	verdict := "**kept**"
	if pc.Switched {
		verdict = "**switched**"
	}
	p("%s: %s.\n", verdict, pc.Why)
	if len(pc.OtherCandidates) == 0 {
		return
	}
	whose := pc.Other
	if pc.Switched {
		whose = pc.First + ", the model not kept after all"
	}
	p("\nRuntime settings measured on %s, in the same rounds as the table above, each against that model's own defaults:\n\n", whose)
	p("| candidate | processes | p50 ms | p95 ms | ratio [95%% CI] | p95 ratio | kept | why |\n|---|---:|---:|---:|---|---:|---|---|\n")
	for _, c := range pc.OtherCandidates {
		kept := "no"
		if c.Kept {
			kept = "**yes**"
		}
		p("| %s | %d | %s | %s | %.3f [%.3f, %.3f] | %.3f | %s | %s |\n", c.Name, c.Processes, ms(c.P50Ms), ms(c.P95Ms), c.Ratio, c.RatioLo, c.RatioHi, c.P95Ratio, kept, c.Why)
	}
}
