package pipeline

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/cpu"

	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// Each runtime candidate's turn: untimed inferences first (a process that was stopped pays
// for waking the cores and refilling the caches), then the timed ones.
const (
	runtimeTurnWarmup = 5
	runtimeTurnRuns   = 10
	// minRuntimeRounds gives each candidate at least 60 latencies, enough for a bootstrap
	// interval of the ratio of medians that separates a few percent on a quiet machine.
	minRuntimeRounds = 6
	// controlName is the second group of processes with libtorch's defaults.
	controlName = "default (second group)"
	// runtimeProcesses is how many processes time each candidate (and each group of the
	// defaults): processes of the same settings differ by themselves, by up to 1.8x at p50 on a
	// quiet VM (docs/architecture.md), so one process per candidate decides nothing.
	runtimeProcesses = 2
)

// measureRuntime times the artifact under each runtime candidate (runenv.Candidates: libtorch's
// defaults always one, then the OpenMP wait policies and the allocators found) and keeps one
// only when it wins (bench.ChooseRuntime). Wait policies and preloaded allocators take effect
// only when a process starts, so each candidate serves a copy of the artifact in a process of
// its own (Options.Serve), started with libtorch's defaults plus the candidate's variables,
// and the processes take turns in shuffled rounds. What is kept goes into the manifest's
// runtime, which `torchspeed bench` and `launch` apply. A candidate process that fails leaves
// the defaults in place, with a warning; it does not fail the run.
func (r *run) measureRuntime() error {
	rt := &report.Runtime{Chosen: runenv.DefaultCandidate, Threads: r.threads}
	r.rep.Runtime = rt
	if !r.cfg.MeasureRuntime() {
		rt.Note = fmt.Sprintf("runtime.measure is %s (auto measures when bench.runs >= 100 or bench.duration >= 10s)", r.cfg.Runtime.Measure)
		return nil
	}
	if len(r.opts.Serve) == 0 {
		rt.Note = "no serve command to start candidate processes with (pipeline Options.Serve)"
		r.warn("runtime settings not measured: " + rt.Note)
		return nil
	}
	if err := r.timeRuntime(rt); err != nil {
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		rt.Measured, rt.Candidates, rt.Chosen, rt.Screen, rt.NotMeasured = false, nil, runenv.DefaultCandidate, nil, nil
		rt.Note = err.Error()
		r.warn("runtime settings not measured, libtorch's defaults kept: " + err.Error())
	}
	return nil
}

func (r *run) timeRuntime(rt *report.Runtime) error {
	openmp := r.opts.Settings["openmp"]
	if openmp == "" {
		openmp = "gnu"
	}
	cands := runenv.Candidates(runenv.Settings{Threads: r.threads, OpenMP: openmp}, r.machine(), nil)
	if len(cands) < 2 {
		rt.Measured = true
		rt.Candidates = []report.RuntimeCandidate{{Name: runenv.DefaultCandidate, Env: []string{}, Ratio: 1, RatioLo: 1, RatioHi: 1, P95Ratio: 1, Kept: true,
			Why: "kept: the only candidate (one thread has no wait policy to tune, and no other allocator, huge pages or ISA to try here)"}}
		return nil
	}
	// The candidates serve the artifact as it will be written, from a private copy.
	dir, err := os.MkdirTemp("", "torchspeed-runtime-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path, err := r.saveCopy(r.best(), r.threads, dir, "candidate")
	if err != nil {
		return err
	}
	other, err := r.otherPrecision(dir)
	if err != nil {
		return err
	}
	m := &runtimeMeasure{r: r, path: path, openmp: openmp, rounds: runtimeRounds(r.cfg.Bench.StageRuns), other: other}
	groups := len(cands) + 1
	if other != nil {
		groups += len(cands)
	}
	full := !r.quick()
	if full && !r.fits(r.serveEstimate(groups, runtimeProcesses, m.rounds)) {
		full = false
		r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("runtime: screened as the quick search does (%s for the full search)", r.budgetNote()))
	}
	var screened []report.RuntimeCandidate
	if !full {
		var done bool
		if cands, screened, done, err = r.screenRuntime(rt, m, cands, path); err != nil || done {
			return err
		}
		other = m.other // nil when the budget left no time to measure it beside the artifact
	}
	r.logf("measuring %d runtime settings, each in %d processes of its own (and a second group of %d with the defaults), %d shuffled rounds at %d thread(s)",
		len(cands), runtimeProcesses, runtimeProcesses, m.rounds, r.threads)
	if other != nil {
		r.logf("  and the same settings on %s (%d thread(s)), the model of the other precision, in the same rounds", other.name, other.threads)
	}
	res, control, envs, err := m.measure(cands, "measuring: runtime")
	if err != nil {
		return err
	}
	if other != nil {
		if rt.Screen != nil {
			r.defaults = &sharedDefaults{artifact: res[0], control: control, others: map[string]*bench.ProcessResult{}, rounds: m.rounds}
			for i, c := range cands {
				r.defaults.others[c.Name] = m.otherRes[i]
			}
		}
		if err := r.otherRuntime(m.otherRes, cands, envs); err != nil {
			return err
		}
		m.other = nil // the combined winners are the artifact's alone
	}
	ch, err := bench.ChooseRuntime(res[0], control, res[1:], r.cfg.Optimize.MinSpeedup, r.cfg.Bench.Seed)
	if err != nil {
		return err
	}
	rt.Measured, rt.Chosen, rt.Noisy, rt.Note = true, ch.Chosen, ch.Noisy, ch.Why
	rt.Rounds, rt.RunsPerRound, rt.WarmupPerRound, rt.Processes = m.rounds, runtimeTurnRuns, runtimeTurnWarmup, runtimeProcesses
	envs = append(envs, envs[0]) // the control's
	defer func() {
		// The screened-out rows go before the control, the last.
		rt.Candidates = slices.Insert(rt.Candidates, len(rt.Candidates)-1, screened...)
	}()
	kept := -1
	for i, v := range ch.Verdicts {
		rt.Candidates = append(rt.Candidates, runtimeRow(v, envs[i]))
		r.logf("  %-20s p50 %.3f ms p95 %.3f ms: %s", v.Name, msOf(v.Stats.P50), msOf(v.Stats.P95), v.Why)
		if v.Kept && i < len(cands) {
			kept = i
		}
	}
	if kept >= 0 {
		r.runtime = cands[kept]
	}
	if ch.Noisy {
		r.warn("runtime settings: " + ch.Why)
	}
	if err := m.combine(rt, ch, cands); err != nil {
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		r.warn(fmt.Sprintf("runtime settings: the winners together not measured (%v); %s kept", err, rt.Chosen))
	}
	r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("runtime: %s (measured against libtorch's defaults at %s in %d shuffled rounds of %d processes per setting)", rt.Chosen, report.Plural(r.threads, "thread"), m.rounds, runtimeProcesses))
	return nil
}

// runtimeRounds is the number of rounds: bench.stage_runs turns per candidate, shared among its
// processes (so the time spent stays what one process per candidate took), and at least
// minRuntimeRounds.
func runtimeRounds(stageRuns int) int {
	return max(minRuntimeRounds, (stageRuns+runtimeProcesses-1)/runtimeProcesses)
}

// runtimeRow is a verdict as the report shows it.
func runtimeRow(v bench.RuntimeVerdict, env []string) report.RuntimeCandidate {
	return report.RuntimeCandidate{
		Name: v.Name, Env: env, Processes: v.Processes, N: v.Stats.N, P50Ms: msOf(v.Stats.P50), P95Ms: msOf(v.Stats.P95),
		Ratio: v.Ratio, RatioLo: v.RatioLo, RatioHi: v.RatioHi, P95Ratio: v.P95Ratio, Kept: v.Kept, Why: v.Why,
	}
}

// machine is what the runtime candidates depend on beyond the thread count: the probe's
// facts, with the ISA level libtorch dispatches to and its OpenBLAS asked of libtorch when
// the probe lacks them.
func (r *run) machine() runenv.Machine {
	m := runenv.MachineOf(r.opts.Machine)
	if m.CPUCapability == "" {
		if cfg, err := torch.ShowConfig(); err == nil {
			m.CPUCapability = cpu.CPUCapabilityOf(cfg)
		}
		m.Libtorch = torch.Version()
	}
	if m.OpenBLAS == "" {
		if b, err := torch.BLAS(); err == nil && b.Library == "openblas" {
			m.OpenBLAS = b.Config
		}
	}
	return m
}

// saveCopy saves c as an artifact named NAME.torchspeed.pt in dir, with its manifest as the
// run would write it at threads intra-op threads, for serve processes to load.
func (r *run) saveCopy(c *candidate, threads int, dir, name string) (string, error) {
	save := c.mod
	if c.save != nil {
		save = c.save
	}
	path := filepath.Join(dir, name+".torchspeed.pt")
	man := r.manifest(c)
	man.Runtime.Threads = threads
	if err := torchspeed.SaveArtifact(save, path, man); err != nil {
		return "", fmt.Errorf("save a copy of %s to serve: %w", c.name, err)
	}
	return path, nil
}

// runtimeMeasure starts serve processes of the artifact at path and times them in rounds.
type runtimeMeasure struct {
	r      *run
	path   string
	openmp string
	rounds int
	// other, when set, is the model of the other precision (recheckPrecision's): measure
	// times it under every candidate too, in the same rounds, into otherRes.
	other    *serveGroup
	otherRes []*bench.ProcessResult
	// procs is how many processes serve each group (0: runtimeProcesses).
	procs int
}

func (m *runtimeMeasure) processes() int {
	if m.procs > 0 {
		return m.procs
	}
	return runtimeProcesses
}

// groups are the serve groups of cands on the artifact, with each candidate's variables.
func (m *runtimeMeasure) groups(cands []runenv.Candidate) ([]serveGroup, [][]string, error) {
	base := runenv.ScrubEnv(os.Environ())
	envs := make([][]string, len(cands))
	groups := make([]serveGroup, 0, len(cands)+1)
	for i, c := range cands {
		var err error
		if envs[i], err = c.Env(m.openmp); err != nil {
			return nil, nil, err
		}
		environ, err := c.Environ(m.openmp, base)
		if err != nil {
			return nil, nil, err
		}
		groups = append(groups, serveGroup{name: "runtime candidate " + c.Name, path: m.path, threads: m.r.threads, environ: environ})
	}
	return groups, envs, nil
}

// serveGroup is runtimeProcesses serve processes of one artifact at one thread count and
// environment.
type serveGroup struct {
	name    string
	path    string
	threads int
	environ []string
}

// measure times each candidate in runtimeProcesses processes, plus a second group with the
// defaults (cands[0]): the control. It returns each candidate's latencies by process and
// round, the control's, and each candidate's variables.
func (m *runtimeMeasure) measure(cands []runenv.Candidate, what string) ([]*bench.ProcessResult, *bench.ProcessResult, [][]string, error) {
	groups, envs, err := m.groups(cands)
	if err != nil {
		return nil, nil, nil, err
	}
	groups = append(groups, serveGroup{name: "runtime control " + controlName, path: m.path, threads: m.r.threads, environ: groups[0].environ})
	n := len(groups)
	if o := m.other; o != nil {
		for i, c := range cands {
			groups = append(groups, serveGroup{name: o.name + ", runtime candidate " + c.Name, path: o.path, threads: o.threads, environ: groups[i].environ})
		}
	}
	res, err := m.serve(groups, what)
	if err != nil {
		return nil, nil, nil, err
	}
	if m.other != nil {
		m.otherRes, res = res[n:], res[:n]
		for i, c := range cands {
			m.otherRes[i].Name = c.Name
		}
	}
	for g := range res {
		res[g].Name = controlName
		if g < len(cands) {
			res[g].Name = cands[g].Name
		}
	}
	return res[:len(cands)], res[len(cands)], envs, nil
}

// serve times each group in runtimeProcesses processes. The processes start in a shuffled
// order and take turns in shuffled rounds (benchrun.MeasureRounds), so no group's processes
// are always the first loaded or always follow the same one. It returns each group's
// latencies by process and round, named as the group.
func (m *runtimeMeasure) serve(groups []serveGroup, what string) ([]*bench.ProcessResult, error) {
	r := m.r
	type slot struct{ group, proc int }
	var slots []slot
	procs := m.processes()
	for g := range groups {
		for p := range procs {
			slots = append(slots, slot{g, p})
		}
	}
	rng := rand.New(rand.NewPCG(r.cfg.Bench.Seed, 0x2545f4914f6cdd1d))
	rng.Shuffle(len(slots), func(a, b int) { slots[a], slots[b] = slots[b], slots[a] })
	specs := make([]benchrun.ServerSpec, len(slots))
	for i, s := range slots {
		g := groups[s.group]
		args := append(append([]string(nil), r.opts.Serve...), "-m", g.path, "--runtime", "default", "--threads", strconv.Itoa(g.threads),
			"--warmup", strconv.Itoa(max(r.cfg.Bench.Warmup, 10)), "--seed", strconv.FormatUint(r.cfg.Bench.Seed, 10))
		for _, l := range r.cfg.Model.OpLibraries {
			args = append(args, "--op-library", l)
		}
		specs[i] = benchrun.ServerSpec{Name: fmt.Sprintf("%s (process %d)", g.name, s.proc+1), Argv: args, Env: g.environ}
	}
	srv, err := benchrun.StartServers(r.ctx, specs, nil)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	o := benchrun.RoundsOptions{Rounds: m.rounds, Warmup: runtimeTurnWarmup, Runs: runtimeTurnRuns, Seed: r.cfg.Bench.Seed}
	if p := r.opts.Progress; p != nil {
		o.Progress = func(done, total int) { p(what, done, total) }
	}
	lat, err := benchrun.MeasureRounds(r.ctx, srv, o)
	if err != nil {
		return nil, err
	}
	if err := srv.Close(); err != nil {
		return nil, err
	}
	res := make([]*bench.ProcessResult, len(groups))
	for g := range res {
		res[g] = &bench.ProcessResult{Name: groups[g].name, Blocks: make([][][]time.Duration, procs)}
	}
	for i, s := range slots {
		if res[s.group].Blocks[s.proc], err = bench.SplitRounds(lat[i], runtimeTurnRuns); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// combine measures the winners of different kinds (runenv.Candidate.Kinds) together, as one
// candidate, in a second run against the defaults and the best single setting: it replaces the
// best single one only when it wins against the defaults and is faster than the best single
// one beyond doubt. One combination at most, so the cost stays bounded.
func (m *runtimeMeasure) combine(rt *report.Runtime, ch *bench.RuntimeChoice, cands []runenv.Candidate) error {
	r := m.r
	var winners []int // indices into cands, by ratio
	for i, v := range ch.Verdicts[1:len(cands)] {
		if v.Wins {
			winners = append(winners, i+1)
		}
	}
	slices.SortStableFunc(winners, func(a, b int) int { return cmp.Compare(ch.Verdicts[a].Ratio, ch.Verdicts[b].Ratio) })
	if len(winners) < 2 {
		return nil
	}
	best := cands[winners[0]]
	comb := best
	for _, w := range winners[1:] {
		if c, ok := runenv.Combine(comb, cands[w]); ok {
			comb = c
		}
	}
	if comb.Name == best.Name {
		return nil // every winner changes what the best one does
	}
	r.logf("measuring the winners together: %s against %s and libtorch's defaults", comb.Name, best.Name)
	res, control, envs, err := m.measure([]runenv.Candidate{cands[0], best, comb}, "measuring: runtime (combined)")
	if err != nil {
		return err
	}
	ch2, err := bench.ChooseRuntime(res[0], control, res[1:], r.cfg.Optimize.MinSpeedup, r.cfg.Bench.Seed+101)
	if err != nil {
		return err
	}
	v := ch2.Verdicts[2]
	ratio, lo, hi, err := bench.ProcessRatioCI(res[1], res[2], bench.DefaultResamples, r.cfg.Bench.Seed+102)
	if err != nil {
		return err
	}
	vsBest := fmt.Sprintf("%.3f (95%% CI %.3f-%.3f) vs %s alone", ratio, lo, hi, best.Name)
	row := runtimeRow(v, envs[2])
	switch {
	case !v.Wins:
		row.Why = fmt.Sprintf("not kept (second run, with %s and the defaults): %s; ratio %s", best.Name, strings.TrimPrefix(v.Why, "not kept: "), vsBest)
	case hi >= 1:
		row.Why = fmt.Sprintf("not kept (second run, with %s and the defaults): not faster than %s alone beyond doubt: ratio %s; vs the defaults %s", best.Name, best.Name, vsBest, strings.TrimPrefix(v.Why, "kept: "))
	default:
		row.Kept = true
		row.Why = fmt.Sprintf("kept (second run, with %s and the defaults): ratio %s; vs the defaults %s", best.Name, vsBest, strings.TrimPrefix(v.Why, "kept: "))
		for i := range rt.Candidates {
			if rt.Candidates[i].Kept {
				rt.Candidates[i].Kept = false
				rt.Candidates[i].Why = fmt.Sprintf("not kept: %s (the winners together) is faster still; %s", comb.Name, strings.TrimPrefix(rt.Candidates[i].Why, "kept: "))
			}
		}
		rt.Chosen, r.runtime = comb.Name, comb
		rt.Note = fmt.Sprintf("%s; then %s, measured together, beat %s alone", rt.Note, comb.Name, best.Name)
	}
	// The row goes before the control, the last.
	rt.Candidates = slices.Insert(rt.Candidates, len(rt.Candidates)-1, row)
	r.logf("  %-20s %s", comb.Name, row.Why)
	return nil
}
