package pipeline

import (
	"fmt"

	"github.com/torchspeed/torchspeed/pkg/config"
)

// int8Input offers the INT8 passes to a model that arrived quantized (PyTorch's eager static
// or dynamic quantization): fast_qdq and fuse_conv_add on the best candidate so far (the
// original or its frozen form), measured against it in one interleaved measurement and kept
// only when faster, as they are for a model torchspeed quantized. fuse_conv_add is validated
// against the original, which is the INT8 model the user trusts.
func (r *run) int8Input() error {
	base := r.best()
	fast := r.int8Fast(base)
	var fuse *candidate
	if r.cfg.Optimize.FuseConvAdd != config.Off {
		val, _, _, _, err := r.validationBatches()
		if err != nil {
			return err
		}
		fuse = r.int8Fuse(firstOf(fast, base), val, r.thresholds(), nil)
	}
	if fast == nil && fuse == nil {
		return r.validateFP32()
	}
	var cands []*candidate
	for _, c := range []*candidate{base, fast, fuse} {
		if c != nil && c != r.orig {
			cands = append(cands, c)
		}
	}
	m, err := r.measure("INT8 passes", cands, r.stageOptions(r.cfg.Bench.StageRuns))
	if err != nil {
		return fmt.Errorf("measuring the INT8 passes on %s: %w", base.name, err)
	}
	picked := r.pickFuse(m, r.pickFast(m, base, fast), fuse)
	if picked != base {
		picked.status = stKept
		if base != r.orig {
			base.status, base.reason = stSuperseded, fmt.Sprintf("%s; %s builds on it", base.reason, picked.name)
		}
	}
	return r.validateFP32()
}
