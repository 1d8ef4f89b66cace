package pipeline

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// The quick search (optimize.search: quick) measures the runtime settings in two steps: every
// candidate serves the artifact in one process for a few shuffled rounds (the screen), and only
// the few that ran faster than the defaults there are measured as the full search measures
// each one (runtimeProcesses processes, a control group, runtimeRounds rounds). On the Zen 3
// and Zen 4 VMs most runtime searches ended "default kept" after some 40 serve processes, most
// of optimize's wall time.
const (
	screenRounds = 4
	// maxContenders is how many screened candidates go on to the full measurement.
	maxContenders = 2
	// allocRateFloor is the tensor allocations per millisecond below which the allocator
	// candidates are not screened: at a few per millisecond, malloc's cost is far below the
	// differences between processes. The allocators won where models allocate hundreds per
	// millisecond (the digits CNN at 0.05 ms a call: tcmalloc 1.5x; Silero VAD: 1.08x).
	allocRateFloor = 100.0
	// hugePageFloor is the artifact size below which the huge-page candidates are not
	// screened: their gain is fewer TLB misses, and a model smaller than this fits in the
	// reach of the 4 KiB-page TLB of current x86 server cores (Zen 4: 3072 L2 entries, 12 MiB);
	// huge pages won 2x on INT8 resnet50 (25 MB) and nothing on resnet18 or mobilenet_v2.
	hugePageFloor = 16 << 20
)

// fullSearchHint is how a user asks for what the quick search left out.
const fullSearchHint = "--search full (optimize.search: full) measures it"

// startSearch records the search and sets the budget's deadline.
func (r *run) startSearch(start time.Time) {
	o := r.cfg.Optimize
	r.rep.Search = o.Search
	if r.rep.Search == "" {
		r.rep.Search = config.SearchQuick
	}
	if o.Budget > 0 {
		r.deadline = start.Add(o.Budget)
		r.rep.BudgetMs = f64(msOf(o.Budget))
	}
}

// stagesStep names the FP32 timing step as the search runs it.
func (r *run) stagesStep() string {
	if r.quick() {
		return "time the FP32 candidates, then build and time the kept one's fast variants"
	}
	return "time the FP32 candidates"
}

// quick says whether the run screens the runtime settings instead of measuring each in full.
func (r *run) quick() bool { return r.cfg.Optimize.Search != config.SearchFull }

// left is the time the budget leaves (a day when there is none).
func (r *run) left() time.Duration {
	if r.deadline.IsZero() {
		return 24 * time.Hour
	}
	return time.Until(r.deadline)
}

// reserve is the time kept back for the final benchmark: bench.runs rounds of the original and
// the best model at their last measured p50s (a second when not measured yet).
func (r *run) reserve() time.Duration {
	per := time.Duration(0)
	for _, c := range []*candidate{r.orig, r.best()} {
		if c == nil || c.meas == nil {
			continue
		}
		name := c.name
		if c == r.orig {
			name = "original"
		}
		if res := c.meas.result(name); res != nil {
			per += res.Stats.P50
		}
	}
	runs := max(r.cfg.Bench.Runs, 1) + r.cfg.Bench.Warmup
	return max(time.Second, time.Duration(runs)*per)
}

// fits says whether a step estimated to take d leaves the final benchmark its time.
func (r *run) fits(d time.Duration) bool {
	return r.deadline.IsZero() || r.left()-r.reserve() >= d
}

// capped bounds an in-process measurement by the budget: its rounds become a maximum, and it
// stops after share of the time left (beyond the final benchmark's reserve), after at least
// one round.
func (r *run) capped(o bench.CompareOptions, share float64) bench.CompareOptions {
	if r.deadline.IsZero() || o.Runs <= 0 {
		return o
	}
	o.MaxRuns, o.Runs = o.Runs, 0
	o.Duration = max(time.Millisecond, time.Duration(share*float64(r.left()-r.reserve())))
	return o
}

// budgetNote says a step was cut or skipped by the budget.
func (r *run) budgetNote() string {
	return fmt.Sprintf("optimize.budget %s: not enough time left for it", r.cfg.Optimize.Budget)
}

// tensorOps counts the nodes of a graph that make a new tensor: operators, not the
// interpreter's own nodes (prim::), not in-place ones (a trailing _) and not views.
func tensorOps(nodes map[string]int) int {
	n := 0
	for kind, k := range nodes {
		op, ok := strings.CutPrefix(kind, "aten::")
		if !ok {
			if strings.HasPrefix(kind, "prim::") || !strings.Contains(kind, "::") {
				continue
			}
			op = kind[strings.Index(kind, "::")+2:]
		}
		if strings.HasSuffix(op, "_") || slices.Contains(viewOps, op) {
			continue
		}
		n += k
	}
	return n
}

// viewOps are ATen operators that return a view or a value, not a new tensor.
var viewOps = []string{"view", "reshape", "flatten", "size", "dim", "len", "select", "slice", "narrow", "transpose",
	"permute", "unsqueeze", "squeeze", "expand", "expand_as", "t", "chunk", "split", "unbind", "__getitem__",
	"Int", "Float", "Bool", "ScalarImplicit", "numel", "detach", "alias", "append", "list", "format", "warn", "eq", "ne", "lt", "gt", "le", "ge", "__is__", "__isnot__", "__not__"}

// allocationRate estimates c's tensor allocations per millisecond: its tensor-producing
// operations per call over its p50 where it was last measured (0: not measured).
func allocationRate(c *candidate) float64 {
	if c == nil || c.meas == nil {
		return 0
	}
	res := c.meas.result(c.name)
	if c.kind == kindOriginal {
		res = c.meas.cmp.Results[0]
	}
	if res == nil || res.Stats.P50 <= 0 {
		return 0
	}
	return float64(tensorOps(c.nodes)) / msOf(res.Stats.P50)
}

// screenOut splits cands (defaults first) into those to screen and those the quick search
// leaves out because the model allocates and touches too little for them to matter.
func screenOut(cands []runenv.Candidate, rate float64, bytes int64, openmp string) (keep []runenv.Candidate, out []report.RuntimeSkip) {
	for i, c := range cands {
		why := ""
		switch {
		case i == 0:
		case c.HugePages && bytes < hugePageFloor:
			why = fmt.Sprintf("not measured (quick search): huge pages cut TLB misses, and the artifact is %.1f MiB, under the %d MiB that 4 KiB pages reach; %s", float64(bytes)/(1<<20), hugePageFloor>>20, fullSearchHint)
		case !c.HugePages && c.Allocator != "" && c.Allocator != "default" && rate > 0 && rate < allocRateFloor:
			why = fmt.Sprintf("not measured (quick search): the model allocates about %.1f tensors a millisecond (its tensor-producing operations per call over its p50), under the %.0f a millisecond where an allocator's speed shows; %s", rate, allocRateFloor, fullSearchHint)
		}
		if why == "" {
			keep = append(keep, c)
			continue
		}
		env, _ := c.Env(openmp)
		if env == nil {
			env = []string{}
		}
		out = append(out, report.RuntimeSkip{Name: c.Name, Env: env, Why: why})
	}
	return keep, out
}

// screen times cands (defaults first) in one process each for screenRounds rounds and returns
// the contenders (the defaults first, then at most maxContenders others that ran faster than
// the defaults at p50, fastest first), and the defaults' row followed by the rows of those
// screened out.
func (m *runtimeMeasure) screen(cands []runenv.Candidate) ([]runenv.Candidate, []report.RuntimeCandidate, error) {
	r := m.r
	groups, envs, err := m.groups(cands)
	if err != nil {
		return nil, nil, err
	}
	s := *m
	s.rounds, s.procs = screenRounds, 1
	res, err := s.serve(groups, "measuring: runtime (screen)")
	if err != nil {
		return nil, nil, err
	}
	for i := range res {
		res[i].Name = cands[i].Name
	}
	ch, err := bench.ChooseRuntime(res[0], nil, res[1:], r.cfg.Optimize.MinSpeedup, r.cfg.Bench.Seed+401)
	if err != nil {
		return nil, nil, err
	}
	var order []int
	for i, v := range ch.Verdicts[1:] {
		if v.Ratio < 1 {
			order = append(order, i+1)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case ch.Verdicts[a].Ratio < ch.Verdicts[b].Ratio:
			return -1
		case ch.Verdicts[a].Ratio > ch.Verdicts[b].Ratio:
			return 1
		}
		return 0
	})
	if len(order) > maxContenders {
		order = order[:maxContenders]
	}
	contenders := []runenv.Candidate{cands[0]}
	for _, i := range order {
		contenders = append(contenders, cands[i])
	}
	def := runtimeRow(ch.Verdicts[0], envs[0])
	def.Kept, def.Why = true, fmt.Sprintf("kept: no other setting was faster at p50 in the screening round (1 process each, %d rounds of %d)", screenRounds, runtimeTurnRuns)
	rows := []report.RuntimeCandidate{def}
	for i, v := range ch.Verdicts[1:] {
		if slices.Contains(order, i+1) {
			continue
		}
		row := runtimeRow(v, envs[i+1])
		row.Kept = false
		ci := fmt.Sprintf("p50 ratio %.3f (95%% CI %.3f-%.3f) vs the defaults in the screening round (1 process each, %d rounds of %d)", v.Ratio, v.RatioLo, v.RatioHi, screenRounds, runtimeTurnRuns)
		if v.Ratio < 1 {
			row.Why = fmt.Sprintf("not kept: %s, but %d settings were faster still, and only they were measured in full (quick search); %s", ci, maxContenders, fullSearchHint)
		} else {
			row.Why = fmt.Sprintf("not kept: not faster than the defaults at p50 in the screening round: %s; the quick search measures in full only the settings that were; %s", ci, fullSearchHint)
		}
		rows = append(rows, row)
	}
	return contenders, rows, nil
}

// serveStart is what starting one serve process costs before its first timed inference
// (loading libtorch, the artifact and its load-time passes), for the budget's estimates.
const serveStart = 2 * time.Second

// serveEstimate is how long serving groups of procs processes each for rounds rounds takes,
// at the artifact's last measured p50.
func (r *run) serveEstimate(groups, procs, rounds int) time.Duration {
	per := time.Millisecond
	if c := r.best(); c.meas != nil {
		name := c.name
		if c == r.orig {
			name = "original"
		}
		if res := c.meas.result(name); res != nil {
			per = res.Stats.P50
		}
	}
	n := time.Duration(groups * procs)
	return n*serveStart + n*time.Duration(rounds*(runtimeTurnWarmup+runtimeTurnRuns))*per
}

// screenRuntime is the quick search's first step: it leaves out the candidates the model
// cannot gain from (screenOut), screens the rest, and returns the contenders (the defaults
// first) with the rows of those screened out. done: nothing is left to measure in full (no
// contender, and no model of the other precision to measure beside the artifact); rt is then
// complete.
func (r *run) screenRuntime(rt *report.Runtime, m *runtimeMeasure, cands []runenv.Candidate, path string) ([]runenv.Candidate, []report.RuntimeCandidate, bool, error) {
	var size int64
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	rate := allocationRate(r.best())
	keep, skipped := screenOut(cands, rate, size, m.openmp)
	scr := &report.RuntimeScreen{Rounds: screenRounds, RunsPerRound: runtimeTurnRuns, ModelBytes: size, Contenders: []string{}}
	if rate > 0 {
		scr.AllocationsPerMs = f64(rate)
	}
	rt.Screen = scr
	skip := func(cs []runenv.Candidate, why string) {
		for _, c := range cs {
			env, _ := c.Env(m.openmp)
			if env == nil {
				env = []string{}
			}
			skipped = append(skipped, report.RuntimeSkip{Name: c.Name, Env: env, Why: why})
		}
	}
	contenders := keep[:1]
	def := report.RuntimeCandidate{Name: runenv.DefaultCandidate, Env: []string{}, Ratio: 1, RatioLo: 1, RatioHi: 1, P95Ratio: 1, Kept: true,
		Why: "kept: no other setting left to measure (see the settings not measured)"}
	var rows []report.RuntimeCandidate
	switch {
	case len(keep) < 2:
	case !r.fits(r.serveEstimate(len(keep), 1, screenRounds)):
		skip(keep[1:], "not measured: "+r.budgetNote())
	default:
		r.logf("screening %d runtime settings against libtorch's defaults, one process each, %d shuffled rounds at %s (quick search; %d left out)",
			len(keep)-1, screenRounds, report.Plural(r.threads, "thread"), len(skipped))
		var err error
		if contenders, rows, err = m.screen(keep); err != nil {
			return nil, nil, false, err
		}
		def, rows = rows[0], rows[1:]
		for _, c := range contenders[1:] {
			scr.Contenders = append(scr.Contenders, c.Name)
		}
	}
	// The contenders are measured in minRuntimeRounds rounds, not bench.stage_runs' share: a
	// setting is kept only when faster beyond doubt, so fewer rounds widen its interval and
	// keep the defaults more often, while the chance of keeping a setting that is not faster
	// stays the interval's; on resnet50 a round of 8 serve processes took 16 s on the loaded
	// 2-vCPU VM.
	m.rounds = min(m.rounds, minRuntimeRounds)
	groups := 2 * len(contenders)
	if m.other != nil {
		groups += len(contenders)
	}
	if (len(contenders) > 1 || m.other != nil) && !r.fits(r.serveEstimate(groups+1, runtimeProcesses, m.rounds)) {
		skip(contenders[1:], "not measured in full: "+r.budgetNote())
		contenders = contenders[:1]
		m.other = nil
	}
	rt.NotMeasured = skipped
	if len(contenders) > 1 || m.other != nil {
		return contenders, rows, false, nil
	}
	// Nothing came near the defaults and no model of the other precision waits for the
	// same rounds: the defaults stay without a full round.
	rt.Measured, rt.Chosen, rt.Note = true, runenv.DefaultCandidate, "no other setting was faster than libtorch's defaults at p50 in the screening round"
	if len(rows) == 0 {
		rt.Note = "no other setting left to measure"
	}
	rt.Rounds, rt.RunsPerRound, rt.WarmupPerRound, rt.Processes = screenRounds, runtimeTurnRuns, runtimeTurnWarmup, 1
	rt.Candidates = append([]report.RuntimeCandidate{def}, rows...)
	r.runtime = cands[0]
	r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("runtime: %s (%s; quick search at %s: %d setting(s) screened in 1 process each, %d not measured)",
		rt.Chosen, rt.Note, report.Plural(r.threads, "thread"), len(rows), len(skipped)))
	return nil, nil, true, nil
}

// sharedDefaults are latencies the runtime step took: the artifact's and the control's under
// libtorch's defaults, and the other precision's model's under each setting (by name).
type sharedDefaults struct {
	artifact, control *bench.ProcessResult
	others            map[string]*bench.ProcessResult
	rounds            int
}
