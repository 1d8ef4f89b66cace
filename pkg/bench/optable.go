package bench

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"
)

// writeOpTables prints the profiles side by side by op kind (one column group per model), then
// each model's nodes in the order they ran, as OpenVINO benchmark_app's -pc prints layers.
func writeOpTables(w io.Writer, ps []*OpProfile) error {
	if len(ps) == 0 {
		return nil
	}
	bw := bufio.NewWriter(w)
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	fmt.Fprintf(bw, "\nop profile: medians of %s profiled forwards per model; the callbacks slow every op, so compare ops, not these totals with the timed runs\n",
		profileRuns(ps))
	head, sub := "op kind", ""
	for _, p := range ps {
		head += "\t" + p.Model + "\t\t"
		sub += "\tcalls\ttime\tshare"
	}
	fmt.Fprintln(tw, head)
	fmt.Fprintln(tw, sub)
	for _, op := range kindUnion(ps) {
		row := op
		for _, p := range ps {
			k, ok := p.kind(op)
			if !ok {
				row += "\t-\t-\t-"
				continue
			}
			row += fmt.Sprintf("\t%d\t%s\t%.1f%%", k.Count, FormatDuration(k.Time), 100*k.Share)
		}
		fmt.Fprintln(tw, row)
	}
	other, total := "(not in an op)", "forward"
	for _, p := range ps {
		other += fmt.Sprintf("\t\t%s\t%.1f%%", FormatDuration(p.Unattributed), 100*share(p.Unattributed, p.Total))
		total += fmt.Sprintf("\t%d\t%s\t100%%", len(p.Nodes), FormatDuration(p.Total))
	}
	fmt.Fprintln(tw, other)
	fmt.Fprintln(tw, total)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range ps {
		fmt.Fprintf(bw, "\nops of %s in the order they ran:\n", p.Model)
		fmt.Fprintln(tw, "#\top\tmodule\tinput shapes\ttime\tshare")
		for _, n := range p.Nodes {
			module := n.Module
			if module == "" {
				module = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.1f%%\n", n.Index, n.Op, module, n.Shapes, FormatDuration(n.Time), 100*n.Share)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if p.Varying {
			fmt.Fprintf(bw, "note: %s ran different op sequences from one forward to the next (control flow): a row is the k-th call of its op, timed over the forwards that reached it\n", p.Model)
		}
	}
	return bw.Flush()
}

func share(d, total time.Duration) float64 {
	if total <= 0 {
		return 0
	}
	return float64(d) / float64(total)
}

func profileRuns(ps []*OpProfile) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += "/"
		}
		s += strconv.Itoa(p.Runs)
	}
	return s
}

func (p *OpProfile) kind(op string) (OpKind, bool) {
	for _, k := range p.Kinds {
		if k.Op == op {
			return k, true
		}
	}
	return OpKind{}, false
}

// kindUnion is every op kind of the profiles, the one with the most time in any of them first.
func kindUnion(ps []*OpProfile) []string {
	most := map[string]int64{}
	for _, p := range ps {
		for _, k := range p.Kinds {
			most[k.Op] = max(most[k.Op], int64(k.Time))
		}
	}
	ops := make([]string, 0, len(most))
	for op := range most {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		if most[ops[i]] != most[ops[j]] {
			return most[ops[i]] > most[ops[j]]
		}
		return ops[i] < ops[j]
	})
	return ops
}

// CSVColumns are the columns of WriteCSV, in order (docs/bench.md describes them).
var CSVColumns = []string{"model", "runs", "p50_ms", "p50_ci_lo_ms", "p50_ci_hi_ms", "p90_ms", "p95_ms", "p99_ms",
	"p999_ms", "min_ms", "max_ms", "mean_ms", "stddev_ms", "throughput_per_s", "first_ms", "load_ms", "batch",
	"threads", "file_bytes", "tensor_bytes", "peak_rss_bytes"}

// OpCSVColumns are the columns of WriteOpsCSV: one row per node of every profiled model.
var OpCSVColumns = []string{"model", "index", "op", "occurrence", "module", "input_shapes", "p50_ms", "share", "runs"}

// WriteCSV writes one row per latency result (for spreadsheets and scripts, as benchmark_app's
// report does): milliseconds to 0.1 µs, an empty cell for what was not
// measured.
func (r *RunReport) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVColumns); err != nil {
		return err
	}
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 4, 64) }
	for _, res := range r.LatencyResults() {
		s := res.Stats
		lo, hi := "", ""
		if s.MedianCIOK {
			lo, hi = ms(s.MedianLo), ms(s.MedianHi)
		}
		load := ""
		if res.Load > 0 {
			load = ms(res.Load)
		}
		batch := max(res.Batch, 1)
		file, tensors, rss := "", "", ""
		if m := r.Memory; m != nil {
			if sz, ok := m.Models[res.Name]; ok {
				file, tensors = strconv.FormatInt(sz.FileBytes, 10), strconv.FormatInt(sz.TensorBytes, 10)
			}
			if m.PeakRSSBytes != nil {
				rss = strconv.FormatInt(*m.PeakRSSBytes, 10)
			}
		}
		row := []string{res.Name, strconv.Itoa(s.N), ms(s.P50), lo, hi, ms(s.P90), ms(s.P95), ms(s.P99), ms(s.P999),
			ms(s.Min), ms(s.Max), ms(s.Mean), ms(s.Stddev), strconv.FormatFloat(s.Throughput, 'f', 2, 64),
			ms(res.First), load, strconv.Itoa(batch), strconv.Itoa(r.Environment.Threads), file, tensors, rss}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteOpsCSV writes the op profiles, one row per node.
func (r *RunReport) WriteOpsCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(OpCSVColumns); err != nil {
		return err
	}
	for _, p := range r.Profiles {
		for _, n := range p.Nodes {
			row := []string{p.Model, strconv.Itoa(n.Index), n.Op, strconv.Itoa(n.Occurrence), n.Module, n.Shapes,
				strconv.FormatFloat(float64(n.Time)/1e6, 'f', 6, 64), strconv.FormatFloat(n.Share, 'f', 4, 64),
				strconv.Itoa(n.Runs)}
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
