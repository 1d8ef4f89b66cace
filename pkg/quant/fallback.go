package quant

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// FallbackOptions control QuantizeChecked's validation and FP32 fallback.
type FallbackOptions struct {
	// Thresholds the quantized model must meet against the FP32 model.
	Thresholds validate.Thresholds `mapstructure:"thresholds"`
	// MaxFP32Layers caps how many layers fallback may keep in FP32 (default 3; -1 disables
	// fallback).
	MaxFP32Layers int `mapstructure:"max_fp32_layers"`
	// SensitivityBatches is how many validation batches the per-layer measurement uses (0:
	// all). The final check always uses the whole validation set.
	SensitivityBatches int `mapstructure:"sensitivity_batches"`
	// AlwaysSensitivity measures the per-layer table even when the first try passes.
	AlwaysSensitivity bool `mapstructure:"always_sensitivity"`
	// Latency, if set, times the passing candidates (interleaved, in one call) so the fastest
	// is kept; nil keeps the one with the fewest FP32 layers. See InterleavedLatency.
	Latency LatencyFunc `mapstructure:"-" json:"-"`
}

// LatencyFunc measures the typical (p50) latency of each model, interleaving their runs so
// machine noise hits them alike. It returns one duration per model, in order.
type LatencyFunc func(ctx context.Context, models []*torch.Module) ([]time.Duration, error)

// LayerSensitivity is one row of the per-layer table: how the error changes when only this
// layer stays FP32 and every other quantizable layer is INT8.
type LayerSensitivity struct {
	Layer string `json:"layer"`
	Type  string `json:"type"`
	// Cosine, MeanAbsError and Top1Agreement of the model with this layer in FP32, on the
	// sensitivity batches.
	Cosine        float64 `json:"cosine"`
	MeanAbsError  float64 `json:"mean_abs_error"`
	Top1Agreement float64 `json:"top1_agreement"`
	// Gain is how much of the all-INT8 error this layer accounts for: (1 - cos(all INT8)) -
	// (1 - cos(this layer FP32)), scaled so the all-INT8 error is 1. Near 1: this layer alone
	// causes the error; near 0 (or negative): it does not matter.
	Gain float64 `json:"gain"`
}

// Attempt is one configuration QuantizeChecked tried.
type Attempt struct {
	FP32Layers []string           `json:"fp32_layers"`
	Cosine     float64            `json:"cosine"`
	Top1       float64            `json:"top1"`
	Passed     bool               `json:"passed"`
	Failures   []validate.Failure `json:"failures,omitempty"`
	Latency    time.Duration      `json:"latency_ns,omitempty"`
}

// ThresholdError is returned when no configuration within the fallback limit meets the
// thresholds. The report describes every attempt.
type ThresholdError struct {
	Failures []validate.Failure
	Tried    int
}

func (e *ThresholdError) Error() string {
	parts := make([]string, len(e.Failures))
	for i, f := range e.Failures {
		parts[i] = f.String()
	}
	return fmt.Sprintf("INT8 misses the validation thresholds after %d attempts (best attempt: %s): keep FP32, raise quantize.max_fallback_layers, or try another activation observer", e.Tried, strings.Join(parts, "; "))
}

// candidate is a passing (or best) quantized model.
type candidate struct {
	model *torch.Module
	rep   *Outcome
	res   *validate.Result
	skip  []string
	// nodes are the quantized graph's node counts: two attempts whose counts are equal built
	// the same graph, whatever layers they named.
	nodes map[string]int
}

// QuantizeChecked quantizes m, validates the result against m on val and, when thresholds
// fail, keeps the most sensitive layers in FP32 one by one until they pass or
// MaxFP32Layers is reached. Among the passing models it keeps the fastest (by fb.Latency).
// On failure it returns a *ThresholdError and the report of the attempts; no model.
func QuantizeChecked(ctx context.Context, m *torch.Module, calib, val validate.Batches, opts Options, fb FallbackOptions) (*torch.Module, *Outcome, error) {
	if err := fb.Thresholds.Validate(); err != nil {
		return nil, nil, err
	}
	if fb.MaxFP32Layers == 0 {
		fb.MaxFP32Layers = 3
	}
	ref, err := validate.RunReference(ctx, m, val, 0)
	if err != nil {
		return nil, nil, err
	}
	s := &fallbackSearch{ctx: ctx, m: m, calib: calib, opts: opts, fb: fb, ref: ref}
	defer s.close()

	first, ok, err := s.try(nil)
	if err != nil {
		return nil, nil, err
	}
	s.keep(first, ok)
	var table []LayerSensitivity
	if (!ok && fb.MaxFP32Layers > 0) || fb.AlwaysSensitivity {
		table, err = Sensitivity(ctx, m, calib, ref, opts, fb.SensitivityBatches, first.res)
		if err != nil {
			return nil, nil, err
		}
	}
	if !ok && fb.MaxFP32Layers > 0 {
		if err := s.fallBack(first, table); err != nil {
			return nil, nil, err
		}
	}
	if len(s.passing) == 0 {
		rep := s.best.rep
		s.unchangedNote(rep)
		rep.Sensitivity, rep.Attempts = table, s.attempts
		return nil, rep, &ThresholdError{Failures: s.best.rep.Failures, Tried: len(s.attempts)}
	}
	chosen, err := s.choose()
	if err != nil {
		return nil, nil, err
	}
	c := s.passing[chosen]
	s.passing = slices.Delete(s.passing, chosen, chosen+1) // close must not free it
	s.unchangedNote(c.rep)
	c.rep.Sensitivity, c.rep.Attempts = table, s.attempts
	return c.model, c.rep, nil
}

// fallbackSearch is QuantizeChecked's state: the models it built and what each attempt gave.
type fallbackSearch struct {
	ctx   context.Context
	m     *torch.Module
	calib validate.Batches
	opts  Options
	fb    FallbackOptions
	ref   *validate.Reference

	attempts []Attempt
	passing  []candidate
	best     *candidate // best failing candidate, by cosine, for the error report
	// unchanged are the layers whose exclusion left the quantized graph as it was: a layer
	// inlined into its parent's graph (a scripted nn.Sequential the freeze folded away, say) is
	// still quantized however it is named, and listing it as FP32 would be false.
	unchanged []string
}

// close frees every model the search still holds.
func (s *fallbackSearch) close() {
	for _, c := range s.passing {
		c.model.Close()
	}
	if s.best != nil {
		s.best.model.Close()
	}
}

// try quantizes with skip kept in FP32 (besides opts.Skip), validates the result and records
// the attempt; it reports whether the thresholds passed.
func (s *fallbackSearch) try(skip []string) (*candidate, bool, error) {
	o := s.opts
	o.Skip = append(slices.Clone(s.opts.Skip), skip...)
	q, rep, err := Quantize(s.ctx, s.m, s.calib, o)
	if err != nil {
		return nil, false, err
	}
	res, err := s.ref.Compare(s.ctx, q)
	if err != nil {
		q.Close()
		return nil, false, err
	}
	nodes, err := q.NodeCounts()
	if err != nil {
		q.Close()
		return nil, false, err
	}
	failed, unchecked := s.fb.Thresholds.Check(res)
	rep.Validation, rep.Failures, rep.Unchecked = res, failed, unchecked
	s.attempts = append(s.attempts, Attempt{FP32Layers: o.Skip, Cosine: res.Cosine, Top1: res.Top1, Passed: len(failed) == 0, Failures: failed})
	return &candidate{model: q, rep: rep, res: res, skip: slices.Clone(skip), nodes: nodes}, len(failed) == 0, nil
}

// keep holds on to a passing candidate, or to the best failing one; it closes the rest.
func (s *fallbackSearch) keep(c *candidate, ok bool) {
	if ok {
		s.passing = append(s.passing, *c)
		return
	}
	if s.best == nil || c.res.Cosine > s.best.res.Cosine {
		if s.best != nil {
			s.best.model.Close()
		}
		s.best = c
		return
	}
	c.model.Close()
}

// fallBack keeps the most sensitive layers (table's order) in FP32 one more at a time until the
// thresholds pass or fb.MaxFP32Layers is reached; from the first passing set it also tries the
// sets around it.
func (s *fallbackSearch) fallBack(first *candidate, table []LayerSensitivity) error {
	var skip []string
	prev := first.nodes
	for _, row := range table {
		// Layers that change nothing are not counted against the limit, but are not tried
		// without end either.
		if len(skip) >= s.fb.MaxFP32Layers || len(s.unchanged) >= s.fb.MaxFP32Layers {
			break
		}
		c, pass, err := s.try(append(slices.Clone(skip), row.Layer))
		if err != nil {
			return err
		}
		if maps.Equal(c.nodes, prev) {
			s.unchanged = append(s.unchanged, row.Layer)
			s.attempts = s.attempts[:len(s.attempts)-1]
			c.model.Close()
			continue
		}
		skip, prev = append(skip, row.Layer), c.nodes
		s.keep(c, pass)
		if pass {
			return s.tryAround(skip, table)
		}
	}
	return nil
}

// tryAround tries the sets near the first passing one, skip: the first passing set is not
// necessarily the fastest. The greedy order may have kept layers in FP32 that the last one made
// unnecessary: try dropping each earlier one. And an FP32 layer between INT8 neighbours costs a
// dequantize and a quantize; keeping the next most sensitive layer FP32 too can remove them:
// try that as well. Timing decides (choose).
func (s *fallbackSearch) tryAround(skip []string, table []LayerSensitivity) error {
	var more [][]string
	for i := 0; i < len(skip)-1; i++ {
		more = append(more, slices.Delete(slices.Clone(skip), i, i+1))
	}
	if n := len(skip); n < s.fb.MaxFP32Layers && n < len(table) {
		more = append(more, append(slices.Clone(skip), table[n].Layer))
	}
	for _, alt := range more {
		c, pass, err := s.try(alt)
		if err != nil {
			return err
		}
		s.keep(c, pass)
	}
	return nil
}

// unchangedNote records in rep the layers whose FP32 fallback changed nothing, with a warning.
func (s *fallbackSearch) unchangedNote(rep *Outcome) {
	if len(s.unchanged) == 0 {
		return
	}
	it := "them"
	if len(s.unchanged) == 1 {
		it = "it"
	}
	rep.Unchanged = s.unchanged
	rep.Warnings = append(rep.Warnings, fmt.Sprintf("keeping %s in FP32 left the quantized graph unchanged (same operators), so the fallback did not count %s: such a layer is inlined into its parent's graph (a scripted nn.Sequential, say) and stays INT8 whatever quantize.skip names; name the parent module, or keep the model FP32 (quantize.mode none)",
		strings.Join(s.unchanged, ", "), it))
}

// choose returns the index of the passing candidate to keep: the fastest by fb.Latency (each
// passing attempt gets its time), or without timing the one with the fewest FP32 layers, then
// the highest cosine.
func (s *fallbackSearch) choose() (int, error) {
	chosen := 0
	if len(s.passing) > 1 && s.fb.Latency != nil {
		models := make([]*torch.Module, len(s.passing))
		for i, c := range s.passing {
			models[i] = c.model
		}
		lat, err := s.fb.Latency(s.ctx, models)
		if err != nil {
			return 0, fmt.Errorf("quantize: timing the passing candidates: %w", err)
		}
		for i := range s.passing {
			for k := range s.attempts {
				if s.attempts[k].Passed && slices.Equal(s.attempts[k].FP32Layers, s.passing[i].rep.FP32Layers) {
					s.attempts[k].Latency = lat[i]
				}
			}
			if lat[i] < lat[chosen] {
				chosen = i
			}
		}
		return chosen, nil
	}
	for i, c := range s.passing {
		if len(c.skip) < len(s.passing[chosen].skip) ||
			(len(c.skip) == len(s.passing[chosen].skip) && c.res.Cosine > s.passing[chosen].res.Cosine) {
			chosen = i
		}
	}
	return chosen, nil
}

// Sensitivity measures each quantizable layer's share of the quantization error: for every
// layer it quantizes all the others (this one FP32) and compares with the reference on the
// first `batches` batches. all is the all-INT8 result on the same batches, or nil to measure
// it. Rows come back most sensitive first.
func Sensitivity(ctx context.Context, m *torch.Module, calib validate.Batches, ref *validate.Reference, opts Options, batches int, all *validate.Result) ([]LayerSensitivity, error) {
	layers, err := m.QuantLayers()
	if err != nil {
		return nil, err
	}
	if batches > 0 && batches < ref.Batches() || all == nil {
		q, _, err := Quantize(ctx, m, calib, opts)
		if err != nil {
			return nil, err
		}
		all, err = ref.CompareFirst(ctx, q, batches)
		q.Close()
		if err != nil {
			return nil, err
		}
	}
	base := 1 - all.Cosine
	var rows []LayerSensitivity
	for _, l := range layers {
		if slices.Contains(opts.Skip, l.Path) || l.Type == "LSTM" || l.Type == "GRU" {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		o := opts
		o.Skip = append(slices.Clone(opts.Skip), l.Path)
		q, _, err := Quantize(ctx, m, calib, o)
		if err != nil {
			return nil, fmt.Errorf("sensitivity of layer %s: %w", l.Path, err)
		}
		res, err := ref.CompareFirst(ctx, q, batches)
		q.Close()
		if err != nil {
			return nil, fmt.Errorf("sensitivity of layer %s: %w", l.Path, err)
		}
		gain := 0.0
		if base > 0 {
			gain = (base - (1 - res.Cosine)) / base
		}
		rows = append(rows, LayerSensitivity{Layer: l.Path, Type: l.Type, Cosine: res.Cosine, MeanAbsError: res.MeanAbsError,
			Top1Agreement: res.Top1Agreement, Gain: gain})
	}
	if len(rows) == 0 {
		return nil, errors.New("sensitivity: the model has no quantizable layers left to measure")
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Gain != rows[j].Gain {
			return rows[i].Gain > rows[j].Gain
		}
		return rows[i].MeanAbsError < rows[j].MeanAbsError
	})
	return rows, nil
}

// FormatSensitivity renders the per-layer table as Markdown for reports.
func FormatSensitivity(rows []LayerSensitivity) string {
	var b strings.Builder
	b.WriteString("| layer | type | cosine with it FP32 | mean abs error | top-1 agreement | share of error |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range rows {
		agree := "n/a"
		if r.Top1Agreement >= 0 {
			agree = fmt.Sprintf("%.4f", r.Top1Agreement)
		}
		fmt.Fprintf(&b, "| %s | %s | %.6f | %.4g | %s | %.1f%% |\n", r.Layer, r.Type, r.Cosine, r.MeanAbsError, agree, 100*r.Gain)
	}
	return b.String()
}
