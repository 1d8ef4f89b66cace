package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

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
	// controlName is the second process with libtorch's defaults.
	controlName = "default (second process)"
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
		rt.Measured, rt.Candidates, rt.Chosen = false, nil, runenv.DefaultCandidate
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
	cands := runenv.Candidates(runenv.Settings{Threads: r.threads, OpenMP: openmp}, nil)
	if len(cands) < 2 {
		rt.Measured = true
		rt.Candidates = []report.RuntimeCandidate{{Name: runenv.DefaultCandidate, Env: []string{}, Ratio: 1, RatioLo: 1, RatioHi: 1, P95Ratio: 1, Kept: true,
			Why: "kept: the only candidate (one thread has no wait policy to tune, and no other allocator is installed)"}}
		return nil
	}
	// The candidates serve the artifact as it will be written, from a private copy.
	dir, err := os.MkdirTemp("", "torchspeed-runtime-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	final := r.best()
	save := final.mod
	if final.save != nil {
		save = final.save
	}
	path := filepath.Join(dir, "candidate.torchspeed.pt")
	if err := torchspeed.SaveArtifact(save, path, r.manifest(final)); err != nil {
		return fmt.Errorf("save a copy to serve: %w", err)
	}
	base := runenv.ScrubEnv(os.Environ())
	args := []string{"-m", path, "--runtime", "default", "--threads", strconv.Itoa(r.threads),
		"--warmup", strconv.Itoa(max(r.cfg.Bench.Warmup, 10)), "--seed", strconv.FormatUint(r.cfg.Bench.Seed, 10)}
	specs := make([]benchrun.ServerSpec, len(cands))
	envs := make([][]string, len(cands))
	for i, c := range cands {
		if envs[i], err = c.Env(openmp); err != nil {
			return err
		}
		specs[i] = benchrun.ServerSpec{Name: "runtime candidate " + c.Name,
			Argv: append(append([]string(nil), r.opts.Serve...), args...), Env: append(append([]string(nil), base...), envs[i]...)}
	}
	// The control: a second process with the defaults, to tell a difference between settings
	// from one between processes (bench.ChooseRuntime).
	specs = append(specs, benchrun.ServerSpec{Name: "runtime control " + controlName, Argv: specs[0].Argv, Env: specs[0].Env})
	envs = append(envs, envs[0])
	rounds := max(minRuntimeRounds, r.cfg.Bench.StageRuns)
	r.logf("measuring %d runtime settings in processes of their own, %d shuffled rounds at %d thread(s)", len(cands), rounds, r.threads)
	srv, err := benchrun.StartServers(r.ctx, specs, nil)
	if err != nil {
		return err
	}
	defer srv.Close()
	o := benchrun.RoundsOptions{Rounds: rounds, Warmup: runtimeTurnWarmup, Runs: runtimeTurnRuns, Seed: r.cfg.Bench.Seed}
	if p := r.opts.Progress; p != nil {
		o.Progress = func(done, total int) { p("measuring: runtime", done, total) }
	}
	lat, err := benchrun.MeasureRounds(r.ctx, srv, o)
	if err != nil {
		return err
	}
	if err := srv.Close(); err != nil {
		return err
	}
	results := make([]*bench.Result, len(cands))
	for i, c := range cands {
		results[i] = &bench.Result{Name: c.Name, Samples: lat[i]}
	}
	control := &bench.Result{Name: controlName, Samples: lat[len(cands)]}
	ch, err := bench.ChooseRuntime(results[0], control, results[1:], r.cfg.Optimize.MinSpeedup, r.cfg.Bench.Seed)
	if err != nil {
		return err
	}
	rt.Measured, rt.Chosen, rt.Noisy, rt.Note = true, ch.Chosen, ch.Noisy, ch.Why
	if ch.Noisy {
		r.warn("runtime settings: " + ch.Why)
	}
	rt.Rounds, rt.RunsPerRound, rt.WarmupPerRound = rounds, runtimeTurnRuns, runtimeTurnWarmup
	for i, v := range ch.Verdicts {
		rt.Candidates = append(rt.Candidates, report.RuntimeCandidate{
			Name: v.Name, Env: envs[i], N: v.Stats.N, P50Ms: msOf(v.Stats.P50), P95Ms: msOf(v.Stats.P95),
			Ratio: v.Ratio, RatioLo: v.RatioLo, RatioHi: v.RatioHi, P95Ratio: v.P95Ratio, Kept: v.Kept, Why: v.Why,
		})
		r.logf("  %-20s p50 %.3f ms p95 %.3f ms: %s", v.Name, msOf(v.Stats.P50), msOf(v.Stats.P95), v.Why)
		if v.Kept && i < len(cands) {
			r.runtime = cands[i]
		}
	}
	r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("runtime: %s (measured against libtorch's defaults at %d thread(s) in %d shuffled rounds of separate processes)", ch.Chosen, r.threads, rounds))
	return nil
}
