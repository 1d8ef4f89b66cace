package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/report"
)

// Report gathers everything one `torchspeed bench` invocation measured,
// with the environment it ran in. Any of the result fields may be nil.
type Report struct {
	Environment Environment `json:"environment"`
	// Settings records the run's inputs (input shapes, dtype, runs, ...)
	// as the user gave them.
	Settings map[string]string `json:"settings,omitempty"`
	// Results holds single-target runs.
	Results    []*Result         `json:"results,omitempty"`
	Comparison *Comparison       `json:"comparison,omitempty"`
	Throughput *ThroughputResult `json:"throughput,omitempty"`
	Sweep      *SweepResult      `json:"sweep,omitempty"`
	// Roofline places each latency result against the measured compute peak (pkg/roofline).
	Roofline []*report.Roofline `json:"roofline,omitempty"`
}

// latencyResults returns every per-target result, single or compared.
func (r *Report) latencyResults() []*Result {
	if r.Comparison != nil {
		return r.Comparison.Results
	}
	return r.Results
}

// FormatDuration prints d with three significant digits in the largest unit
// that keeps it >= 1 ("12.3ms", "845µs", "1.20s").
func FormatDuration(d time.Duration) string {
	v := float64(d)
	if v != 0 {
		// Round to three significant digits first, so that 9.9996ms
		// prints as 10.0ms and 999.7µs as 1.00ms.
		scale := math.Pow(10, math.Floor(math.Log10(math.Abs(v)))-2)
		v = math.Round(v/scale) * scale
	}
	unit, div := "ns", 1.0
	switch {
	case math.Abs(v) >= 1e9:
		unit, div = "s", 1e9
	case math.Abs(v) >= 1e6:
		unit, div = "ms", 1e6
	case math.Abs(v) >= 1e3:
		unit, div = "µs", 1e3
	}
	x := v / div
	switch {
	case unit == "ns":
		return fmt.Sprintf("%.0fns", x)
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f%s", x, unit)
	case math.Abs(x) >= 10:
		return fmt.Sprintf("%.1f%s", x, unit)
	}
	return fmt.Sprintf("%.2f%s", x, unit)
}

func formatCI(s Summary) string {
	if !s.MedianCIOK {
		return "[n/a]"
	}
	return fmt.Sprintf("[%s, %s] ±%.1f%%", FormatDuration(s.MedianLo), FormatDuration(s.MedianHi), s.CIHalfWidthFraction()*100)
}

// WriteTable prints the report for a terminal: one row per target with
// its percentiles, the phases, each comparison's verdict, throughput and
// sweep tables, and every warning.
func (r *Report) WriteTable(w io.Writer) error {
	bw := bufio.NewWriter(w)
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	var warnings []string
	if rs := r.latencyResults(); len(rs) > 0 {
		fmt.Fprintln(tw, "model\truns\tp50 [95% CI]\tp90\tp95\tp99\tp99.9\tmax\tmean\tstddev\tinf/s")
		for _, res := range rs {
			s := res.Stats
			fmt.Fprintf(tw, "%s\t%d\t%s %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\n",
				res.Name, s.N, FormatDuration(s.P50), formatCI(s), FormatDuration(s.P90), FormatDuration(s.P95),
				FormatDuration(s.P99), FormatDuration(s.P999), FormatDuration(s.Max), FormatDuration(s.Mean),
				FormatDuration(s.Stddev), s.Throughput)
			for _, m := range s.Warnings {
				warnings = append(warnings, res.Name+": "+m)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(bw)
		fmt.Fprintln(tw, "model\tload\tfirst inference\twarm-up")
		for _, res := range rs {
			load := "-"
			if res.Load > 0 {
				load = FormatDuration(res.Load)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d runs in %s\n", res.Name, load, FormatDuration(res.First),
				res.WarmupRuns, FormatDuration(res.WarmupTime))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if c := r.Comparison; c != nil {
		fmt.Fprintf(bw, "\n%d %s rounds\n", c.Rounds, c.Order)
		fmt.Fprintln(tw, "other / base\tratio of medians [95% CI]\tU test\tverdict")
		for _, p := range c.Pairs {
			fmt.Fprintf(tw, "%s / %s\t%.3f [%.3f, %.3f]\tp=%s (%s)\t%s\n", p.Other, p.Base, p.Ratio, p.RatioLo, p.RatioHi,
				formatP(p.UTest.P), p.UTest.Method, p.Verdict)
			for _, m := range p.Warnings {
				warnings = append(warnings, p.Other+" vs "+p.Base+": "+m)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if t := r.Throughput; t != nil {
		fmt.Fprintf(bw, "\nthroughput %s: %d streams, batch %d: %.1f inferences/s, %.1f items/s over %s\n",
			t.Name, t.Streams, t.Batch, t.PerSecond, t.ItemsPerSecond, FormatDuration(t.Elapsed))
		fmt.Fprintln(tw, "stream\truns\tp50 [95% CI]\tp95\tp99\tmax")
		for _, s := range t.PerStream {
			fmt.Fprintf(tw, "%d\t%d\t%s %s\t%s\t%s\t%s\n", s.Stream, s.Runs, FormatDuration(s.Stats.P50), formatCI(s.Stats),
				FormatDuration(s.Stats.P95), FormatDuration(s.Stats.P99), FormatDuration(s.Stats.Max))
		}
		l := t.Latency
		fmt.Fprintf(tw, "all\t%d\t%s %s\t%s\t%s\t%s\n", l.N, FormatDuration(l.P50), formatCI(l),
			FormatDuration(l.P95), FormatDuration(l.P99), FormatDuration(l.Max))
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, m := range l.Warnings {
			warnings = append(warnings, t.Name+": "+m)
		}
	}
	if sw := r.Sweep; sw != nil {
		fmt.Fprintln(bw)
		fmt.Fprintln(tw, "batch\tthreads\tstreams\tp50\tp95\tp99\tinf/s\titems/s\tpareto")
		for _, row := range sw.Rows {
			l := row.Result.Latency
			mark := ""
			if row.Pareto {
				mark = "*"
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%.1f\t%.1f\t%s\n", row.Point.Batch, row.Point.Threads, row.Point.Streams,
				FormatDuration(l.P50), FormatDuration(l.P95), FormatDuration(l.P99), row.Result.PerSecond,
				row.Result.ItemsPerSecond, mark)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, why := range sw.Recommendation.Why {
			fmt.Fprintln(bw, "recommended:", why)
		}
	}
	if len(r.Roofline) > 0 {
		fmt.Fprintln(bw)
		for _, rf := range r.Roofline {
			fmt.Fprintf(bw, "roofline %s: %s\n", rf.Model, rf.Summary())
		}
	}
	for _, m := range warnings {
		fmt.Fprintln(bw, "warning:", m)
	}
	return bw.Flush()
}

// WriteJSON writes the report as indented JSON (durations in nanoseconds,
// keys ending in _ns).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// BenchName makes s usable as one part of a Go benchmark name: no spaces
// (they end the name), no '/' (sub-benchmark separator), no '=' (key=value
// separator).
func BenchName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == '/' || r == '=' {
			return '_'
		}
		return r
	}, s)
	if s == "" {
		return "_"
	}
	return s
}

// configKey makes s a valid configuration key: lower case, no spaces.
func configKey(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == ':' {
			return '-'
		}
		return unicode.ToLower(r)
	}, s)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// WriteBenchfmt writes the report in the Go benchmark format
// (golang.org/design/14313-benchmark-format) so that `benchstat old new`
// compares two runs, or `benchstat -col /model file` two models in one run.
// Configuration lines carry the environment; every timed latency is one
// result line with one iteration, so benchstat sees the full distribution.
// The name's -N suffix is the intra-op thread count.
func (r *Report) WriteBenchfmt(w io.Writer) error {
	bw := bufio.NewWriter(w)
	e := r.Environment
	cfg := [][2]string{
		{"goos", e.GOOS}, {"goarch", e.GOARCH}, {"cpu", e.CPUModel},
		{"pkg", "github.com/torchspeed/torchspeed/bench"},
		{"torchspeed", e.TorchspeedVersion}, {"libtorch", e.LibtorchVersion},
		{"qengine", e.QuantizedEngine}, {"openmp", e.OpenMPRuntime}, {"allocator", e.Allocator}, {"blas", e.BLAS},
		{"numa-node", e.NUMANode}, {"cgroup-cpu", e.CgroupCPULimit},
	}
	if len(e.ISA) > 0 {
		cfg = append(cfg, [2]string{"isa", strings.Join(e.ISA, ",")})
	}
	if e.LogicalCPUs > 0 {
		cfg = append(cfg, [2]string{"cpus", fmt.Sprint(e.LogicalCPUs)})
	}
	if !e.Date.IsZero() {
		cfg = append(cfg, [2]string{"date", e.Date.Format(time.RFC3339)})
	}
	for _, k := range sortedKeys(e.OpenMPEnv) {
		cfg = append(cfg, [2]string{"env-" + k, e.OpenMPEnv[k]})
	}
	for _, k := range sortedKeys(e.ModelHashes) {
		cfg = append(cfg, [2]string{"sha256-" + k, e.ModelHashes[k]})
	}
	for _, k := range sortedKeys(r.Settings) {
		cfg = append(cfg, [2]string{k, r.Settings[k]})
	}
	for _, kv := range cfg {
		if kv[1] == "" {
			continue
		}
		fmt.Fprintf(bw, "%s: %s\n", configKey(kv[0]), oneLine(kv[1]))
	}
	procs := e.Threads
	if procs <= 0 {
		procs = e.GOMAXPROCS
	}
	suffix := ""
	if procs > 0 {
		suffix = fmt.Sprintf("-%d", procs)
	}
	fmt.Fprintln(bw)
	for _, res := range r.latencyResults() {
		name := "BenchmarkInference/model=" + BenchName(res.Name)
		if res.Batch > 1 {
			name += fmt.Sprintf("/batch=%d", res.Batch)
		}
		for _, d := range res.Samples {
			fmt.Fprintf(bw, "%s%s\t1\t%d ns/op\n", name, suffix, int64(d))
		}
	}
	writeThroughput := func(t *ThroughputResult, threads int) {
		name := "BenchmarkThroughput/model=" + BenchName(t.Name) + fmt.Sprintf("/batch=%d/streams=%d", t.Batch, t.Streams)
		sfx := suffix
		if threads > 0 {
			sfx = fmt.Sprintf("-%d", threads)
		}
		// One line per stream: each stream's mean latency and its share of
		// the throughput are one sample of the configuration.
		for _, s := range t.PerStream {
			perSec := 0.0
			if t.Elapsed > 0 {
				perSec = float64(s.Runs) / t.Elapsed.Seconds() * float64(max(t.Batch, 1))
			}
			fmt.Fprintf(bw, "%s%s\t%d\t%d ns/op\t%.2f items/s\n", name, sfx, s.Runs, int64(s.Stats.Mean), perSec)
		}
	}
	if r.Throughput != nil {
		writeThroughput(r.Throughput, r.Throughput.Threads)
	}
	if r.Sweep != nil {
		for _, row := range r.Sweep.Rows {
			writeThroughput(row.Result, row.Point.Threads)
		}
	}
	return bw.Flush()
}

// CheckWritableDir creates dir if needed and proves a file can be created
// in it, so that a long benchmark does not fail only when it saves.
func CheckWritableDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output folder %q cannot be created: %w; choose a writable folder", dir, err)
	}
	f, err := os.CreateTemp(dir, ".torchspeed-check-*")
	if err != nil {
		return fmt.Errorf("output folder %q is not writable: %w; choose a writable folder", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("output folder %q: remove probe file: %w", dir, err)
	}
	return nil
}

// WriteFileAtomic writes path through internal/safefile: a temporary file created with O_EXCL
// in the same folder, synced, given the umask's ordinary-file mode (as every file torchspeed
// writes), and renamed over path, so readers never see half a report and a failure leaves the
// old file intact.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	return safefile.Write(path, write)
}

// Empty reports whether the report holds no measurement.
func (r *Report) Empty() bool {
	return len(r.latencyResults()) == 0 && r.Throughput == nil && r.Sweep == nil
}
