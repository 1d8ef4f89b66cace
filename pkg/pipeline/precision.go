package pipeline

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// int8Decision is what the INT8-or-FP32 decision was taken on, kept so that the precision
// check under the kept runtime setting (recheckPrecision) can take it again the other way.
type int8Decision struct {
	c      *candidate // the INT8 model as quantized
	picked *candidate // c or its optimize_for_inference variant, whichever was faster
	best8  *candidate // picked, or its fast_qdq / fuse_conv_add variant: what INT8 would ship as
	fp32   *candidate // the best FP32 model
	ofi    *candidate
	match  string
	// meas is the measurement the decision was taken on (best8 and fp32 side by side).
	meas *measurement
	// int8Threads is the thread count INT8 was measured and validated at; int8Val its
	// validation, before the FP32 one replaced it.
	int8Threads int
	int8Val     *report.Validation
	forced      bool
	// reject is c's own reason for losing to FP32 (when best8 is a variant of it).
	reject func() string
	// statuses as they stood before the decision was applied; warned is the warning a
	// rejection added.
	statuses map[*candidate]savedStatus
	warned   string
	usedINT8 bool
	// alt is the model of the other precision the runtime step measured (nil: none), at
	// altThreads; altSetting and altRows are its runtime choice.
	alt        *candidate
	altThreads int
	altSetting runenv.Candidate
	altRows    []report.RuntimeCandidate
}

// savedStatus is a candidate's status and reason at a snapshot.
type savedStatus struct {
	status state
	reason string
}

// snapshot records the candidates' statuses before the decision is applied.
func (d *int8Decision) snapshot(r *run) {
	d.statuses = map[*candidate]savedStatus{}
	for _, c := range append([]*candidate{r.orig}, r.cands...) {
		d.statuses[c] = savedStatus{c.status, c.reason}
	}
}

// restore puts the candidates back as snapshot found them and takes back what applyINT8 added
// to the report, except the decision lines (the report's history of the run).
func (d *int8Decision) restore(r *run) {
	for c, s := range d.statuses {
		c.status, c.reason = s.status, s.reason
	}
	if d.warned != "" {
		if i := slices.Index(r.rep.Warnings, d.warned); i >= 0 {
			r.rep.Warnings = slices.Delete(r.rep.Warnings, i, i+1)
		}
		d.warned = ""
	}
	r.rep.Quantize.Kept = false
}

// applyINT8 keeps INT8 (as best8) or FP32 as d says, with the statuses, thread count and
// validation that go with the choice.
func (r *run) applyINT8(dec *int8Decision, d quant.Decision) error {
	c, picked, best8 := dec.c, dec.picked, dec.best8
	what := "INT8"
	if best8 != c {
		what = "INT8 (as " + best8.name + ")"
	}
	r.rep.Decisions = append(r.rep.Decisions, what+": "+d.Reason)
	dec.usedINT8 = d.UseINT8
	if !d.UseINT8 {
		c.status, c.reason = stRejected, d.Reason
		if best8 != c {
			c.reason = dec.reject()
			for _, x := range uniqCands(picked, best8) {
				if x != c {
					x.status, x.reason = stRejected, x.reason+"; "+d.Reason
				}
			}
		}
		dec.warned = d.Reason
		r.warn(d.Reason)
		if err := r.fp32ThreadsBack(dec.fp32); err != nil {
			return err
		}
		// The artifact is FP32 now: its validation is the FP32 one.
		return r.validateFP32()
	}
	if r.threads != dec.int8Threads {
		if err := torch.SetNumThreads(dec.int8Threads); err != nil {
			return err
		}
		r.threads = dec.int8Threads
		r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("threads: %d again, INT8's choice", dec.int8Threads))
	}
	if dec.int8Val != nil {
		v := *dec.int8Val
		v.Notes = slices.Clone(v.Notes)
		r.rep.Validation = &v
	}
	if best8 != c {
		best8.status, best8.reason = stKept, best8.reason+"; "+d.Reason
		passes := strings.Join(best8.passes, " and ")
		c.status, c.reason = stSuperseded, fmt.Sprintf("kept as what the artifact saves: %s is this model with %s re-applied at load", best8.name, passes)
		if picked != c && picked != best8 {
			picked.status, picked.reason = stSuperseded, fmt.Sprintf("%s; %s builds on it", picked.reason, best8.name)
		}
		what := "a pass"
		if len(best8.passes) > 1 {
			what = "passes"
		}
		note := fmt.Sprintf("the artifact is %s plus %s, %s re-applied at load; these figures are %s's", c.name, passes, what, c.name)
		if picked == dec.ofi {
			note += ", and optimize_for_inference's " + dec.match
		}
		switch {
		case best8.kind == kindINT8Fuse:
			note += "; fuse_conv_add's outputs differ from " + picked.name + "'s by one rounding per fused convolution, validated against FP32 (cosine " + fmt.Sprintf("%.5f", best8.valCosine) + ")"
		case best8 != picked:
			note += "; fast_qdq's outputs are exactly " + picked.name + "'s"
		}
		r.rep.Validation.Notes = append(r.rep.Validation.Notes, note)
	} else {
		c.status, c.reason = stKept, d.Reason
	}
	r.rep.Quantize.Kept = true
	if dec.fp32 != r.orig {
		dec.fp32.status = stSuperseded
	}
	return nil
}

// otherPrecision saves the model of the precision not kept (FP32 when INT8 was kept, INT8 when
// it lost to FP32) into dir for the runtime step to measure beside the artifact, or returns nil
// when there is no such decision (INT8 not tried, failed validation, or forced).
func (r *run) otherPrecision(dir string) (*serveGroup, error) {
	dec := r.int8
	if dec == nil || dec.forced {
		return nil, nil
	}
	alt, threads := dec.best8, dec.int8Threads
	if dec.usedINT8 {
		alt, threads = dec.fp32, r.fp32Threads.Threads
		if threads == 0 || !r.autoThreads() {
			threads = r.threads
		}
	}
	if alt == nil || alt == r.best() {
		return nil, nil
	}
	if why := r.precisionSettled(dec); why != "" {
		r.rep.Runtime.Precision = &report.PrecisionCheck{First: r.best().name, FirstPrecision: r.best().precision, FirstThreads: r.threads,
			FirstRuntime: runenv.DefaultCandidate, Other: alt.name, OtherPrecision: alt.precision, OtherThreads: threads, Why: why}
		d := fmt.Sprintf("INT8 or FP32 where the artifact runs: not measured (%s)", why)
		r.rep.Decisions = append(r.rep.Decisions, d)
		r.logf("%s", d)
		return nil, nil
	}
	if dec.usedINT8 && r.fp32Deferred {
		if err := r.fp32ThreadsNow(dec.fp32); err != nil {
			return nil, err
		}
		threads = r.fp32Threads.Threads
	}
	path, err := r.saveCopy(alt, threads, dir, "other")
	if err != nil {
		return nil, err
	}
	dec.alt, dec.altThreads = alt, threads
	return &serveGroup{name: alt.name, path: path, threads: threads}, nil
}

// otherRuntime chooses the other model's runtime setting from its latencies under each
// candidate (res, in cands' order), as the artifact's own is chosen, without a control.
func (r *run) otherRuntime(res []*bench.ProcessResult, cands []runenv.Candidate, envs [][]string) error {
	dec := r.int8
	ch, err := bench.ChooseRuntime(res[0], nil, res[1:], r.cfg.Optimize.MinSpeedup, r.cfg.Bench.Seed+301)
	if err != nil {
		return err
	}
	dec.altSetting, dec.altRows = cands[0], nil
	for i, v := range ch.Verdicts {
		dec.altRows = append(dec.altRows, runtimeRow(v, envs[i]))
		if v.Kept {
			dec.altSetting = cands[i]
		}
	}
	r.logf("  %s: %s kept (%s)", dec.alt.name, dec.altSetting.Name, ch.Verdicts[slices.IndexFunc(ch.Verdicts, func(v bench.RuntimeVerdict) bool { return v.Kept })].Why)
	return nil
}

// recheckPrecision takes the INT8-or-FP32 decision again where the artifact will run. The first
// decision was timed in optimize's own process, with every candidate loaded at once and glibc
// malloc; an artifact runs alone, with the runtime setting measured for it, and the allocator
// changes the ranking: on the digits CNN at one thread, served with glibc INT8 ran 1.5x FP32's
// time (0.062 vs 0.041 ms), with tcmalloc the two tied (0.024 ms each). So the runtime step
// measures its settings on the model of the other precision too (otherPrecision, otherRuntime),
// and here the artifact with its setting and the other model with its own each serve in
// processes of their own, beside a second group of the artifact (the control), in shuffled
// rounds. The other replaces the artifact only when it is faster beyond doubt, by more than the
// control's spread and the minimum speedup, without a worse p95 (bench.ChooseRuntime's rule).
func (r *run) recheckPrecision() error {
	dec, rt := r.int8, r.rep.Runtime
	if rt != nil && rt.Precision != nil && !rt.Precision.Measured && r.runtime.Name != "" {
		rt.Precision.FirstRuntime = r.runtime.Name // left out by the quick search: say with what the artifact runs
	}
	if dec == nil || dec.alt == nil || rt == nil || !rt.Measured {
		return nil
	}
	cur, alt := r.best(), dec.alt
	curSetting, altSetting := r.runtime, dec.altSetting
	if curSetting.Name == "" {
		curSetting = runenv.Candidate{Name: runenv.DefaultCandidate, Allocator: "default"}
	}
	if altSetting.Name == "" {
		altSetting = runenv.Candidate{Name: runenv.DefaultCandidate, Allocator: "default"}
	}
	pc := &report.PrecisionCheck{First: cur.name, FirstPrecision: cur.precision, FirstThreads: r.threads, FirstRuntime: curSetting.Name,
		Other: alt.name, OtherPrecision: alt.precision, OtherThreads: dec.altThreads, OtherRuntime: altSetting.Name, OtherCandidates: dec.altRows}
	rt.Precision = pc
	if err := r.timePrecision(pc, curSetting, altSetting); err != nil {
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		pc.Measured, pc.Why = false, err.Error()
		r.warn(fmt.Sprintf("%s against %s where the artifact runs not measured: %v; %s kept", alt.name, cur.name, err, cur.name))
		return nil
	}
	if !pc.Switched {
		return nil
	}
	dec.restore(r)
	d := quant.Decision{UseINT8: !dec.usedINT8, Reason: "taken again where the artifact runs: " + pc.Why}
	if err := r.applyINT8(dec, d); err != nil {
		return err
	}
	// The artifact runs with the setting measured on it; the runtime table shows that model's.
	r.runtime = dec.altSetting
	rt.Chosen, rt.Threads = altSetting.Name, dec.altThreads
	rt.Candidates, pc.OtherCandidates = pc.OtherCandidates, rt.Candidates
	rt.Note = fmt.Sprintf("the artifact is %s, which replaced %s (INT8 or FP32, where the artifact runs): the settings are those measured on it, in the same rounds, against its own defaults, with no control group of its own", alt.name, cur.name)
	r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("runtime: %s, measured on %s", altSetting.Name, alt.name))
	return nil
}

// timePrecision serves the artifact and the other model, each with its setting, and fills pc.
func (r *run) timePrecision(pc *report.PrecisionCheck, curSetting, altSetting runenv.Candidate) error {
	dec := r.int8
	if d := r.defaults; d != nil && curSetting.Name == runenv.DefaultCandidate && d.others[altSetting.Name] != nil {
		// The runtime step served the artifact with the defaults, a control group of it, and
		// the other model with its setting, in the same rounds: that is this measurement, so
		// it is not taken again.
		named := func(p *bench.ProcessResult, name string) *bench.ProcessResult {
			c := *p
			c.Name = name
			return &c
		}
		r.logf("%s (%s) against %s (%s): from the runtime settings' rounds, not timed again", dec.alt.name, altSetting.Name, r.best().name, curSetting.Name)
		return r.judgePrecision(pc, []*bench.ProcessResult{named(d.artifact, r.best().name), named(d.others[altSetting.Name], dec.alt.name), named(d.control, controlName)}, d.rounds, altSetting,
			" (from the runtime settings' rounds, where both models served with these settings beside the control group: not timed again)")
	}
	if !r.fits(r.serveEstimate(3, runtimeProcesses, runtimeRounds(r.cfg.Bench.StageRuns))) {
		return fmt.Errorf("%s", r.budgetNote())
	}
	openmp := r.opts.Settings["openmp"]
	if openmp == "" {
		openmp = "gnu"
	}
	base := runenv.ScrubEnv(os.Environ())
	curEnv, err := curSetting.Environ(openmp, base)
	if err != nil {
		return err
	}
	altEnv, err := altSetting.Environ(openmp, base)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "torchspeed-precision-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cur := r.best()
	curPath, err := r.saveCopy(cur, r.threads, dir, "first")
	if err != nil {
		return err
	}
	altPath, err := r.saveCopy(dec.alt, dec.altThreads, dir, "other")
	if err != nil {
		return err
	}
	m := &runtimeMeasure{r: r, openmp: openmp, rounds: runtimeRounds(r.cfg.Bench.StageRuns)}
	r.logf("measuring %s (%s) against %s (%s), each in %d processes of its own (and a second group of %d of %s), %d shuffled rounds",
		dec.alt.name, altSetting.Name, cur.name, curSetting.Name, runtimeProcesses, runtimeProcesses, cur.name, m.rounds)
	res, err := m.serve([]serveGroup{
		{name: cur.name, path: curPath, threads: r.threads, environ: curEnv},
		{name: dec.alt.name, path: altPath, threads: dec.altThreads, environ: altEnv},
		{name: controlName, path: curPath, threads: r.threads, environ: curEnv},
	}, "measuring: precision")
	if err != nil {
		return err
	}
	return r.judgePrecision(pc, res, m.rounds, altSetting, "")
}

// judgePrecision fills pc from the latencies of the artifact, the other model and the control
// (res, in that order), measured in rounds rounds; from says where they came from ("": this
// check's own processes).
func (r *run) judgePrecision(pc *report.PrecisionCheck, res []*bench.ProcessResult, rounds int, altSetting runenv.Candidate, from string) error {
	dec, cur := r.int8, r.best()
	ch, err := bench.ChooseRuntime(res[0], res[2], res[1:2], r.cfg.Optimize.MinSpeedup, r.cfg.Bench.Seed+201)
	if err != nil {
		return err
	}
	v, ctl := ch.Verdicts[1], ch.Verdicts[2]
	pc.Measured, pc.Processes, pc.Rounds, pc.RunsPerRound = true, runtimeProcesses, rounds, runtimeTurnRuns
	pc.FirstP50Ms, pc.FirstP95Ms = msOf(ch.Verdicts[0].Stats.P50), msOf(ch.Verdicts[0].Stats.P95)
	pc.OtherP50Ms, pc.OtherP95Ms = msOf(v.Stats.P50), msOf(v.Stats.P95)
	pc.Ratio, pc.RatioLo, pc.RatioHi, pc.P95Ratio = v.Ratio, v.RatioLo, v.RatioHi, v.P95Ratio
	pc.ControlRatio, pc.ControlLo, pc.ControlHi = ctl.Ratio, ctl.RatioLo, ctl.RatioHi
	pc.Switched = v.Kept
	why := strings.TrimPrefix(strings.TrimPrefix(v.Why, "kept: "), "not kept: ")
	if r.opts.switchPrecision {
		pc.Switched, why = true, "switched by the test hook whatever it measured ("+why+")"
	}
	if pc.Switched {
		pc.Why = fmt.Sprintf("%s with %s is %s, so it replaces %s", dec.alt.name, altSetting.Name, why, cur.name)
	} else {
		pc.Why = fmt.Sprintf("%s stays: %s with %s is %s", cur.name, dec.alt.name, altSetting.Name, why)
		if ch.Noisy {
			pc.Why += fmt.Sprintf("; two groups of %s differed beyond doubt (ratio %.3f, 95%% CI %.3f-%.3f)", cur.name, ctl.Ratio, ctl.RatioLo, ctl.RatioHi)
		}
	}
	pc.Why += from
	r.logf("  %s", pc.Why)
	return nil
}
