package pipeline

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/report"
)

// baselineShiftLimit is how far (as a ratio) the original's p50 may move between two
// measurements at the same thread count before the run says the machine's load changed: the
// figures of different tables then describe different machines.
const baselineShiftLimit = 1.2

// measurement is one interleaved timing run: the original first, then candidates. A stage
// row takes all its timing figures from one measurement, so its speedup is the ratio of the
// p50s it prints.
type measurement struct {
	name    string
	threads int
	cmp     *bench.Comparison
	// replaced: re-measured because its baseline moved; kept in the report, left out of
	// later comparisons.
	replaced bool
}

func (m *measurement) result(name string) *bench.Result {
	for _, r := range m.cmp.Results {
		if r.Name == name {
			return r
		}
	}
	return nil
}

func (m *measurement) pair(name string) (bench.Pair, bool) {
	for _, p := range m.cmp.Pairs {
		if p.Other == name {
			return p, true
		}
	}
	return bench.Pair{}, false
}

// baselineP50 is the original's p50 in this measurement.
func (m *measurement) baselineP50() time.Duration { return m.cmp.Results[0].Stats.P50 }

// slowRound, set on Options by tests, returns a delay to add to every run of a target in a
// measurement: a simulated change of machine load within one run.
type slowRound func(measurement, target string) time.Duration

func (r *run) delayFor(meas, target string) time.Duration {
	if r.opts.slow != nil {
		return r.opts.slow(meas, target)
	}
	return 0
}

// measure runs the original and cands interleaved (shuffled rounds) and records the
// measurement; a candidate not timed before takes its stage row's figures from it.
func (r *run) measure(name string, cands []*candidate, opts bench.CompareOptions) (*measurement, error) {
	orig := &target{ctx: r.ctx, name: "original", c: r.orig, inputs: r.inputs, delay: r.delayFor(name, "original")}
	if p := r.opts.Progress; p != nil && opts.Runs > 0 {
		// The original runs once per round: first run, warm-up rounds, timed rounds.
		total, done := 1+opts.Warmup+opts.Runs, 0
		orig.onRun = func() {
			done++
			p("measuring: "+name, min(done, total), total)
		}
	}
	targets := []bench.Target{orig}
	for _, c := range cands {
		targets = append(targets, &target{ctx: r.ctx, name: c.name, c: c, inputs: r.inputs, delay: r.delayFor(name, c.name)})
	}
	// Timing starts each model from a reset state, as a stream would.
	for _, c := range append([]*candidate{r.orig}, cands...) {
		if err := c.start(); err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
	}
	cmp, err := bench.Compare(targets, opts)
	if err != nil {
		return nil, err
	}
	if opts.Decided != nil && cmp.Rounds < opts.Runs {
		d := fmt.Sprintf("measurement %q: %d of %d rounds, ended when every decision it takes was settled beyond doubt (quick search; --search full times every round)", name, cmp.Rounds, opts.Runs)
		r.rep.Decisions = append(r.rep.Decisions, d)
		r.logf("  %s", d)
	}
	m := &measurement{name: name, threads: torch.NumThreads(), cmp: cmp}
	r.measurements = append(r.measurements, m)
	for _, c := range append([]*candidate{r.orig}, cands...) {
		if c.meas == nil {
			c.meas = m
		}
	}
	return m, nil
}

// baselineShift compares the original's p50 in m with every earlier measurement at the same
// thread count and describes the largest move beyond baselineShiftLimit ("" when none).
func (r *run) baselineShift(m *measurement) string {
	worst, why := 1.0, ""
	for _, o := range r.measurements {
		if o == m || o.replaced || o.threads != m.threads {
			continue
		}
		a, b := msOf(o.baselineP50()), msOf(m.baselineP50())
		if a <= 0 || b <= 0 {
			continue
		}
		if ratio := math.Max(a/b, b/a); ratio > worst {
			worst = ratio
			why = fmt.Sprintf("the original's p50 moved from %.3f ms (measurement %q) to %.3f ms (measurement %q), %.0f%%, at %s",
				a, o.name, b, m.name, (ratio-1)*100, report.Plural(m.threads, "thread"))
		}
	}
	if worst <= baselineShiftLimit {
		return ""
	}
	return why
}

// warn records a warning in the report and says it in the log at once.
func (r *run) warn(w string) {
	r.rep.Warnings = append(r.rep.Warnings, w)
	r.logf("WARNING: %s", w)
}

func f64(v float64) *float64 { return &v }
func intp(v int) *int        { return &v }
func strp(s string) *string  { return &s }

// stageRows turns candidates and their measurements into the report's stage table.
func (r *run) stageRows() []report.Stage {
	cosOK := cosineMeaningful(r.ref)
	row := func(c *candidate) report.Stage {
		s := report.Stage{Name: c.name, Status: c.status.String(), Reason: c.reason, Precision: c.precision, WallMs: msOf(c.wall)}
		if s.Precision == "" {
			s.Precision = "fp32"
			if r.orig != nil && c.kind != kindINT8 && c.kind != kindINT8OFI && c.kind != kindINT8Fast && c.kind != kindINT8Fuse {
				// Not built: a step that does not quantize has the input's precision.
				s.Precision = r.orig.precision
			}
		}
		if c.nodes != nil { // skipped and failed candidates have no graph
			s.Nodes = intp(total(c.nodes))
			q := 0
			for _, n := range c.quantizedOps {
				q += n
			}
			s.QuantizedOps = intp(q)
			if c != r.orig {
				s.NodeDelta = delta(r.orig.nodes, c.nodes)
			}
		}
		if c != r.orig && c.status != stSkipped && c.status != stFailed && c.nodes != nil {
			s.MaxAbsErr = f64(c.maxAbs)
			if cosOK {
				s.Cosine = f64(c.cosine)
			}
		}
		m := c.meas
		if m == nil {
			return s
		}
		res := m.result(c.name)
		if c == r.orig {
			res = m.cmp.Results[0]
		}
		if res == nil {
			return s
		}
		base := msOf(m.baselineP50())
		p50 := msOf(res.Stats.P50)
		s.Measurement, s.Threads = strp(m.name), intp(m.threads)
		s.P50Ms, s.P95Ms, s.BaselineP50Ms = f64(p50), f64(msOf(res.Stats.P95)), f64(base)
		if res.Stats.MedianCIOK {
			s.P50LoMs, s.P50HiMs = f64(msOf(res.Stats.MedianLo)), f64(msOf(res.Stats.MedianHi))
		}
		if p50 > 0 {
			s.Speedup = f64(base / p50)
		}
		if c == r.orig {
			s.SpeedupLo, s.SpeedupHi = f64(1), f64(1)
		} else if p, ok := m.pair(c.name); ok && p.RatioLo > 0 && p.RatioHi > 0 {
			s.SpeedupLo, s.SpeedupHi = f64(1/p.RatioHi), f64(1/p.RatioLo)
		}
		return s
	}
	rows := []report.Stage{row(r.orig)}
	final := r.best()
	for _, c := range r.cands {
		s := row(c)
		// A superseded row can look as fast as the kept one: say which row replaced it, so
		// its status follows from what is written beside it.
		if c.status == stSuperseded && c != final && !strings.Contains(s.Reason, "builds on") && !strings.Contains(s.Reason, "kept as") {
			s.Reason = strings.TrimPrefix(s.Reason+"; superseded by "+final.name+", the kept stage", "; ")
		}
		rows = append(rows, s)
	}
	return rows
}

// measurementRows are the report's record of every measurement taken.
func (r *run) measurementRows() []report.Measurement {
	var out []report.Measurement
	for _, m := range r.measurements {
		rm := report.Measurement{Name: m.name, Threads: m.threads, Rounds: m.cmp.Rounds, Order: m.cmp.Order}
		for _, res := range m.cmp.Results {
			s := res.Stats
			rm.Targets = append(rm.Targets, report.TargetStats{Name: res.Name, N: s.N, MinMs: msOf(s.Min), P50Ms: msOf(s.P50),
				P90Ms: msOf(s.P90), P95Ms: msOf(s.P95), P99Ms: msOf(s.P99), MaxMs: msOf(s.Max), MeanMs: msOf(s.Mean)})
		}
		out = append(out, rm)
	}
	return out
}

func delta(a, b map[string]int) map[string]int {
	d := map[string]int{}
	for k, v := range b {
		if v != a[k] {
			d[k] = v - a[k]
		}
	}
	for k, v := range a {
		if _, ok := b[k]; !ok {
			d[k] = -v
		}
	}
	return d
}
