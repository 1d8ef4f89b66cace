package report

import "strings"

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
	p("Each candidate served the artifact in %d processes of its own at %d intra-op thread(s), started in a shuffled order, the processes taking turns (the others stopped) in %d shuffled rounds of %d timed inferences after %d untimed. Processes with the same settings differ by themselves, so each ratio's interval spans the candidate's processes and the defaults' as well as the rounds. A candidate is kept only when it is faster than the defaults beyond doubt (the interval of the ratio lies below 1) without a higher p95, and, when a second group of processes with the defaults (the control) differed from the first beyond doubt, by more than they did. Kept: **%s**.\n\n",
		rt.Processes, rt.Threads, rt.Rounds, rt.RunsPerRound, rt.WarmupPerRound, rt.Chosen)
	if rt.Noisy {
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
}
