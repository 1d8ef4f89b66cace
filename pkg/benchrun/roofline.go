package benchrun

import (
	"errors"
	"fmt"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/roofline"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// Timed is one model as a benchmark measured it, for Rooflines: its name and file, what was loaded (with its
// manifest when it is a torchspeed artifact), the SHA-256 of its file and its median latency.
type Timed struct {
	Name   string
	Path   string
	Module *torch.Module
	// Manifest is nil (or of format 0) for a plain TorchScript model.
	Manifest *torchspeed.Manifest
	SHA256   string
	P50      time.Duration // <= 0: not measured
}

func (t *Timed) isArtifact() bool { return t.Manifest != nil && t.Manifest.Format > 0 }

// flopModule picks the module to count model i's FLOPs on, and what to call it. The count reads
// aten convolutions and matrix products, which an artifact may hide: its load passes
// (optimize_for_inference) turn convolutions into prim::mkldnn_convolution, and INT8 ones into
// quantized ops. So: a plain model is counted as loaded; an FP32 artifact as stored in its file,
// before the load passes; an INT8 artifact on a plain model in the same run that is its source
// (the SHA-256 its manifest records), since it does the same multiply-adds. closeFn releases
// what was loaded here. A nil module: nothing to count on.
func flopModule(models []Timed, i int) (m *torch.Module, countedOn string, closeFn func(), err error) {
	l := &models[i]
	if !l.isArtifact() {
		return l.Module, l.Name, func() {}, nil
	}
	if roofline.IsINT8(l.Manifest.Precision) {
		for j := range models {
			o := &models[j]
			if !o.isArtifact() && o.SHA256 != "" && o.SHA256 == l.Manifest.SourceSHA256 {
				return o.Module, "its FP32 source " + o.Name, func() {}, nil
			}
		}
		return nil, "", func() {}, nil
	}
	raw, err := torch.Load(l.Path)
	if err != nil {
		return nil, "", func() {}, err
	}
	return raw, l.Name + " without its load passes", func() { raw.Close() }, nil
}

// Rooflines places each measured model against the compute peak of threads CPUs, counting its
// FLOPs on inputs. A model it cannot place is skipped, with the reason passed to skipped.
func Rooflines(models []Timed, inputs []*torch.Tensor, threads int, skipped func(name string, err error)) []*report.Roofline {
	var out []*report.Roofline
	for i := range models {
		l := &models[i]
		if l.P50 <= 0 {
			continue
		}
		if why := roofline.NoPeakFor(l.Manifest.Precision); l.isArtifact() && why != "" {
			if skipped != nil {
				skipped(l.Name, errors.New(why))
			}
			continue
		}
		m, countedOn, closeFn, err := flopModule(models, i)
		if err == nil && m == nil {
			err = fmt.Errorf("an INT8 artifact's work is counted on its FP32 source; add it with --vs %s", l.Manifest.SourceName)
		}
		if err == nil {
			var rf *report.Roofline
			int8 := l.isArtifact() && roofline.IsINT8(l.Manifest.Precision)
			if rf, err = roofline.Measure(m, countedOn, inputs, l.P50, int8, threads); err == nil {
				rf.Model = l.Name
				out = append(out, rf)
			}
		}
		closeFn()
		if err != nil && skipped != nil {
			skipped(l.Name, err)
		}
	}
	return out
}
