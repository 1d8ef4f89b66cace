package pipeline

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/plot"
)

// writePlot draws the latency distributions of every candidate as first measured (the
// figures of its stage row) and of the final benchmark, into dir/base.{png,svg}.
func (r *run) writePlot(dir, base string) ([]string, error) {
	var series []plot.Series
	add := func(c *candidate, label string) {
		if c.meas == nil {
			return
		}
		name := c.name
		if c == r.orig {
			name = "original"
		}
		if res := c.meas.result(name); res != nil {
			label = fmt.Sprintf("%s\n%s, %s", label, c.precision, threadWords(c.meas.threads))
			series = append(series, plot.Series{Name: label, Samples: res.Samples})
		}
	}
	add(r.orig, "original")
	for _, c := range r.cands {
		add(c, shortName(c.name))
	}
	if m := r.finalMeas; m != nil {
		series = append(series, plot.Series{Name: "final: original\nfp32, " + threadWords(m.threads), Samples: m.cmp.Results[0].Samples},
			plot.Series{Name: fmt.Sprintf("final: optimized\n%s, %s", r.best().precision, threadWords(m.threads)), Samples: m.cmp.Results[1].Samples})
	}
	if len(series) == 0 {
		return nil, nil
	}
	title := fmt.Sprintf("%s: latency per inference", r.cfg.ArtifactName())
	if b := r.rep.Bench; b != nil {
		title = fmt.Sprintf("%s: latency per inference, batch %s (optimized: %s, %s, %s)", r.cfg.ArtifactName(), batchWords(r), b.Optimized, b.Precision, threadWords(b.Threads))
	}
	files, err := plot.Latency(series, title, dir, base)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if filepath.Ext(f) == ".png" {
			r.rep.Plot = strp(filepath.Base(f))
		}
	}
	return files, nil
}

func batchWords(r *run) string {
	if ins := r.cfg.Model.Inputs; len(ins) > 0 && len(ins[0].Shape) > 0 {
		return fmt.Sprint(ins[0].Shape[0])
	}
	return "?"
}

// shortName keeps plot labels from running into each other.
func shortName(s string) string {
	return strings.NewReplacer("optimize_for_inference", "ofi", "channels-last", "CL", " + ", "+", "fold conv+bn", "fold").Replace(s)
}

func threadWords(n int) string {
	if n == 1 {
		return "1 thread"
	}
	return fmt.Sprintf("%d threads", n)
}
