package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// saveArtifact writes model m as a torchspeed artifact of digits with the given manifest fields.
func saveArtifact(t *testing.T, m *torch.Module, name string, man torchspeed.Manifest) string {
	t.Helper()
	man.Inputs = []torchspeed.InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}}
	man.Runtime = torchspeed.Runtime{Threads: 1}
	return writeArtifact(t, m, name, man)
}

// bench's roofline: a plain model is counted as loaded; an FP32 artifact before its load passes
// (optimize_for_inference hides the convolutions from the count); an INT8 artifact on its FP32
// source when the run has it, and not at all otherwise.
func TestBenchRoofline(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	model := f.ModelPath()
	sha, err := bench.HashFile(model)
	if err != nil {
		t.Fatal(err)
	}
	m, err := torch.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Eval(); err != nil {
		t.Fatal(err)
	}
	frozen, err := m.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	ofi := saveArtifact(t, frozen, "digits.ofi.torchspeed.pt", torchspeed.Manifest{
		Precision: "fp32", LoadPasses: []string{torchspeed.PassOptimizeForInference}, SourceName: "digits.pt", SourceSHA256: sha})

	if err := torch.SetQEngine(f.QuantRef.Engine); err != nil {
		t.Fatal(err)
	}
	q, err := torch.Load(f.Path(f.QuantRef.File))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	int8 := saveArtifact(t, q, "digits.int8.torchspeed.pt", torchspeed.Manifest{
		Precision: "int8-static", QEngine: f.QuantRef.Engine, SourceName: "digits.pt", SourceSHA256: sha})

	type want struct {
		model, precision, countedOn string
	}
	cases := []struct {
		name   string
		args   []string
		want   []want
		stderr string
	}{
		{"plain", []string{"-m", model, "--input-shape", "1x1x8x8"}, []want{{"digits.pt", "fp32", "digits.pt"}}, ""},
		{"fp32 artifact", []string{"-m", ofi}, []want{{"digits.ofi.torchspeed.pt", "fp32", "digits.ofi.torchspeed.pt without its load passes"}}, ""},
		{"int8 artifact alone", []string{"-m", int8}, nil, "no roofline for digits.int8.torchspeed.pt: an INT8 artifact's work is counted on its FP32 source; add it with --vs digits.pt"},
		{"int8 artifact with source", []string{"-m", model, "--vs", int8, "--input-shape", "1x1x8x8"},
			[]want{{"digits.pt", "fp32", "digits.pt"}, {"digits.int8.torchspeed.pt", "int8", "its FP32 source digits.pt"}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, err := runBench(t, append(c.args, "--runs", "10", "--warmup", "1", "--threads", "1", "--json")...)
			if err != nil {
				t.Fatal(err)
			}
			if c.stderr != "" && !strings.Contains(stderr, c.stderr) {
				t.Errorf("stderr lacks %q:\n%s", c.stderr, stderr)
			}
			var rep bench.RunReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("JSON: %v", err)
			}
			if len(rep.Roofline) != len(c.want) {
				t.Fatalf("%d rooflines, want %d (stderr %s)", len(rep.Roofline), len(c.want), stderr)
			}
			for i, w := range c.want {
				rf := rep.Roofline[i]
				if rf.Model != w.model || rf.Precision != w.precision || rf.CountedOn != w.countedOn || rf.FLOPs != 675072 ||
					len(rf.CPUs) != 1 || rf.Fraction <= 0 || rf.Fraction > 1 {
					t.Errorf("roofline %d: %+v, want %+v, 675072 FLOP on 1 CPU", i, rf, w)
				}
			}
		})
	}
	out, _, err := runBench(t, "-m", model, "--input-shape", "1x1x8x8", "--runs", "10", "--threads", "1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "roofline digits.pt: 675 kFLOP per inference") {
		t.Errorf("table has no roofline line:\n%s", out)
	}
}
