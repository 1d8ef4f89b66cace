package pipeline

import (
	"path/filepath"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/bench"

	"github.com/torchspeed/torchspeed/pkg/plot"
)

// writePlot draws the latency distributions of the stage measurement and the final benchmark.
func (r *run) writePlot(dir string) error {
	if r.stageCmp == nil {
		return nil
	}
	results := append([]*bench.Result{}, r.stageCmp.Results...)
	seen := map[string]bool{}
	for _, res := range results {
		seen[res.Name] = true
	}
	for _, cmp := range r.extraCmps {
		for _, res := range cmp.Results {
			if !seen[res.Name] {
				seen[res.Name] = true
				results = append(results, res)
			}
		}
	}
	series := plot.SeriesFromResults(results)
	for i := range series {
		series[i].Name = shortName(series[i].Name)
	}
	files, err := plot.Latency(series, "latency per stage ("+r.cfg.ArtifactName()+")", dir, "latency")
	if err != nil {
		return err
	}
	for _, f := range files {
		if filepath.Ext(f) == ".png" {
			r.rep.Plot = filepath.Base(f)
		}
	}
	return nil
}

// shortName keeps plot labels from running into each other.
func shortName(s string) string {
	return strings.NewReplacer("optimize_for_inference", "ofi", "channels-last", "CL", " + ", "+", "fold conv+bn", "fold").Replace(s)
}
