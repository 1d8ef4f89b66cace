package plot

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"

	"github.com/torchspeed/torchspeed/pkg/bench"
)

func checkFiles(t *testing.T, paths []string, dir, base string) {
	t.Helper()
	if len(paths) != 2 || paths[0] != filepath.Join(dir, base+".png") || paths[1] != filepath.Join(dir, base+".svg") {
		t.Fatalf("paths = %v", paths)
	}
	f, err := os.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", paths[0], err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 200 {
		t.Errorf("PNG is %v, too small", b)
	}
	svg, err := os.ReadFile(paths[1])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(svg, []byte("<svg")) {
		t.Errorf("%s is not SVG", paths[1])
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file left: %s", e.Name())
		}
	}
}

func TestLatency(t *testing.T) {
	clk := &bench.SimClock{}
	var rs []*bench.Result
	for i, m := range []time.Duration{10 * time.Millisecond, 6 * time.Millisecond} {
		r, err := bench.Run(bench.NewSyntheticTarget([]string{"fp32", "int8"}[i], clk,
			bench.LatencyModel{Median: m, Sigma: 0.1, SpikeProb: 0.02, Spike: 4 * time.Millisecond}, uint64(i)),
			bench.Options{Runs: 200, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	dir := t.TempDir()
	paths, err := Latency(SeriesFromResults(rs), "resnet18, 2 threads", dir, "latency")
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, paths, dir, "latency")
	svg, _ := os.ReadFile(paths[1])
	for _, name := range []string{"fp32", "int8", "resnet18, 2 threads", "p50 (median)", "p95", "p99"} {
		if !bytes.Contains(svg, []byte(name)) {
			t.Errorf("SVG lacks label %q", name)
		}
	}
}

func TestSweepPlot(t *testing.T) {
	mk := func(p bench.Point, p50 time.Duration, ips float64, pareto bool) bench.SweepRow {
		return bench.SweepRow{Point: p, Pareto: pareto, Result: &bench.ThroughputResult{
			Latency: bench.Summary{P50: p50}, ItemsPerSecond: ips}}
	}
	s := &bench.SweepResult{Rows: []bench.SweepRow{
		mk(bench.Point{Batch: 1, Threads: 1, Streams: 1}, time.Millisecond, 1000, true),
		mk(bench.Point{Batch: 1, Threads: 1, Streams: 2}, 2*time.Millisecond, 900, false),
		mk(bench.Point{Batch: 4, Threads: 1, Streams: 1}, 3*time.Millisecond, 1300, true),
	}}
	dir := t.TempDir()
	paths, err := Sweep(s, "sweep", dir, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, paths, dir, "sweep")
	svg, _ := os.ReadFile(paths[1])
	if !bytes.Contains(svg, []byte("Pareto front")) || !bytes.Contains(svg, []byte("batch 4, 1 thread, 1 stream")) {
		t.Error("SVG lacks the front legend or point labels")
	}
}

func TestThroughputSeries(t *testing.T) {
	tr := &bench.ThroughputResult{PerStream: []bench.StreamResult{{Stream: 0, Samples: []time.Duration{1, 2}}, {Stream: 1, Samples: []time.Duration{3}}}}
	s := SeriesFromThroughput(tr, "stream")
	if len(s) != 2 || s[1].Name != "stream 1" || len(s[0].Samples) != 2 {
		t.Errorf("series %+v", s)
	}
}

func TestPlotBadInput(t *testing.T) {
	dir := t.TempDir()
	if _, err := Latency(nil, "", dir, "x"); err == nil {
		t.Error("empty series accepted")
	}
	if _, err := Latency([]Series{{Name: "m"}}, "", dir, "x"); err == nil || !strings.Contains(err.Error(), `"m" has no samples`) {
		t.Errorf("empty samples: %v", err)
	}
	if _, err := Sweep(nil, "", dir, "x"); err == nil {
		t.Error("nil sweep accepted")
	}
	good := []Series{{Name: "m", Samples: []time.Duration{1, 2, 3}}}
	if _, err := Latency(good, "", dir, "a/b"); err == nil || !strings.Contains(err.Error(), "plain name") {
		t.Errorf("path in base: %v", err)
	}
	if _, err := Latency(good, "", filepath.Join(dir, "missing"), "x"); err == nil || !strings.Contains(err.Error(), "writable") {
		t.Errorf("missing folder: %v", err)
	}
}

// TestLatencyReadable: 0.1 ms medians under 20-60 ms outliers get a log axis, on which the
// medians stand well off the floor; long stage names are tilted; a narrow spread stays linear
// and level.
func TestLatencyReadable(t *testing.T) {
	fast := func(name string, med time.Duration, outliers ...time.Duration) Series {
		s := Series{Name: name}
		for i := 0; i < 500; i++ {
			s.Samples = append(s.Samples, med+time.Duration(i%7)*time.Microsecond)
		}
		return Series{Name: name, Samples: append(s.Samples, outliers...)}
	}
	wide := []Series{
		fast("original\nfp32, 1 thread", 300*time.Microsecond, 20*time.Millisecond),
		fast("freeze + fast_linear + fast_conv\nfp32, 1 thread", 100*time.Microsecond, 60*time.Millisecond),
	}
	p, _, err := latencyPlot(wide, "wide")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Y.Scale.(plot.LogScale); !ok {
		t.Fatalf("a 0.1 ms median under a 60 ms outlier is drawn on a %T axis", p.Y.Scale)
	}
	// Where the 0.1 ms median sits, as a fraction of the axis height.
	at := p.Y.Norm(0.1)
	if at < 0.1 {
		t.Errorf("the 0.1 ms median is drawn at %.2f of the axis height: on the floor", at)
	}
	if p.X.Tick.Label.Rotation == 0 {
		t.Error("long stage names are drawn level, overlapping their neighbours")
	}
	if paths, err := Latency(wide, "wide", t.TempDir(), "latency"); err != nil || len(paths) != 2 {
		t.Fatalf("Latency on a log axis: %v, %v", paths, err)
	}
	narrow := []Series{fast("a", 10*time.Millisecond, 14*time.Millisecond), fast("b", 6*time.Millisecond)}
	p, _, err = latencyPlot(narrow, "narrow")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Y.Scale.(plot.LogScale); ok || p.X.Tick.Label.Rotation != 0 {
		t.Errorf("a narrow spread with short names: scale %T, rotation %v; want linear and level", p.Y.Scale, p.X.Tick.Label.Rotation)
	}
}
