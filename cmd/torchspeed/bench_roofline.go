package main

import (
	"fmt"
	"io"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/roofline"
)

// flopModule picks the module to count model i's FLOPs on, and what to call it. The count reads
// aten convolutions and matrix products, which an artifact may hide: its load passes
// (optimize_for_inference) turn convolutions into prim::mkldnn_convolution, and INT8 ones into
// quantized ops. So: a plain model is counted as loaded; an FP32 artifact as stored in its file,
// before the load passes; an INT8 artifact on a plain model in the same run that is its source
// (the SHA-256 its manifest records), since it does the same multiply-adds. closeFn releases
// what was loaded here. A nil module: nothing to count on.
func flopModule(models []*benchrun.Loaded, i int, hashes map[string]string) (m *torch.Module, countedOn string, closeFn func(), err error) {
	l := models[i]
	if !l.IsArtifact() {
		return l.Model.Module(), l.Spec.Name, func() {}, nil
	}
	if roofline.IsINT8(l.Model.Manifest.Precision) {
		for _, o := range models {
			if !o.IsArtifact() && hashes[o.Spec.Name] == l.Model.Manifest.SourceSHA256 {
				return o.Model.Module(), "its FP32 source " + o.Spec.Name, func() {}, nil
			}
		}
		return nil, "", func() {}, nil
	}
	raw, err := torch.Load(l.Spec.Path)
	if err != nil {
		return nil, "", func() {}, err
	}
	return raw, l.Spec.Name + " without its load passes", func() { raw.Close() }, nil
}

// addRooflines places each latency result against the compute peak measured on the CPUs in use.
// A model it cannot place gets a note on progress; bench goes on.
func addRooflines(progress io.Writer, models []*benchrun.Loaded, inputs []*torch.Tensor, rep *bench.Report) {
	for i, r := range latencyResults(rep) {
		if i >= len(models) || r.Stats.P50 <= 0 {
			continue
		}
		l := models[i]
		m, countedOn, closeFn, err := flopModule(models, i, rep.Environment.ModelHashes)
		if err == nil && m == nil {
			err = fmt.Errorf("an INT8 artifact's work is counted on its FP32 source; add it with --vs %s", l.Model.Manifest.SourceName)
		}
		if err == nil {
			var rf *report.Roofline
			int8 := l.IsArtifact() && roofline.IsINT8(l.Model.Manifest.Precision)
			if rf, err = roofline.Measure(m, countedOn, inputs, r.Stats.P50, int8, rep.Environment.Threads); err == nil {
				rf.Model = l.Spec.Name
				rep.Roofline = append(rep.Roofline, rf)
			}
		}
		closeFn()
		if err != nil {
			fmt.Fprintf(progress, "bench: no roofline for %s: %v\n", l.Spec.Name, err)
		}
	}
}
