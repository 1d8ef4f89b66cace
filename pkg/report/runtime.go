package report

import "strings"

// Runtime is how optimize chose the runtime settings the artifact's manifest carries: each
// candidate (libtorch's defaults always one) timed by the artifact in a process of its own, the
// processes taking turns in shuffled rounds.
type Runtime struct {
	// Measured is false when the candidates were not timed; Note says why. Noisy: timed, but
	// two processes with the same settings differed, so the defaults were kept (Note says so).
	Measured bool   `json:"measured"`
	Noisy    bool   `json:"noisy"`
	Note     string `json:"note,omitempty"`
	// Chosen names the candidate kept ("default": libtorch's own).
	Chosen string `json:"chosen"`
	// Threads is the intra-op thread count every candidate ran with.
	Threads int `json:"threads"`
	// Rounds of RunsPerRound timed inferences per candidate (after WarmupPerRound untimed).
	Rounds         int                `json:"rounds"`
	RunsPerRound   int                `json:"runs_per_round"`
	WarmupPerRound int                `json:"warmup_per_round"`
	Candidates     []RuntimeCandidate `json:"candidates"`
}

// RuntimeCandidate is one runtime setting's figures. Ratio is its p50 over the defaults',
// with a 95% bootstrap interval; P95Ratio the same for p95.
type RuntimeCandidate struct {
	Name string `json:"name"`
	// Env is what it sets on top of libtorch's defaults.
	Env      []string `json:"env"`
	N        int      `json:"n"`
	P50Ms    float64  `json:"p50_ms"`
	P95Ms    float64  `json:"p95_ms"`
	Ratio    float64  `json:"ratio"`
	RatioLo  float64  `json:"ratio_ci_lo"`
	RatioHi  float64  `json:"ratio_ci_hi"`
	P95Ratio float64  `json:"p95_ratio"`
	Kept     bool     `json:"kept"`
	Why      string   `json:"why"`
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
	p("Each candidate served the artifact in a process of its own at %d intra-op thread(s), the processes taking turns (the others stopped) in %d shuffled rounds of %d timed inferences after %d untimed. A candidate is kept only when its p50 is lower than the defaults' beyond doubt (the interval of the ratio lies below 1) without a higher p95, and only when a second process with the defaults (the control) agrees with the first. Kept: **%s**.\n\n",
		rt.Threads, rt.Rounds, rt.RunsPerRound, rt.WarmupPerRound, rt.Chosen)
	if rt.Noisy {
		p("**%s.**\n\n", strings.ToUpper(rt.Note[:1])+rt.Note[1:])
	}
	p("| candidate | environment | p50 ms | p95 ms | p50 ratio [95%% CI] | p95 ratio | kept | why |\n|---|---|---:|---:|---|---:|---|---|\n")
	for _, c := range rt.Candidates {
		env := strings.Join(c.Env, " ")
		if env == "" {
			env = "(libtorch's defaults)"
		}
		kept := "no"
		if c.Kept {
			kept = "**yes**"
		}
		p("| %s | %s | %s | %s | %.3f [%.3f, %.3f] | %.3f | %s | %s |\n", c.Name, env, ms(c.P50Ms), ms(c.P95Ms), c.Ratio, c.RatioLo, c.RatioHi, c.P95Ratio, kept, c.Why)
	}
}
