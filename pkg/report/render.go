package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the whole report.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func ms(v float64) string {
	if v == 0 {
		return "-"
	}
	if v < 1 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func speed(s Stage) string {
	if !s.Measured || s.Speedup == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx [%.2f, %.2f]", s.Speedup, s.SpeedupLo, s.SpeedupHi)
}

func errCell(s Stage) string {
	if s.Cosine == 0 && s.MaxAbsErr == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2g / %.5f", s.MaxAbsErr, s.Cosine)
}

// WriteTable writes the stage table for a terminal.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "stage\tstatus\tp50 ms\tp95 ms\tspeedup vs original [95% CI]\tmax err / cosine\twall ms")
	for _, s := range r.Stages {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.0f\n", s.Name, s.Status, ms(s.P50Ms), ms(s.P95Ms), speed(s), errCell(s), s.WallMs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if b := r.Bench; b != nil {
		fmt.Fprintf(w, "\nfinal: %s  p50 %.3f ms (original %.3f ms), p95 %.3f ms, %.2fx [%.2f, %.2f], %d runs interleaved, %d thread(s)\n",
			b.Verdict, b.OptimizedP50, b.OriginalP50, b.OptimizedP95, b.Speedup, b.SpeedupLo, b.SpeedupHi, b.Runs, b.Threads)
	}
	if rf := r.Roofline; rf != nil {
		fmt.Fprintf(w, "roofline: %s\n", rf.Summary())
	}
	if v := r.Validation; v != nil {
		fmt.Fprintf(w, "validation (%d samples%s): %s  %s\n", v.Samples, synth(v.Synthetic), passWord(v.Passed), metricLine(v.Metrics))
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if r.Artifact != "" {
		fmt.Fprintf(w, "artifact: %s\n", r.Artifact)
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

func metricLine(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.5g", k, m[k])
	}
	return strings.Join(parts, " ")
}

// WriteMarkdown writes the report for people: the stage table, the decisions, validation,
// the final benchmark and the machine.
func (r *Report) WriteMarkdown(w io.Writer) error {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# torchspeed report: %s\n\n", r.Model.Path)
	p("torchspeed %s, libtorch %s, %s, %.1f s\n\n", r.Torchspeed, r.Libtorch, r.Started.Format("2006-01-02 15:04:05 MST"), r.WallMs/1000)
	p("Model: `%s` (%d bytes, sha256 `%.16s…`), inputs %s, %d graph nodes.\n\n", r.Model.Path, r.Model.Bytes, r.Model.SHA256, strings.Join(r.Model.Inputs, ", "), r.Model.Nodes)
	p("## What each step bought\n\n")
	p("Latencies are medians and 95th percentiles of runs interleaved across all candidates in one process; speedups are ratios of medians with a 95%% bootstrap interval.\n\n")
	p("| stage | status | p50 ms | p95 ms | speedup vs original | max abs err / cosine | graph nodes | node changes | wall ms |\n")
	p("|---|---|---:|---:|---|---|---:|---|---:|\n")
	for _, s := range r.Stages {
		p("| %s | %s | %s | %s | %s | %s | %d | %s | %.0f |\n", s.Name, s.Status, ms(s.P50Ms), ms(s.P95Ms), speed(s), errCell(s), s.Nodes, deltaString(s.NodeDelta), s.WallMs)
	}
	p("\n")
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
		p("\n## Validation against the FP32 original\n\n")
		p("%d samples (%s)%s: **%s**\n\n", v.Samples, v.Data, synth(v.Synthetic), passWord(v.Passed))
		keys := make([]string, 0, len(v.Metrics))
		for k := range v.Metrics {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		p("| metric | value |\n|---|---:|\n")
		for _, k := range keys {
			p("| %s | %.6g |\n", k, v.Metrics[k])
		}
		for _, f := range v.Failures {
			p("\n- failed: %s", f)
		}
		p("\n")
	}
	if b := r.Bench; b != nil {
		p("\n## Final benchmark\n\n")
		p("%d runs each, original and optimized interleaved, %d intra-op thread(s).\n\n", b.Runs, b.Threads)
		p("| model | p50 ms | p90 ms | p95 ms | p99 ms |\n|---|---:|---:|---:|---:|\n")
		p("| original | %s | | %s | |\n", ms(b.OriginalP50), ms(b.OriginalP95))
		p("| optimized | %s | %s | %s | %s |\n\n", ms(b.OptimizedP50), ms(b.OptimizedP90), ms(b.OptimizedP95), ms(b.OptimizedP99))
		p("Speedup %.2fx (95%% CI %.2f to %.2f); %s; throughput %.1f inferences/s at batch 1.\n", b.Speedup, b.SpeedupLo, b.SpeedupHi, b.Verdict, b.Throughput)
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
			p("| %s | %s%s | %.1f%% |\n", op, si(rf.ByOp[op]), rf.unit(), 100*rf.ByOp[op]/max(rf.FLOPs, 1))
		}
	}
	if r.Plot != "" {
		p("\n![latency](%s)\n", r.Plot)
	}
	if len(r.Settings) > 0 {
		p("\n## Runtime settings\n\n| setting | value |\n|---|---|\n")
		keys := make([]string, 0, len(r.Settings))
		for k := range r.Settings {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p("| %s | %s |\n", k, r.Settings[k])
		}
	}
	if len(r.Warnings) > 0 {
		p("\n## Warnings\n\n")
		for _, w := range r.Warnings {
			p("- %s\n", w)
		}
	}
	p("\nArtifact: `%s`\n", r.Artifact)
	return nil
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
