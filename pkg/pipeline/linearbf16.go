package pipeline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// buildLinearBF16 builds "<f> + linear_bf16" for every fast_linear variant f: the same module with
// its GEMM's weights and inputs in BF16 (vdpbf16ps where the CPU has AVX512_BF16, BF16 widened to
// float elsewhere, so the artifact answers alike on every CPU of a fleet). Lower precision than
// FP32, so unlike fast_linear it is held to the validation thresholds against the original on the
// validation data, as an INT8 model is; it runs in the same measurement as its base, and
// decideFastChain keeps it only in the fastest chain.
func (r *run) buildLinearBF16(fast []*candidate) {
	// auto: only where the config accepts reduced precision for this model.
	on := r.cfg.Optimize.LinearBF16
	if on == config.Off || (on == config.Auto && (r.cfg.Quantize.Mode == "none" || r.cfg.Quantize.Mode == "")) || len(fast) == 0 {
		return
	}
	r.logf("building linear_bf16 variants")
	for _, f := range fast {
		r.linearBF16Of(f)
	}
}

func (r *run) linearBF16Of(f *candidate) {
	name := f.name + " + " + torchspeed.PassLinearBF16
	steps := append(slices.Clone(f.steps), torchspeed.PassLinearBF16)
	converted := 0
	c := r.addCandidate(name, kindFP32BF16, steps, func() (*candidate, error) {
		m, n, err := f.mod.LinearBF16()
		if err != nil {
			return nil, err
		}
		converted = n
		return &candidate{mod: m, save: f.save, passes: append(slices.Clone(f.passes), torchspeed.PassLinearBF16),
			channelsLast: f.channelsLast, base: f, precision: "bf16"}, nil
	})
	if c == nil || c.status != stCandidate {
		return
	}
	if converted == 0 {
		c.status, c.reason = stSkipped, "the fast_linear variant runs no linear through torchspeed's GEMM"
		return
	}
	val, desc, _, _, err := r.validationBatches()
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("opening the validation data failed: %v", err)
		return
	}
	res, err := validate.Compare(r.ctx, r.orig.mod, c.mod, val)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("validating it failed: %v", err)
		return
	}
	c.valCosine = res.Cosine
	if failed, _ := r.thresholds().Check(res); len(failed) > 0 {
		var fs []string
		for _, x := range failed {
			fs = append(fs, x.String())
		}
		c.status, c.reason = stRejected, fmt.Sprintf("BF16 moved the outputs beyond the validation thresholds on %s: %s", desc, strings.Join(fs, "; "))
		r.logf("  %-34s rejected: %s", name, c.reason)
		return
	}
	c.reason = fmt.Sprintf("%s in BF16 (weights and inputs rounded, sums in float; vdpbf16ps where the CPU has AVX512_BF16, widened to float elsewhere); validated against the original on %s: cosine %.6f, max abs error %.3g (thresholds: validation.*)",
		report.Plural(converted, "linear layer"), desc, res.Cosine, res.MaxAbsError)
}
