package pipeline

import (
	"path/filepath"

	"github.com/torchspeed/torchspeed/pkg/plot"
)

// writePlot draws the latency distributions of the stage measurement and the final benchmark.
func (r *run) writePlot(dir string) error {
	if r.stageCmp == nil {
		return nil
	}
	files, err := plot.Latency(plot.SeriesFromResults(r.stageCmp.Results), "latency per stage ("+r.cfg.ArtifactName()+")", dir, "latency")
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
