package report

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the whole report. Non-finite figures become null and are listed in
// non_finite (see markNonFinite).
func (r *Report) WriteJSON(w io.Writer) error {
	r.prepare()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// prepare fills what every rendering needs: the schema version, the summary, non-nil lists
// (JSON readers get [] rather than null for "none") and null for non-finite figures.
func (r *Report) prepare() {
	r.SchemaVersion = SchemaVersion
	r.markNonFinite()
	if r.Summary == nil {
		r.Summary = r.summaryLines()
	}
	for _, l := range []*[]string{&r.Decisions, &r.Warnings, &r.NonFinite, &r.Settings.Applied, &r.Settings.Notes} {
		if *l == nil {
			*l = []string{}
		}
	}
	if r.Stages == nil {
		r.Stages = []Stage{}
	}
	if rt := r.Runtime; rt != nil {
		rt.Candidates = nonNilRows(rt.Candidates)
		if pc := rt.Precision; pc != nil {
			pc.OtherCandidates = nonNilRows(pc.OtherCandidates)
		}
	}
	if r.Measurements == nil {
		r.Measurements = []Measurement{}
	}
	if r.StepTimes == nil {
		r.StepTimes = []StepTime{}
	}
	if r.Settings.Env == nil {
		r.Settings.Env = []EnvVar{}
	}
	if r.Model.Inputs == nil {
		r.Model.Inputs = []InputSpec{}
	}
	for i := range r.Stages {
		if r.Stages[i].NodeDelta == nil {
			r.Stages[i].NodeDelta = map[string]int{}
		}
	}
	if v := r.Validation; v != nil {
		for _, l := range []*[]string{&v.Failures, &v.Notes} {
			if *l == nil {
				*l = []string{}
			}
		}
		if v.Layers == nil {
			v.Layers = []Layer{}
		}
	}
	if q := r.Quantize; q != nil {
		if q.FP32Layers == nil {
			q.FP32Layers = []string{}
		}
		if q.Warnings == nil {
			q.Warnings = []string{}
		}
		if q.QuantizedOps == nil {
			q.QuantizedOps = map[string]int{}
		}
		if q.Attempts == nil {
			q.Attempts = []FallbackAttempt{}
		}
		for i := range q.Attempts {
			for _, l := range []*[]string{&q.Attempts[i].FP32Layers, &q.Attempts[i].Failures} {
				if *l == nil {
					*l = []string{}
				}
			}
		}
	}
	if r.Manifest == nil {
		r.Manifest = json.RawMessage("null")
	}
}

func ms(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// samplesData is how many samples were checked and of what, counted once: a data
// description from calib's Describe() starts with its own count ("500 samples of ...").
func (v *Validation) samplesData() string {
	if d := v.Data; d != "" && d[0] >= '0' && d[0] <= '9' {
		return d
	}
	return Plural(v.Samples, "sample") + ": " + v.Data
}

// msOrBlank is a figure reports from before it was recorded lack (0): blank, not 0.000.
func msOrBlank(v float64) string {
	if v == 0 {
		return ""
	}
	return ms(v)
}

func msp(v *float64) string {
	if v == nil {
		return "-"
	}
	return ms(*v)
}

// RoundedSpeedup is how a row's speedup is printed: the ratio of the two p50s as printed, so
// that a reader dividing the table's figures gets the table's speedup.
func RoundedSpeedup(baselineP50, p50 float64) float64 {
	var b, p float64
	fmt.Sscan(ms(baselineP50), &b)
	fmt.Sscan(ms(p50), &p)
	if p <= 0 {
		return 0
	}
	return b / p
}

func speed(s Stage) string {
	if s.Speedup == nil || s.BaselineP50Ms == nil || s.P50Ms == nil {
		return "-"
	}
	sp := RoundedSpeedup(*s.BaselineP50Ms, *s.P50Ms)
	if s.SpeedupLo == nil || s.SpeedupHi == nil {
		return fmt.Sprintf("%.2fx", sp)
	}
	return fmt.Sprintf("%.2fx [%.2f, %.2f]", sp, *s.SpeedupLo, *s.SpeedupHi)
}

func errCell(s Stage) string {
	if s.MaxAbsErr == nil && s.Cosine == nil {
		return "-"
	}
	return fmt.Sprintf("%s / %s", gfmt(s.MaxAbsErr, "%.2g"), gfmt(s.Cosine, "%.5f"))
}

func gfmt(v *float64, format string) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf(format, *v)
}

// threadsNote says which thread counts the stage rows were timed at when one differs from the
// final benchmark's, so a row's p50 is not read against the final line's: a stage table at 1
// thread and a final line at 4 differ by the threads, not the steps.
func (r *Report) threadsNote() string {
	b := r.Bench
	if b == nil {
		return ""
	}
	var other []string
	for _, s := range r.Stages {
		if s.Threads != nil && *s.Threads != b.Threads && !slices.Contains(other, fmt.Sprint(*s.Threads)) {
			other = append(other, fmt.Sprint(*s.Threads))
		}
	}
	if len(other) == 0 {
		return ""
	}
	return fmt.Sprintf("rows at %s thread(s) were timed before the thread count was chosen; the final benchmark ran at %s. Each row's speedup is against the original at the row's own count: compare p50s across rows and with the final line only at equal threads",
		strings.Join(other, ", "), Plural(b.Threads, "thread"))
}

func threadsCell(t *int) string {
	if t == nil {
		return "-"
	}
	return fmt.Sprint(*t)
}

// WriteTable writes the stage table for a terminal.
func (r *Report) WriteTable(w io.Writer) error {
	r.prepare()
	for _, l := range r.Summary {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "stage\tstatus\tprecision\tthreads\tp50 ms\tp95 ms\toriginal p50 ms\tspeedup [95% CI]\tmax err / cosine")
	for _, s := range r.Stages {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Status, s.Precision, threadsCell(s.Threads),
			msp(s.P50Ms), msp(s.P95Ms), msp(s.BaselineP50Ms), speed(s), errCell(s))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := r.threadsNote(); n != "" {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if len(r.StepTimes) > 0 {
		fmt.Fprintf(w, "optimize took %.1f s (%s search; report.md has each step's time)\n", r.WallMs/1000, r.Search)
	}
	if b := r.Bench; b != nil {
		fmt.Fprintf(w, "\nfinal (%s, %s): p50 %s ms (original %s ms), p95 %s ms (original %s ms), %s; %d runs interleaved\n",
			b.Precision, Plural(b.Threads, "thread"), ms(b.OptimizedP50), ms(b.OriginalP50), ms(b.OptimizedP95), ms(b.OriginalP95), b.Verdict, b.Runs)
	}
	if rf := r.Roofline; rf != nil {
		fmt.Fprintf(w, "roofline: %s\n", rf.Summary())
	}
	if v := r.Validation; v != nil {
		fmt.Fprintf(w, "validation of %s (%s, %s%s): %s  %s\n", v.Checked, v.CheckedPrecision, v.samplesData(),
			synth(v.Synthetic), passWord(v.Passed), metricLine(v.Metrics))
	}
	if m := r.Memory; m != nil {
		fmt.Fprintln(w, strings.TrimSuffix(m.Line(), "."))
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if r.Artifact != nil {
		fmt.Fprintf(w, "artifact: %s\n", *r.Artifact)
	}
	return nil
}

func synth(b bool) string {
	if b {
		return ", random data: unverified"
	}
	return ""
}

func passWord(b bool) string {
	if b {
		return "PASS"
	}
	return "FAIL"
}

// metricRows lists the measured metrics, in a fixed order, with their printed values.
func metricRows(m Metrics) [][2]string {
	var rows [][2]string
	add := func(name string, v *float64, format string) {
		if v != nil {
			rows = append(rows, [2]string{name, fmt.Sprintf(format, *v)})
		}
	}
	add("cosine", m.Cosine, "%.6f")
	add("min_sample_cosine", m.MinSampleCosine, "%.6f")
	add("max_abs_error", m.MaxAbsError, "%.3g")
	add("mean_abs_error", m.MeanAbsError, "%.3g")
	add("top1_agreement", m.Top1Agreement, "%.4f")
	for _, c := range []struct {
		name string
		v    *int
	}{{"top1_counted", m.Top1Counted}, {"top1_tied", m.Top1Tied}} {
		if c.v != nil {
			rows = append(rows, [2]string{c.name, fmt.Sprintf("%d", *c.v)})
		}
	}
	add("kl_divergence", m.KLDivergence, "%.3g")
	add("top1_original", m.Top1Original, "%.4f")
	add("top1_checked", m.Top1Checked, "%.4f")
	add("top5_original", m.Top5Original, "%.4f")
	add("top5_checked", m.Top5Checked, "%.4f")
	add("accuracy_drop_points", m.AccuracyDropPoints, "%.2f")
	return rows
}

func metricLine(m Metrics) string {
	var parts []string
	for _, r := range metricRows(m) {
		parts = append(parts, r[0]+"="+r[1])
	}
	return strings.Join(parts, " ")
}

// glossary explains the words the tables use, once.
var glossary = []string{
	"**p50 / p95**: the median and 95th-percentile latency of one inference.",
	"**speedup**: the original's p50 divided by the stage's p50, both from the same interleaved measurement (named in the row), with a 95% bootstrap interval.",
	"**kept / superseded**: a kept step is in the artifact; a superseded one was kept, then built upon by a later kept step (so it is in the artifact too, under it).",
	"**ofi**: `optimize_for_inference`, libtorch's pass that fuses ops for inference (oneDNN); it is re-applied when the artifact loads.",
	"**U test**: the Mann-Whitney U test of the two latency samples; a difference is called only when p < 0.05 and the interval excludes 1.",
	"**roofline**: the model's multiply-add work per inference divided by its p50, as a share of the compute peak measured on these CPUs.",
}

// WriteMarkdown writes the report for people: a summary, the stage table, the decisions,
// validation, the final benchmark and the machine.
func (r *Report) WriteMarkdown(w io.Writer) error {
	r.prepare()
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# torchspeed report: %s\n\n", r.Model.Path)
	p("## Summary\n\n")
	for _, l := range r.Summary {
		p("- %s\n", l)
	}
	p("\ntorchspeed %s, libtorch %s, %s, %.1f s.\n\n", r.Torchspeed, r.Libtorch, r.Started.Format("2006-01-02 15:04:05 MST"), r.WallMs/1000)
	var ins []string
	for _, in := range r.Model.Inputs {
		ins = append(ins, fmt.Sprintf("%s %s%v", in.Name, in.DType, in.Shape))
	}
	p("Model: `%s` (%d bytes, sha256 `%.16s…`), inputs %s, %d graph nodes.\n\n", r.Model.Path, r.Model.Bytes, r.Model.SHA256, strings.Join(ins, ", "), r.Model.Nodes)
	if m := r.Memory; m != nil {
		p("%s\n\n", m.Line())
	}
	p("## What each step bought\n\n")
	p("Each row's figures come from one measurement, in which the original ran interleaved with the stage (shuffled rounds, one process); speedup = original p50 / p50 of that row.\n\n")
	p("| stage | status | precision | threads | p50 ms | p95 ms | original p50 ms | speedup [95%% CI] | max abs err / cosine | measurement | graph nodes | node changes |\n")
	p("|---|---|---|---:|---:|---:|---:|---|---|---|---:|---|\n")
	for _, s := range r.Stages {
		meas, nodes := "-", "-"
		if s.Measurement != nil {
			meas = *s.Measurement
		}
		if s.Nodes != nil {
			nodes = fmt.Sprint(*s.Nodes)
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Name, s.Status, s.Precision, threadsCell(s.Threads),
			msp(s.P50Ms), msp(s.P95Ms), msp(s.BaselineP50Ms), speed(s), errCell(s), meas, nodes, deltaString(s.NodeDelta))
	}
	p("\n")
	if n := r.threadsNote(); n != "" {
		p("Note: %s\n\n", n)
	}
	for _, s := range r.Stages {
		if s.Reason != "" {
			p("- **%s**: %s\n", s.Name, s.Reason)
		}
	}
	if len(r.Decisions) > 0 {
		p("\n## Decisions\n\n")
		for _, d := range r.Decisions {
			p("- %s\n", d)
		}
	}
	if v := r.Validation; v != nil {
		against := "the FP32 original"
		if r.Model.Precision != "" && r.Model.Precision != "fp32" {
			against = "the original (" + r.Model.Precision + ")"
		}
		p("\n## Validation against %s\n\n", against)
		p("Checked: %s (%s), %s%s: **%s**\n\n", v.Checked, v.CheckedPrecision, v.samplesData(), synth(v.Synthetic), passWord(v.Passed))
		p("| metric | value |\n|---|---:|\n")
		for _, row := range metricRows(v.Metrics) {
			p("| %s | %s |\n", row[0], row[1])
		}
		for _, n := range v.Notes {
			p("\n- note: %s", n)
		}
		for _, f := range v.Failures {
			p("\n- failed: %s", f)
		}
		p("\n")
		r.writeFallback(p)
	}
	if b := r.Bench; b != nil {
		p("\n## Final benchmark\n\n")
		p("%s each, original and %s (%s) interleaved, %s.\n\n", Plural(b.Runs, "run"), b.Optimized, b.Precision, Plural(b.Threads, "intra-op thread"))
		p("| model | p50 ms | p90 ms | p95 ms | p99 ms |\n|---|---:|---:|---:|---:|\n")
		p("| original | %s | %s | %s | %s |\n", ms(b.OriginalP50), msOrBlank(b.OriginalP90), ms(b.OriginalP95), msOrBlank(b.OriginalP99))
		p("| optimized | %s | %s | %s | %s |\n\n", ms(b.OptimizedP50), ms(b.OptimizedP90), ms(b.OptimizedP95), ms(b.OptimizedP99))
		// One figure for the speedup: the verdict carries the ratio of the printed p50s.
		p("Speedup: %s; throughput %.1f inferences/s from one caller.\n", b.Verdict, b.Throughput)
		if f, ok := b.Floor(); ok && b.OptimizedP50 > 0 {
			in := b.Interruptions
			got := b.OptimizedP95 / b.OptimizedP50
			busier := ""
			if f.P95P50 > got {
				busier = " The machine was interrupted more while this was measured than during the runs."
			}
			p("\nThe machine's own tail: fixed work as long as the optimized p50 on %s gets p95/p50 %.2f from the machine's interruptions alone (the optimized model: %.2f). Its CPUs were interrupted %.0f times a second, %.1f%% of their time lost (measured for %s after the runs).%s\n",
				Plural(f.Threads, "thread"), f.P95P50, got, in.PerSecond, 100*in.LostFraction, in.Duration.Round(time.Millisecond), busier)
		}
	}
	if rf := r.Roofline; rf != nil {
		p("\n## Roofline\n\n%s.\n\n", rf.Summary())
		p("The peak is pkg/kernels' in-register %s loop on the CPUs in use, measured in this run; the count covers convolutions and matrix products.\n\n", rf.Precision)
		p("| op | work | share |\n|---|---:|---:|\n")
		ops := make([]string, 0, len(rf.ByOp))
		for op := range rf.ByOp {
			ops = append(ops, op)
		}
		sort.Slice(ops, func(i, j int) bool { return rf.ByOp[ops[i]] > rf.ByOp[ops[j]] })
		for _, op := range ops {
			p("| %s | %s | %.1f%% |\n", op, rf.Work(rf.ByOp[op]), 100*rf.ByOp[op]/max(rf.FLOPs, 1))
		}
	}
	if r.Plot != nil {
		p("\n![latency](%s)\n", *r.Plot)
	}
	r.writeSettings(p)
	r.writeRuntime(p)
	r.writeStepTimes(p)
	if len(r.Warnings) > 0 {
		p("\n## Warnings\n\n")
		for _, w := range r.Warnings {
			p("- %s\n", w)
		}
	}
	if len(r.NonFinite) > 0 {
		p("\nNaN or infinite figures (written as null in report.json): %s\n", strings.Join(r.NonFinite, ", "))
	}
	p("\n## Terms\n\n")
	for _, g := range glossary {
		p("- %s\n", g)
	}
	if r.Artifact != nil {
		p("\nArtifact: `%s`\n", *r.Artifact)
	} else {
		p("\nNo artifact was written.\n")
	}
	return nil
}

func (r *Report) writeSettings(p func(string, ...any)) {
	s := r.Settings
	p("\n## Runtime settings of the final benchmark\n\n| setting | value |\n|---|---|\n")
	p("| threads | %d |\n", s.Threads)
	opt := func(name string, v *string) {
		if v != nil {
			p("| %s | %s |\n", name, *v)
		}
	}
	if s.InteropThreads != nil {
		p("| interop_threads | %d |\n", *s.InteropThreads)
	}
	opt("cpus", s.CPUs)
	opt("openmp", s.OpenMP)
	opt("mode", s.Mode)
	opt("allocator", s.Allocator)
	if s.NUMANode != nil {
		p("| numa_node | %d |\n", *s.NUMANode)
	}
	opt("blas", s.BLAS)
	for _, e := range s.Env {
		p("| environment %s | %s |\n", e.Name, e.Value)
	}
	for _, a := range s.Applied {
		p("| applied | %s |\n", a)
	}
	if len(s.Notes) > 0 {
		p("\n")
	}
	for _, n := range s.Notes {
		p("- %s\n", n)
	}
}

func deltaString(d map[string]int) string {
	if len(d) == 0 {
		return ""
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		ai, aj := abs(d[keys[i]]), abs(d[keys[j]])
		if ai != aj {
			return ai > aj
		}
		return keys[i] < keys[j]
	})
	if len(keys) > 4 {
		keys = keys[:4]
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %+d", strings.TrimPrefix(k, "aten::"), d[k])
	}
	return strings.Join(parts, ", ")
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// nonNilRows is rows with empty lists, not nil, where the schema wants arrays.
func nonNilRows(rows []RuntimeCandidate) []RuntimeCandidate {
	if rows == nil {
		return []RuntimeCandidate{}
	}
	for i := range rows {
		if rows[i].Env == nil {
			rows[i].Env = []string{}
		}
	}
	return rows
}

// writeStepTimes is where optimize's wall time went, step by step.
func (r *Report) writeStepTimes(p func(string, ...any)) {
	if len(r.StepTimes) == 0 {
		return
	}
	budget := ""
	if r.BudgetMs != nil {
		budget = fmt.Sprintf(", budget %.0f s", *r.BudgetMs/1000)
	}
	p("\n## Where optimize's time went\n\n%.1f s in all (%s search%s).\n\n| step | wall s | share |\n|---|---:|---:|\n", r.WallMs/1000, r.Search, budget)
	for _, s := range r.StepTimes {
		p("| %s | %.1f | %.0f%% |\n", s.Name, s.WallMs/1000, 100*s.WallMs/max(r.WallMs, 1))
	}
}
