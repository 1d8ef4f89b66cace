// Package validate proves that an optimized or quantized model still answers like the FP32
// original: it runs both on a validation set and compares their outputs (cosine similarity,
// absolute errors, top-1 agreement, top-1/top-5 accuracy when labels are given, KL divergence
// of the softmax outputs), then checks the figures against thresholds from the configuration.
//
// The reference outputs are computed once (RunReference) and kept in memory, so the repeated
// comparisons of the quantizer's FP32 fallback search do not rerun the FP32 model.
package validate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
)

// Batch is one batch of model inputs (dimension 0 is the sample) with optional class labels.
type Batch struct {
	Inputs []*torch.Tensor
	// Labels holds one class index per sample, or nil.
	Labels []int64
	// Owned says the batch's tensors were made for this call and Close frees them.
	Owned bool
}

// Close frees the batch's tensors if they were made for it.
func (b Batch) Close() {
	if !b.Owned {
		return
	}
	for _, t := range b.Inputs {
		t.Close()
	}
}

// Batches is a data set served in batches, for calibration and validation. Callers Close each
// batch they get.
type Batches interface {
	// Len is the number of batches.
	Len() int
	// Batch returns batch i, 0 <= i < Len().
	Batch(i int) (Batch, error)
}

// outputData is one flattened output of one batch, as float32.
type outputData struct {
	name  string
	shape []int64
	data  []float32
}

// Runner is implemented by Batches whose models are not called as forward(tensors...): a
// method with typed arguments (constants beside the tensors), or a model that keeps state
// between calls. Every pass over such batches (the reference's, each candidate's, each
// calibration) starts with Start, then runs the batches in order from the first, so a
// stateful model replays the same ordered stream from a reset state on both sides.
type Runner interface {
	// Start prepares m for a pass from the first batch (a stateful model's reset).
	Start(m *torch.Module) error
	// Run calls m on batch b and returns its flattened outputs.
	Run(m *torch.Module, b Batch) ([]torch.Output, error)
}

// Start begins a pass of m over data: Runner.Start when data is a Runner, else nothing.
func Start(m *torch.Module, data Batches) error {
	if rn, ok := data.(Runner); ok {
		if err := rn.Start(m); err != nil {
			return fmt.Errorf("validate: start a pass of %q: %w", m.Name(), err)
		}
	}
	return nil
}

// Forward runs m on batch b of data: through data's Runner when it has one, else forward
// with the batch's tensors.
func Forward(m *torch.Module, data Batches, b Batch) ([]torch.Output, error) {
	if rn, ok := data.(Runner); ok {
		return rn.Run(m, b)
	}
	return m.Forward(b.Inputs...)
}

// Reference holds the FP32 model's outputs on a data set.
type Reference struct {
	data    Batches
	batches int
	outs    [][]outputData // per batch, per output
	labels  [][]int64
	samples int
}

// RunReference runs the reference model on the first n batches of data (n <= 0: all) and
// keeps its outputs.
func RunReference(ctx context.Context, ref *torch.Module, data Batches, n int) (*Reference, error) {
	if data == nil || data.Len() == 0 {
		return nil, errors.New("validate: the validation set is empty: give validation data (validation.path in the config)")
	}
	if n <= 0 || n > data.Len() {
		n = data.Len()
	}
	r := &Reference{data: data, batches: n}
	if err := Start(ref, data); err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b, err := data.Batch(i)
		if err != nil {
			return nil, fmt.Errorf("validate: batch %d: %w", i, err)
		}
		outs, err := run(ref, data, b)
		b.Close()
		if err != nil {
			return nil, fmt.Errorf("validate: reference model on batch %d: %w", i, err)
		}
		r.outs = append(r.outs, outs)
		r.labels = append(r.labels, b.Labels)
		if len(outs) > 0 && len(outs[0].shape) > 0 {
			r.samples += int(outs[0].shape[0])
		}
	}
	return r, nil
}

// Samples is the number of samples the reference covers.
func (r *Reference) Samples() int { return r.samples }

// Batches is the number of batches the reference covers.
func (r *Reference) Batches() int { return r.batches }

func run(m *torch.Module, data Batches, b Batch) ([]outputData, error) {
	outs, err := Forward(m, data, b)
	if err != nil {
		return nil, err
	}
	defer torch.CloseOutputs(outs)
	res := make([]outputData, 0, len(outs))
	for _, o := range outs {
		d, err := o.Tensor.Float32s()
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", o.Name, err)
		}
		res = append(res, outputData{name: o.Name, shape: o.Tensor.Shape(), data: d})
	}
	return res, nil
}

// OutputResult compares one named output.
type OutputResult struct {
	Name         string  `json:"name"`
	Cosine       float64 `json:"cosine"`         // over all elements of all samples
	MinCosine    float64 `json:"min_cosine"`     // worst single sample
	MaxAbsError  float64 `json:"max_abs_error"`  // largest |candidate - reference|
	MeanAbsError float64 `json:"mean_abs_error"` // mean |candidate - reference|
	RefMaxAbs    float64 `json:"ref_max_abs"`    // largest |reference|, to judge the errors' scale
}

// Result is a candidate's comparison with the reference. Figures that do not apply are -1:
// Top1Agreement and KL when no output looks like class scores, accuracies without labels.
type Result struct {
	Samples int `json:"samples"`
	// Cosine is the smallest per-output cosine similarity, MinSampleCosine the worst sample's.
	Cosine          float64 `json:"cosine"`
	MinSampleCosine float64 `json:"min_sample_cosine"`
	MaxAbsError     float64 `json:"max_abs_error"`
	MeanAbsError    float64 `json:"mean_abs_error"`
	// ClassOutput is the output read as class scores (2-D, N x classes, classes >= 2), or "".
	ClassOutput string `json:"class_output,omitempty"`
	// Top1Agreement is the share of the counted samples (Top1Counted) whose top-1 class is the
	// reference's. A sample whose reference top-1 is a tie at float precision (Top1Tied) is
	// not counted either way: see TieTolerance.
	Top1Agreement float64 `json:"top1_agreement"`
	Top1Counted   int     `json:"top1_counted"`
	Top1Tied      int     `json:"top1_tied"`
	KLDivergence  float64 `json:"kl_divergence"` // mean KL(softmax(ref) || softmax(candidate)), nats
	RefTop1       float64 `json:"ref_top1"`
	RefTop5       float64 `json:"ref_top5"`
	Top1          float64 `json:"top1"`
	Top5          float64 `json:"top5"`
	// AccuracyDrop is RefTop1 - Top1 (fraction, 0.005 = half a point), -1 without labels.
	AccuracyDrop float64        `json:"accuracy_drop"`
	Outputs      []OutputResult `json:"outputs"`
}

// acc is one output's comparison over every sample, and its worst sample's cosine.
type acc struct {
	Diff
	minCos float64
}

// Compare runs the candidate on the reference's batches and compares the outputs.
func (r *Reference) Compare(ctx context.Context, cand *torch.Module) (*Result, error) {
	return r.CompareFirst(ctx, cand, r.batches)
}

// CompareFirst compares on the first n batches only (a quick look, e.g. per-layer
// sensitivity); n <= 0 or beyond the reference means all.
func (r *Reference) CompareFirst(ctx context.Context, cand *torch.Module, n int) (*Result, error) {
	if n <= 0 || n > r.batches {
		n = r.batches
	}
	accs := map[string]*acc{}
	var names []string
	var agree, kl, refTop1, refTop5, top1, top5 float64
	var classSamples, labelled, counted, tied int
	classOut := ""
	samples := 0
	if err := Start(cand, r.data); err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b, err := r.data.Batch(i)
		if err != nil {
			return nil, fmt.Errorf("validate: batch %d: %w", i, err)
		}
		got, err := run(cand, r.data, b)
		b.Close()
		if err != nil {
			return nil, fmt.Errorf("validate: candidate model on batch %d: %w", i, err)
		}
		want := r.outs[i]
		if len(got) != len(want) {
			return nil, fmt.Errorf("validate: batch %d: candidate returns %d outputs, reference %d", i, len(got), len(want))
		}
		for k := range want {
			w, g := want[k], got[k]
			if g.name != w.name || len(g.data) != len(w.data) {
				return nil, fmt.Errorf("validate: batch %d: candidate output %s%v does not match reference output %s%v", i, g.name, g.shape, w.name, w.shape)
			}
			a := accs[w.name]
			if a == nil {
				a = &acc{minCos: 1}
				accs[w.name] = a
				names = append(names, w.name)
			}
			rows := 1
			if len(w.shape) > 0 && w.shape[0] > 0 {
				rows = int(w.shape[0])
			}
			per := len(w.data) / rows
			for s := 0; s < rows; s++ {
				d := DiffOf(w.data[s*per:(s+1)*per], g.data[s*per:(s+1)*per])
				a.Merge(d)
				a.minCos = min(a.minCos, d.Cosine())
			}
			if k == 0 && isClassScores(w.shape) {
				classOut = w.name
				c := int(w.shape[1])
				for s := 0; s < rows; s++ {
					wr, gr := w.data[s*c:(s+1)*c], g.data[s*c:(s+1)*c]
					wt, gt := Argmax(wr), Argmax(gr)
					switch {
					case Tied(wr):
						tied++
					case wt == gt:
						agree++
						counted++
					default:
						counted++
					}
					kl += klSoftmax(wr, gr)
					classSamples++
					if lab := r.labels[i]; lab != nil && s < len(lab) {
						labelled++
						if int64(wt) == lab[s] {
							refTop1++
						}
						if int64(gt) == lab[s] {
							top1++
						}
						if inTopK(wr, lab[s], 5) {
							refTop5++
						}
						if inTopK(gr, lab[s], 5) {
							top5++
						}
					}
				}
			}
		}
		if len(want) > 0 && len(want[0].shape) > 0 {
			samples += int(want[0].shape[0])
		}
	}
	res := &Result{Samples: samples, Cosine: 1, MinSampleCosine: 1, Top1Agreement: -1, KLDivergence: -1,
		RefTop1: -1, RefTop5: -1, Top1: -1, Top5: -1, AccuracyDrop: -1, ClassOutput: classOut}
	var all Diff
	for _, name := range names {
		a := accs[name]
		o := OutputResult{Name: name, Cosine: a.Cosine(), MinCosine: a.minCos, MaxAbsError: a.MaxAbs(),
			MeanAbsError: a.MeanAbs(), RefMaxAbs: a.RefMaxAbs()}
		res.Outputs = append(res.Outputs, o)
		res.Cosine = min(res.Cosine, o.Cosine)
		res.MinSampleCosine = min(res.MinSampleCosine, o.MinCosine)
		res.MaxAbsError = max(res.MaxAbsError, o.MaxAbsError)
		all.Merge(a.Diff)
	}
	res.MeanAbsError = all.MeanAbs()
	if classSamples > 0 {
		res.KLDivergence = kl / float64(classSamples)
		res.Top1Counted, res.Top1Tied = counted, tied
		if counted > 0 {
			res.Top1Agreement = agree / float64(counted)
		}
	}
	if labelled > 0 {
		l := float64(labelled)
		res.RefTop1, res.RefTop5, res.Top1, res.Top5 = refTop1/l, refTop5/l, top1/l, top5/l
		res.AccuracyDrop = res.RefTop1 - res.Top1
	}
	return res, nil
}

// Compare runs both models on data and compares them: RunReference then Compare.
func Compare(ctx context.Context, ref, cand *torch.Module, data Batches) (*Result, error) {
	r, err := RunReference(ctx, ref, data, 0)
	if err != nil {
		return nil, err
	}
	return r.Compare(ctx, cand)
}

func isClassScores(shape []int64) bool { return len(shape) == 2 && shape[1] >= 2 }

// TieTolerance is the relative margin below which a reference sample's top-1 class is a tie
// at float precision: its two highest scores differ by at most TieTolerance times the
// sample's largest |score|. Such a sample's argmax depends on the summation order of the
// float arithmetic (thread count, kernel choice), not on the model, so top-1 agreement counts
// it neither as agreement nor as disagreement.
//
// Float32 accumulation bounds the noise: a dot product of length K is exact to about K*u
// relative to the sum of |terms| in the worst case (u = 2^-24, K = 1280 for MobileNetV2's
// classifier: 7.6e-5), to about sqrt(K)*u in practice. Measured on the mobilenet_v2 fixture
// (16 inputs, FP32 at 1 against 2, 3 and 4 threads): the logits moved by at most 2.5e-6 with
// largest |logit| 0.45-0.61, 5.4e-6 relative, 18x inside the bound; the smallest real top-1
// margin there was 2.9e-3 relative, 29x above it. On 128 further random inputs one sample's
// margin was 1.9e-5 relative (3x the noise: a tie), the next smallest 3.3e-3. A decided
// sample's runner-up is more than the tolerance below the top, so a candidate whose top-1 is
// another class disagrees for real.
const TieTolerance = 1e-4

// MinDecidedSamples is how many samples with a decided reference top-1 min_top1_agreement
// needs when ties were left out; with fewer, the check is reported as not measured rather
// than decided on a handful of samples.
const MinDecidedSamples = 10

// Tied reports whether the top-1 class of reference scores v is undecided at float
// precision (see TieTolerance). All-zero scores are a tie; non-finite ones are not judged as one.
func Tied(v []float32) bool {
	if len(v) < 2 {
		return false
	}
	first, second := math.Inf(-1), math.Inf(-1)
	scale := 0.0
	for _, x := range v {
		f := float64(x)
		if !finite(f) {
			return false
		}
		scale = max(scale, math.Abs(f))
		if f > first {
			first, second = f, first
		} else if f > second {
			second = f
		}
	}
	return first-second <= TieTolerance*scale
}

// Argmax is the index of the highest score, the first on ties (0 for an empty slice).
func Argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// inTopK reports whether class label is among the k highest scores (ties resolved by index,
// as torch.topk does for equal values in practice).
func inTopK(v []float32, label int64, k int) bool {
	if label < 0 || int(label) >= len(v) {
		return false
	}
	higher := 0
	for i, x := range v {
		if x > v[label] || (x == v[label] && int64(i) < label) {
			higher++
		}
	}
	return higher < k
}

// klSoftmax is KL(softmax(p) || softmax(q)) in float64.
func klSoftmax(p, q []float32) float64 {
	lp, lq := logSoftmax(p), logSoftmax(q)
	var kl float64
	for i := range lp {
		kl += math.Exp(lp[i]) * (lp[i] - lq[i])
	}
	return max(0, kl)
}

func logSoftmax(v []float32) []float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = max(m, float64(x))
	}
	var s float64
	for _, x := range v {
		s += math.Exp(float64(x) - m)
	}
	ls := m + math.Log(s)
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x) - ls
	}
	return out
}

// Thresholds are the limits a candidate must meet. Zero values are not checked, except as
// DefaultThresholds sets them.
type Thresholds struct {
	// MinCosine is the lowest acceptable cosine similarity of any output (e.g. 0.99).
	MinCosine float64 `mapstructure:"min_cosine" json:"min_cosine,omitempty"`
	// MaxAbsError is the largest acceptable |candidate - reference| of any element.
	MaxAbsError float64 `mapstructure:"max_abs_error" json:"max_abs_error,omitempty"`
	// MinTop1Agreement is the lowest acceptable share of samples whose top-1 class matches the
	// reference's (class-score outputs only).
	MinTop1Agreement float64 `mapstructure:"min_top1_agreement" json:"min_top1_agreement,omitempty"`
	// MaxAccuracyDrop is the largest acceptable top-1 accuracy loss against the labels, as a
	// fraction (0.005 = half a point). Needs labelled validation data.
	MaxAccuracyDrop float64 `mapstructure:"max_accuracy_drop" json:"max_accuracy_drop,omitempty"`
	// MaxKL is the largest acceptable mean KL divergence of the softmax outputs, in nats.
	MaxKL float64 `mapstructure:"max_kl" json:"max_kl,omitempty"`
}

// DefaultThresholds are the INT8 acceptance limits used when the config gives none.
func DefaultThresholds() Thresholds {
	return Thresholds{MinCosine: 0.99, MinTop1Agreement: 0.97, MaxAccuracyDrop: 0.01}
}

// Validate checks that every limit is in range, naming the key.
func (t Thresholds) Validate() error {
	var errs []string
	if t.MinCosine < 0 || t.MinCosine > 1 {
		errs = append(errs, fmt.Sprintf("min_cosine %g: use a value in [0, 1], e.g. 0.99", t.MinCosine))
	}
	if t.MaxAbsError < 0 {
		errs = append(errs, fmt.Sprintf("max_abs_error %g: must be >= 0 (0 = not checked)", t.MaxAbsError))
	}
	if t.MinTop1Agreement < 0 || t.MinTop1Agreement > 1 {
		errs = append(errs, fmt.Sprintf("min_top1_agreement %g: use a fraction in [0, 1], e.g. 0.98", t.MinTop1Agreement))
	}
	if t.MaxAccuracyDrop < 0 || t.MaxAccuracyDrop > 1 {
		errs = append(errs, fmt.Sprintf("max_accuracy_drop %g: use a fraction in [0, 1] (0.005 = half a point)", t.MaxAccuracyDrop))
	}
	if t.MaxKL < 0 {
		errs = append(errs, fmt.Sprintf("max_kl %g: must be >= 0 (0 = not checked)", t.MaxKL))
	}
	if len(errs) > 0 {
		return errors.New("validation thresholds: " + strings.Join(errs, "; "))
	}
	return nil
}

// Failure is one threshold a candidate missed.
type Failure struct {
	Metric string  `json:"metric"` // the threshold's config key, e.g. "min_cosine"
	Value  float64 `json:"value"`  // what the candidate measured
	Limit  float64 `json:"limit"`
	// Skipped is set when the metric could not be measured (e.g. no labels): not a failure of
	// the model, but the check did not run.
	Skipped bool `json:"skipped,omitempty"`
	// Reason says why a skipped check did not run, when the metric alone does not say it.
	Reason string `json:"reason,omitempty"`
}

func (f Failure) String() string {
	if f.Skipped {
		why := f.Reason
		if why == "" {
			why = skipReason(f.Metric)
		}
		return fmt.Sprintf("%s: not measured (limit %g): %s", f.Metric, f.Limit, why)
	}
	switch f.Metric {
	case "min_cosine", "min_top1_agreement":
		return fmt.Sprintf("%s: %.6g below the limit %g by %.3g", f.Metric, f.Value, f.Limit, f.Limit-f.Value)
	default:
		return fmt.Sprintf("%s: %.6g above the limit %g by %.3g", f.Metric, f.Value, f.Limit, f.Value-f.Limit)
	}
}

func skipReason(metric string) string {
	switch metric {
	case "max_accuracy_drop":
		return "the validation data have no labels"
	default:
		return "no output looks like class scores (N x classes)"
	}
}

// Check returns the thresholds r misses, worst first by relative margin; nil means it passes.
// A limit whose metric could not be measured is reported as Skipped and does not fail.
func (t Thresholds) Check(r *Result) (failed, skipped []Failure) {
	if t.MinCosine > 0 && r.Cosine < t.MinCosine {
		failed = append(failed, Failure{Metric: "min_cosine", Value: r.Cosine, Limit: t.MinCosine})
	}
	if t.MaxAbsError > 0 && r.MaxAbsError > t.MaxAbsError {
		failed = append(failed, Failure{Metric: "max_abs_error", Value: r.MaxAbsError, Limit: t.MaxAbsError})
	}
	if t.MinTop1Agreement > 0 {
		if r.Top1Tied > 0 && r.Top1Counted < MinDecidedSamples {
			skipped = append(skipped, Failure{Metric: "min_top1_agreement", Value: r.Top1Agreement, Limit: t.MinTop1Agreement, Skipped: true,
				Reason: fmt.Sprintf("only %d of %d samples have an FP32 top-1 class decided at float precision (%d ties), %d needed: give more validation samples", r.Top1Counted, r.Top1Counted+r.Top1Tied, r.Top1Tied, MinDecidedSamples)})
		} else if r.Top1Agreement < 0 {
			skipped = append(skipped, Failure{Metric: "min_top1_agreement", Limit: t.MinTop1Agreement, Skipped: true})
		} else if r.Top1Agreement < t.MinTop1Agreement {
			failed = append(failed, Failure{Metric: "min_top1_agreement", Value: r.Top1Agreement, Limit: t.MinTop1Agreement})
		}
	}
	if t.MaxAccuracyDrop > 0 {
		if r.AccuracyDrop < 0 && r.Top1 < 0 {
			skipped = append(skipped, Failure{Metric: "max_accuracy_drop", Limit: t.MaxAccuracyDrop, Skipped: true})
		} else if r.AccuracyDrop > t.MaxAccuracyDrop {
			failed = append(failed, Failure{Metric: "max_accuracy_drop", Value: r.AccuracyDrop, Limit: t.MaxAccuracyDrop})
		}
	}
	if t.MaxKL > 0 {
		if r.KLDivergence < 0 {
			skipped = append(skipped, Failure{Metric: "max_kl", Limit: t.MaxKL, Skipped: true})
		} else if r.KLDivergence > t.MaxKL {
			failed = append(failed, Failure{Metric: "max_kl", Value: r.KLDivergence, Limit: t.MaxKL})
		}
	}
	sort.SliceStable(failed, func(i, j int) bool { return margin(failed[i]) > margin(failed[j]) })
	return failed, skipped
}

func margin(f Failure) float64 {
	d := math.Abs(f.Value - f.Limit)
	if f.Limit != 0 {
		d /= math.Abs(f.Limit)
	}
	return d
}

// Passes reports whether r meets every measurable threshold.
func (t Thresholds) Passes(r *Result) bool {
	failed, _ := t.Check(r)
	return len(failed) == 0
}
