package pipeline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// fuseCosineSlack is how far below the INT8 model's cosine to FP32 (the smallest per-output
// cosine on the validation data) "+ fuse_conv_add"'s may be. The fused convolution rounds once
// where ATen's pair rounds twice, so it is usually as close to FP32 or closer (resnet18:
// cosine 0.9995 to the unfused model); 1e-3 leaves room for that noise on small validation
// sets while a wrong sum zero point or scale (cosine 0.76 on resnet18) fails it at once.
const fuseCosineSlack = 1e-3

// int8Fuse builds "<b> + fuse_conv_add" from b (an INT8 candidate, its optimize_for_inference
// variant or their fast_qdq one): each quantized::conv2d whose only use is a quantized add
// computed with that add as one oneDNN convolution (torchspeed::conv2d_add). Its outputs are
// not b's bit for bit, so it is validated against FP32 on the validation data as the INT8
// model was: it must pass th and keep its cosine within fuseCosineSlack of int8Val's. The
// artifact saves b's module and lists the pass, which Load re-applies.
//
// It returns nil when there is nothing to build (the toggle off, b nil, a shim without the
// fused op, no pair to fuse) or when the candidate failed or was rejected.
func (r *run) int8Fuse(b *candidate, val validate.Batches, th validate.Thresholds, int8Val *validate.Result) *candidate {
	if b == nil || r.cfg.Optimize.FuseConvAdd == config.Off {
		return nil
	}
	name := b.name + " + fuse_conv_add"
	steps := append(slices.Clone(b.steps), torchspeed.PassFuseConvAdd)
	if why := torch.ConvAddUnavailable(); why != "" {
		r.skip(name, kindINT8Fuse, steps, why)
		return nil
	}
	fused := 0
	c := r.addCandidate(name, kindINT8Fuse, steps, func() (*candidate, error) {
		m, n, err := b.mod.FuseConvAdd()
		if err != nil {
			return nil, err
		}
		fused = n
		save := b.save
		if save == nil {
			save = b.mod
		}
		return &candidate{mod: m, save: save, passes: append(slices.Clone(b.passes), torchspeed.PassFuseConvAdd), base: b,
			channelsLast: b.channelsLast, precision: b.precision, engine: b.engine, fp32Layers: b.fp32Layers}, nil
	})
	if c == nil || c.status != stCandidate {
		return nil
	}
	if fused == 0 {
		c.status, c.reason = stSkipped, "no quantized::conv2d whose only use is a quantized add with a residual that may be written"
		return nil
	}
	res, err := validate.Compare(r.ctx, r.unfrozen, c.mod, val)
	if err != nil {
		c.status, c.reason = stFailed, fmt.Sprintf("validating it against FP32 failed: %v", err)
		return nil
	}
	if failed, _ := th.Check(res); len(failed) > 0 {
		var fs []string
		for _, f := range failed {
			fs = append(fs, f.String())
		}
		c.status, c.reason = stRejected, "fails validation against FP32: "+strings.Join(fs, "; ")
		r.warn(fmt.Sprintf("%s: %s", name, c.reason))
		return nil
	}
	if int8Val != nil && res.Cosine < int8Val.Cosine-fuseCosineSlack {
		c.status, c.reason = stRejected, fmt.Sprintf("cosine to FP32 %.5f, more than %.0e below the INT8 model's %.5f", res.Cosine, fuseCosineSlack, int8Val.Cosine)
		r.warn(fmt.Sprintf("%s: %s", name, c.reason))
		return nil
	}
	c.valCosine = res.Cosine
	ref := ""
	if int8Val != nil {
		ref = fmt.Sprintf(" (the INT8 model's %.5f)", int8Val.Cosine)
	}
	c.reason = fmt.Sprintf("%s fused; against FP32 on the validation data: cosine %.5f%s, top-1 agreement %.4f", report.Plural(fused, "conv + add pair"), res.Cosine, ref, res.Top1Agreement)
	return c
}

// pickFuse decides, on the measurement m, between best (the INT8 stage's pick so far) and fuse
// (built on best or on the candidate best was built from; nil: none): fuse is kept when its
// p50 is lower, or when optimize.fuse_conv_add is on. It returns the one that stands for best.
func (r *run) pickFuse(m *measurement, best, fuse *candidate) *candidate {
	c := r.pickVariant(m, best, fuse, r.cfg.Optimize.FuseConvAdd == config.On, false, "optimize.fuse_conv_add")
	if c == fuse && fuse.base.kind == kindINT8Fast && fuse.base.status == stCandidate {
		fuse.base.status, fuse.base.reason = stSuperseded, fmt.Sprintf("%s; %s is built on it", fuse.base.reason, fuse.name)
	}
	return c
}
