package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/roofline"
)

// RunReport gathers everything one `torchspeed bench` invocation measured,
// with the environment it ran in. Any of the result fields may be nil.
type RunReport struct {
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
	Roofline []*roofline.Roofline `json:"roofline,omitempty"`
	// Interruptions is what the machine took from the CPUs in use, measured just before the
	// timed runs; its Floors include one at each latency result's p50 (AddResultFloors).
	Interruptions *cpu.Interruptions `json:"interruptions,omitempty"`
	// Profiles are the op profiles of the models (bench --profile), in the order given.
	Profiles []*OpProfile `json:"profiles,omitempty"`
	// Memory is the run's peak resident set and the models' sizes; nil when not measured.
	Memory *Memory `json:"memory,omitempty"`
}

// AddResultFloors adds to r.Interruptions the p95/p50 its gaps alone give fixed work as long
// as each latency result's p50 on threads threads (at most as many as CPUs were measured).
func (r *RunReport) AddResultFloors(threads int) {
	for _, res := range r.LatencyResults() {
		r.Interruptions.AddFloor(res.Stats.P50, threads)
	}
}

// busierNote explains a floor above the tail it is the floor of: the interruptions are measured
// after the runs, and the machine changes.
func busierNote(floor, got float64) string {
	if floor > got {
		return " (above the runs' own: the machine was interrupted more while this was measured than during the runs)"
	}
	return ""
}

// LatencyResults returns every per-target latency result, single or compared.
func (r *RunReport) LatencyResults() []*Result {
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
func (r *RunReport) WriteTable(w io.Writer) error {
	bw := bufio.NewWriter(w)
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	var warnings []string
	if rs := r.LatencyResults(); len(rs) > 0 {
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
		if in := r.Interruptions; in != nil {
			fmt.Fprintf(bw, "\nmachine: CPUs in use interrupted %.0f times a second, %.1f%% of their time lost (longest %s), measured for %s after the runs\n",
				in.PerSecond, 100*in.LostFraction, FormatDuration(in.Longest), FormatDuration(in.Duration))
			for _, res := range rs {
				if f, ok := in.FloorAt(res.Stats.P50); ok && res.Stats.P50 > 0 {
					got := float64(res.Stats.P95) / float64(res.Stats.P50)
					fmt.Fprintf(bw, "tail floor %s: p95/p50 %.2f measured; %.2f from the interruptions alone for fixed work of %s on %d thread(s)%s\n",
						res.Name, got, f.P95P50, FormatDuration(f.Length), f.Threads, busierNote(f.P95P50, got))
				}
			}
		}
	}
	if c := r.Comparison; c != nil {
		fmt.Fprintf(bw, "\n%d %s rounds\n", c.Rounds, c.Order)
		fmt.Fprintln(tw, "other / base\tratio of medians [95% CI]\tU test\tverdict")
		for _, p := range c.Pairs {
			fmt.Fprintf(tw, "%s / %s\t%.3f [%.3f, %.3f]\tp=%s (%s)\t%s\n", p.Other, p.Base, p.Ratio, p.RatioLo, p.RatioHi,
				formatP(p.UTest.P), p.UTest.Method, consistent(p).Verdict)
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
	if m := r.Memory; m != nil {
		fmt.Fprintln(bw)
		fmt.Fprintln(bw, m.line(r.LatencyResults()))
	}
	if len(r.Profiles) > 0 {
		if err := bw.Flush(); err != nil {
			return err
		}
		if err := writeOpTables(w, r.Profiles); err != nil {
			return err
		}
	}
	for _, m := range warnings {
		fmt.Fprintln(bw, "warning:", m)
	}
	return bw.Flush()
}

// WriteJSON writes the report as indented JSON (durations in nanoseconds,
// keys ending in _ns).
func (r *RunReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// SchemaVersion is bench.json's schema_version (docs/schema/bench.schema.json): raised on any
// change an older reader would misread.
const SchemaVersion = 1

// reportJSON is bench.json's shape: every latency result in "models", whether one model was
// measured or several were compared (the comparison then holds the pairs), settings with
// snake_case keys and typed values, null for what was not measured.
type reportJSON struct {
	SchemaVersion int                  `json:"schema_version"`
	Environment   Environment          `json:"environment"`
	Settings      map[string]any       `json:"settings"`
	Models        []json.RawMessage    `json:"models"`
	Comparison    *comparisonJSON      `json:"comparison"`
	Throughput    *ThroughputResult    `json:"throughput"`
	Sweep         *SweepResult         `json:"sweep"`
	Roofline      []*roofline.Roofline `json:"roofline"`
	Interruptions *cpu.Interruptions   `json:"interruptions"`
	Profiles      []*OpProfile         `json:"profiles"`
	Memory        *Memory              `json:"memory"`
}

type comparisonJSON struct {
	Order  string `json:"order"`
	Seed   uint64 `json:"seed"`
	Rounds int    `json:"rounds"`
	Pairs  []Pair `json:"pairs"`
}

// MarshalJSON writes bench.json (see reportJSON).
func (r RunReport) MarshalJSON() ([]byte, error) {
	out := reportJSON{SchemaVersion: SchemaVersion, Environment: r.Environment, Settings: settingsJSON(r.Settings),
		Models: []json.RawMessage{}, Throughput: r.Throughput, Sweep: r.Sweep, Roofline: r.Roofline, Interruptions: r.Interruptions,
		Profiles: r.Profiles, Memory: r.Memory}
	if out.Roofline == nil {
		out.Roofline = []*roofline.Roofline{}
	}
	if c := r.Comparison; c != nil {
		out.Comparison = &comparisonJSON{Order: c.Order, Seed: c.Seed, Rounds: c.Rounds}
		for _, p := range c.Pairs {
			out.Comparison.Pairs = append(out.Comparison.Pairs, consistent(p))
		}
	}
	for _, res := range r.LatencyResults() {
		b, err := resultJSON(res)
		if err != nil {
			return nil, err
		}
		out.Models = append(out.Models, b)
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads bench.json back into a RunReport (the inverse of MarshalJSON).
func (r *RunReport) UnmarshalJSON(b []byte) error {
	var in struct {
		reportJSON
		Settings json.RawMessage `json:"settings"`
		Models   []*Result       `json:"models"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*r = RunReport{Environment: in.Environment, Throughput: in.Throughput, Sweep: in.Sweep, Roofline: in.Roofline, Interruptions: in.Interruptions,
		Profiles: in.Profiles, Memory: in.Memory}
	if len(in.Settings) > 0 && string(in.Settings) != "null" {
		dec := json.NewDecoder(bytes.NewReader(in.Settings))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return fmt.Errorf("bench.json settings: %w", err)
		}
		r.Settings = settingsFromJSON(m)
	}
	if c := in.Comparison; c != nil {
		r.Comparison = &Comparison{Order: c.Order, Seed: c.Seed, Rounds: c.Rounds, Pairs: c.Pairs, Results: in.Models}
	} else {
		r.Results = in.Models
	}
	return nil
}

// consistent makes a pair's verdict agree with its interval: a U test below alpha next to a
// ratio interval that includes 1 is not called a difference (the digits run printed
// "1.10x [0.68, 1.75]" beside "9.5% faster (p=0.015)").
func consistent(p Pair) Pair {
	if p.Significant && p.RatioLo <= 1 && p.RatioHi >= 1 {
		p.Significant = false
		p.Verdict = fmt.Sprintf("no clear difference: the ratio's 95%% interval [%.3f, %.3f] includes 1 (U test p=%s)", p.RatioLo, p.RatioHi, formatP(p.UTest.P))
	}
	return p
}

// resultJSON writes a result with null for figures that were not measured: the load time when
// the caller did not time it, the median's interval when there were too few runs for one.
func resultJSON(res *Result) (json.RawMessage, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	null := json.RawMessage("null")
	if res.Load == 0 {
		m["load_ns"] = null
	}
	if !res.Stats.MedianCIOK {
		var st map[string]json.RawMessage
		if err := json.Unmarshal(m["stats"], &st); err != nil {
			return nil, err
		}
		st["median_ci_lo_ns"], st["median_ci_hi_ns"], st["median_ci_coverage"] = null, null, null
		if m["stats"], err = json.Marshal(st); err != nil {
			return nil, err
		}
	}
	return json.Marshal(m)
}

// dashedKeys are the settings keys whose JSON name (snake_case) differs by more than "-" -> "_".
var dashedKeys = map[string]string{"input_shape": "input-shape"}

// settingsJSON types the settings: snake_case keys; integers, decimals and booleans as JSON
// values; "env NAME" keys as an env list; "applied N" as a list; "instance N cpus" and
// "instance N numa_node" as a per_instance list.
func settingsJSON(s map[string]string) map[string]any {
	out := map[string]any{}
	var env []map[string]string
	applied := map[int]string{}
	per := map[int]map[string]any{}
	for k, v := range s {
		if name, ok := strings.CutPrefix(k, "env "); ok {
			env = append(env, map[string]string{"name": name, "value": v})
			continue
		}
		if n, ok := strings.CutPrefix(k, "applied "); ok {
			if i, err := strconv.Atoi(n); err == nil {
				applied[i] = v
				continue
			}
		}
		var i int
		var field string
		if _, err := fmt.Sscanf(k, "instance %d %s", &i, &field); err == nil && (field == "cpus" || field == "numa_node") {
			if per[i] == nil {
				per[i] = map[string]any{"instance": i}
			}
			per[i][field] = typed(v)
			continue
		}
		out[strings.NewReplacer("-", "_", " ", "_").Replace(strings.ToLower(k))] = typed(v)
	}
	if len(env) > 0 {
		sort.Slice(env, func(a, b int) bool { return env[a]["name"] < env[b]["name"] })
		out["env"] = env
	}
	if len(applied) > 0 {
		list := make([]string, 0, len(applied))
		for _, i := range sortedInts(applied) {
			list = append(list, applied[i])
		}
		out["applied"] = list
	}
	if len(per) > 0 {
		list := make([]map[string]any, 0, len(per))
		for _, i := range sortedInts(per) {
			list = append(list, per[i])
		}
		out["per_instance"] = list
	}
	return out
}

func sortedInts[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

// typed turns a setting's text into a JSON number or boolean when it is exactly one (so it
// reads back as the same text), else leaves it a string.
func typed(v string) any {
	if i, err := strconv.ParseInt(v, 10, 64); err == nil && strconv.FormatInt(i, 10) == v {
		return json.Number(v)
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && strconv.FormatFloat(f, 'g', -1, 64) == v && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return json.Number(v)
	}
	if v == "true" || v == "false" {
		return v == "true"
	}
	return v
}

func settingsFromJSON(m map[string]any) map[string]string {
	out := map[string]string{}
	text := func(v any) string {
		switch x := v.(type) {
		case json.Number:
			return x.String()
		case bool:
			return strconv.FormatBool(x)
		case string:
			return x
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	for k, v := range m {
		switch k {
		case "env":
			for _, e := range asList(v) {
				out["env "+text(e["name"])] = text(e["value"])
			}
		case "applied":
			if l, ok := v.([]any); ok {
				for i, a := range l {
					out[fmt.Sprintf("applied %d", i+1)] = text(a)
				}
			}
		case "per_instance":
			for _, e := range asList(v) {
				for f, fv := range e {
					if f != "instance" {
						out[fmt.Sprintf("instance %s %s", text(e["instance"]), f)] = text(fv)
					}
				}
			}
		default:
			if orig, ok := dashedKeys[k]; ok {
				k = orig
			}
			out[k] = text(v)
		}
	}
	return out
}

func asList(v any) []map[string]any {
	l, _ := v.([]any)
	var out []map[string]any
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
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
func (r *RunReport) WriteBenchfmt(w io.Writer) error {
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
	for _, res := range r.LatencyResults() {
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

// CheckWritableDir is safefile.CheckWritableDir: it creates dir if needed and proves a file can
// be created in it, so that a long benchmark does not fail only when it saves.
func CheckWritableDir(dir string) error { return safefile.CheckWritableDir(dir) }

// WriteFileAtomic writes path through internal/safefile: a temporary file created with O_EXCL
// in the same folder, synced, given the umask's ordinary-file mode (as every file torchspeed
// writes), and renamed over path, so readers never see half a report and a failure leaves the
// old file intact.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	return safefile.Write(path, write)
}

// Empty reports whether the report holds no measurement.
func (r *RunReport) Empty() bool {
	return len(r.LatencyResults()) == 0 && r.Throughput == nil && r.Sweep == nil
}
