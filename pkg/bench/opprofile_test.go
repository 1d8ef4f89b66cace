package bench

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"
	"time"
)

func opRun(total time.Duration, ops ...any) OpRun {
	r := OpRun{Total: total}
	for i := 0; i < len(ops); i += 2 {
		r.Ops = append(r.Ops, OpCall{Op: ops[i].(string), Time: ops[i+1].(time.Duration), Shapes: "[1,4]"})
	}
	return r
}

func TestSummarizeOps(t *testing.T) {
	us := time.Microsecond
	runs := []OpRun{
		opRun(100*us, "aten::conv2d", 40*us, "aten::relu", 5*us, "aten::conv2d", 30*us),
		opRun(120*us, "aten::conv2d", 50*us, "aten::relu", 7*us, "aten::conv2d", 34*us),
		opRun(90*us, "aten::conv2d", 38*us, "aten::relu", 4*us, "aten::conv2d", 29*us),
	}
	p, err := SummarizeOps("m", runs)
	if err != nil {
		t.Fatal(err)
	}
	if p.Runs != 3 || p.Varying || p.Total != 100*us {
		t.Fatalf("runs %d varying %v total %v: want 3, false, 100µs", p.Runs, p.Varying, p.Total)
	}
	// Per kind: the median of each forward's sum (70, 84, 67 µs for conv2d).
	if k := p.Kinds[0]; k.Op != "aten::conv2d" || k.Count != 2 || k.Time != 70*us || k.Share != 0.7 {
		t.Errorf("first kind %+v: want conv2d, 2 calls, 70µs, 0.7", k)
	}
	if k := p.Kinds[1]; k.Op != "aten::relu" || k.Count != 1 || k.Time != 5*us {
		t.Errorf("second kind %+v: want relu, 1 call, 5µs", k)
	}
	if got := p.KindCounts(); got["aten::conv2d"] != 2 || got["aten::relu"] != 1 || len(got) != 2 {
		t.Errorf("kind counts %v", got)
	}
	// Per node, in the order run: the second conv2d is its own node.
	if len(p.Nodes) != 3 || p.Nodes[2].Op != "aten::conv2d" || p.Nodes[2].Occurrence != 2 || p.Nodes[2].Time != 30*us || p.Nodes[2].Index != 3 {
		t.Errorf("nodes %+v", p.Nodes)
	}
	// Outside the ops: 25, 29, 19 µs.
	if p.Unattributed != 25*us {
		t.Errorf("unattributed %v, want 25µs", p.Unattributed)
	}
}

func TestSummarizeOpsVarying(t *testing.T) {
	us := time.Microsecond
	p, err := SummarizeOps("rnn", []OpRun{
		opRun(10*us, "aten::add", 2*us),
		opRun(20*us, "aten::add", 2*us, "aten::add", 4*us, "aten::mul", 1*us),
		opRun(30*us, "aten::add", 2*us, "aten::add", 6*us, "aten::mul", 1*us),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Varying {
		t.Error("different op sequences: want Varying")
	}
	// mul ran in 2 of 3 forwards: its per-forward time has a 0 for the first.
	for _, k := range p.Kinds {
		if k.Op == "aten::mul" && k.Time != 1*us {
			t.Errorf("mul %v, want 1µs (median of 0, 1, 1)", k.Time)
		}
		if k.Op == "aten::add" && (k.Count != 2 || k.Time != 6*us) {
			t.Errorf("add %+v: want 2 calls, 6µs (median of 2, 6, 8)", k)
		}
	}
	if n := p.Nodes[1]; n.Op != "aten::add" || n.Occurrence != 2 || n.Runs != 2 || n.Time != 5*us {
		t.Errorf("second add node %+v: want 2 runs, median 5µs", n)
	}
	if _, err := SummarizeOps("none", nil); err == nil {
		t.Error("no runs: want an error")
	}
}

func TestOpTablesAndCSV(t *testing.T) {
	us := time.Microsecond
	a, _ := SummarizeOps("orig.pt", []OpRun{opRun(100*us, "aten::conv2d", 80*us, "aten::relu", 10*us)})
	b, _ := SummarizeOps("orig.torchspeed.pt", []OpRun{opRun(50*us, "torchspeed::fast_conv", 40*us)})
	rep := &RunReport{Profiles: []*OpProfile{a, b}}
	var buf bytes.Buffer
	if err := writeOpTables(&buf, rep.Profiles); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"orig.pt", "orig.torchspeed.pt", "aten::conv2d", "torchspeed::fast_conv", "80.0%", "ops of orig.torchspeed.pt in the order they ran"} {
		if !strings.Contains(out, want) {
			t.Errorf("op table lacks %q:\n%s", want, out)
		}
	}
	// The kind only the artifact runs has "-" in the original's columns.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "torchspeed::fast_conv") && !strings.Contains(line, "-") {
			t.Errorf("row %q: want - for the original", line)
		}
	}
	buf.Reset()
	if err := rep.WriteOpsCSV(&buf); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || strings.Join(rows[0], ",") != strings.Join(OpCSVColumns, ",") || rows[1][2] != "aten::conv2d" || rows[1][6] != "0.080000" {
		t.Errorf("ops CSV %v", rows)
	}
}

func TestWriteCSV(t *testing.T) {
	samples := make([]time.Duration, 50)
	for i := range samples {
		samples[i] = time.Duration(1000+i) * time.Microsecond
	}
	s, err := Summarize(samples)
	if err != nil {
		t.Fatal(err)
	}
	rep := &RunReport{Results: []*Result{{Name: "m.pt", Stats: s, First: 3 * time.Millisecond}},
		Memory: &Memory{PeakRSSBytes: new(int64(4096)), Models: map[string]ModelSize{"m.pt": {FileBytes: 10, TensorBytes: 8}}}}
	rep.Environment.Threads = 2
	var buf bytes.Buffer
	if err := rep.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || len(rows[1]) != len(CSVColumns) {
		t.Fatalf("CSV %v", rows)
	}
	col := map[string]string{}
	for i, c := range CSVColumns {
		col[c] = rows[1][i]
	}
	// numpy.percentile(range(1000, 1050), 50) = 1024.5 µs.
	want := map[string]string{"model": "m.pt", "runs": "50", "p50_ms": "1.0245", "min_ms": "1.0000", "max_ms": "1.0490",
		"first_ms": "3.0000", "load_ms": "", "threads": "2", "file_bytes": "10", "tensor_bytes": "8", "peak_rss_bytes": "4096", "batch": "1"}
	for k, v := range want {
		if col[k] != v {
			t.Errorf("%s = %q, want %q", k, col[k], v)
		}
	}
	if col["p50_ci_lo_ms"] == "" || col["p50_ci_lo_ms"] > col["p50_ms"] {
		t.Errorf("p50 interval low %q against p50 %q", col["p50_ci_lo_ms"], col["p50_ms"])
	}
}
