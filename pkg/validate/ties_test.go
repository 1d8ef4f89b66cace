package validate

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

func TestTied(t *testing.T) {
	tests := []struct {
		name string
		v    []float32
		want bool
	}{
		{"exact tie", []float32{0.2, 0.5, 0.5, -0.1}, true},
		{"within float noise", []float32{0.4, 0.5, 0.5 - 0.5*TieTolerance*0.5, 0.1}, true},
		{"scale is the largest |score|", []float32{-2, 0.01, 0.01 - 1e-4}, true},
		{"decided", []float32{0.4, 0.5, 0.5 - 3*TieTolerance*0.5, 0.1}, false},
		{"mobilenet_v2's smallest margin", []float32{0.449187, 0.447874, 0.1}, false},
		{"all zero", []float32{0, 0, 0}, true},
		{"one class", []float32{1}, false},
		{"NaN", []float32{0.5, float32NaN(), 0.5}, false},
	}
	for _, tc := range tests {
		if got := Tied(tc.v); got != tc.want {
			t.Errorf("%s: Tied(%v) = %v, want %v", tc.name, tc.v, got, tc.want)
		}
	}
}

func float32NaN() float32 {
	var z float32
	return z / z
}

// A tie cannot decide the check: too few decided samples is "not measured", said with the
// counts; enough decided samples are judged on those alone, and a real shortfall fails.
func TestTop1TiesCheck(t *testing.T) {
	th := Thresholds{MinTop1Agreement: 0.6}
	few := &Result{Top1Agreement: 0.5, Top1Counted: 2, Top1Tied: 14, KLDivergence: 0.1, AccuracyDrop: -1, Top1: -1}
	failed, skipped := th.Check(few)
	if len(failed) != 0 || len(skipped) != 1 || !strings.Contains(skipped[0].String(), "only 2 of 16 samples") || !strings.Contains(skipped[0].String(), "14 ties") {
		t.Errorf("2 decided of 16: failed %v skipped %v; want skipped, naming the counts", failed, skipped)
	}
	allTied := &Result{Top1Agreement: -1, Top1Counted: 0, Top1Tied: 5, AccuracyDrop: -1, Top1: -1}
	if failed, skipped := th.Check(allTied); len(failed) != 0 || len(skipped) != 1 || !strings.Contains(skipped[0].String(), "only 0 of 5") {
		t.Errorf("all tied: failed %v skipped %v", failed, skipped)
	}
	enough := &Result{Top1Agreement: 0.5, Top1Counted: 12, Top1Tied: 4, AccuracyDrop: -1, Top1: -1}
	if failed, _ := th.Check(enough); len(failed) != 1 || failed[0].Metric != "min_top1_agreement" {
		t.Errorf("6 of 12 decided samples agree: failed %v; want min_top1_agreement to fail", failed)
	}
	// Without ties a small set is judged as before.
	small := &Result{Top1Agreement: 0.5, Top1Counted: 4, AccuracyDrop: -1, Top1: -1}
	if failed, _ := th.Check(small); len(failed) != 1 {
		t.Errorf("4 samples, no ties, 0.5 agreement: failed %v; want a failure", failed)
	}
}

// tieRunner runs the digits model through validate's Runner path. On the reference it makes
// every third sample's runner-up score equal to its top score (a tie); on the candidate it
// feeds every fifth sample (from the second) the next sample's image, so the candidate's
// top-1 there is another digit's: a real disagreement.
type tieRunner struct {
	Batches
	ref  *torch.Module
	next int // the sample index the next Run starts at
}

func (r *tieRunner) Start(*torch.Module) error { r.next = 0; return nil }

func (r *tieRunner) Run(m *torch.Module, b Batch) ([]torch.Output, error) {
	lo := r.next
	x, err := b.Inputs[0].Float32s()
	if err != nil {
		return nil, err
	}
	shape := b.Inputs[0].Shape()
	rows := int(shape[0])
	r.next += rows
	per := len(x) / rows
	if m != r.ref {
		for s := 0; s+1 < rows; s++ {
			if (lo+s)%5 == 1 {
				copy(x[s*per:(s+1)*per], x[(s+1)*per:(s+2)*per])
			}
		}
	}
	in, err := torch.NewTensor(x, shape)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	outs, err := m.Forward(in)
	if err != nil || m != r.ref {
		return outs, err
	}
	d, err := outs[0].Tensor.Float32s()
	if err != nil {
		torch.CloseOutputs(outs)
		return nil, err
	}
	oshape := outs[0].Tensor.Shape()
	c := int(oshape[1])
	for s := 0; s < rows; s++ {
		if (lo+s)%3 == 0 {
			v := d[s*c : (s+1)*c]
			top := Argmax(v)
			second := (top + 1) % c
			for j := range v {
				if j != top && v[j] > v[second] {
					second = j
				}
			}
			v[second] = v[top]
		}
	}
	torch.CloseOutputs(outs)
	t, err := torch.NewTensor(d, oshape)
	if err != nil {
		return nil, err
	}
	return []torch.Output{{Name: "0", Tensor: t}}, nil
}

// TestTop1TiesOnDigits: through RunReference and Compare on the digits model and its 500
// held-out images, reference ties are counted neither way, and the candidate's real
// disagreements are counted: the agreement equals the one worked out sample by sample.
func TestTop1TiesOnDigits(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	m, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	data, err := FromArrays(f.Arrays(t, f.Eval.Inputs), nil, []string{"x"}, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Each image's top-1 from the plain model: the candidate's answer on sample i is the
	// model's on the image it was fed.
	var top []int
	for i := 0; i < data.Len(); i++ {
		b, err := data.Batch(i)
		if err != nil {
			t.Fatal(err)
		}
		outs, err := m.Forward(b.Inputs...)
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
		d, _ := outs[0].Tensor.Float32s()
		c := int(outs[0].Tensor.Shape()[1])
		for s := 0; s < len(d)/c; s++ {
			if Tied(d[s*c : (s+1)*c]) {
				t.Fatalf("sample %d of the trained digits model is already a tie", len(top))
			}
			top = append(top, Argmax(d[s*c:(s+1)*c]))
		}
		torch.CloseOutputs(outs)
	}
	wantTied, wantCounted, wantAgree := 0, 0, 0
	for i := range top {
		if i%3 == 0 {
			wantTied++
			continue
		}
		wantCounted++
		fed := i
		if i%5 == 1 && i%64 != 63 && i+1 < len(top) { // the swap stays inside a batch of 64
			fed = i + 1
		}
		if top[fed] == top[i] {
			wantAgree++
		}
	}
	// The candidate is the same module object loaded again, so the runner can tell them apart.
	cand, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cand.Close()
	res, err := Compare(context.Background(), m, cand, &tieRunner{Batches: data, ref: m})
	if err != nil {
		t.Fatal(err)
	}
	want := float64(wantAgree) / float64(wantCounted)
	if res.Top1Tied != wantTied || res.Top1Counted != wantCounted || res.Top1Agreement != want {
		t.Errorf("tied %d counted %d agreement %.6f; want %d, %d, %.6f", res.Top1Tied, res.Top1Counted, res.Top1Agreement, wantTied, wantCounted, want)
	}
	if wantAgree == wantCounted {
		t.Fatal("the swapped images gave no disagreement: the test shows nothing")
	}
	t.Logf("500 samples: %d ties left out, %d counted, agreement %.4f (%d real disagreements)", res.Top1Tied, res.Top1Counted, res.Top1Agreement, wantCounted-wantAgree)
}

// TestTieToleranceCoversThreadNoise: the FP32 mobilenet_v2 fixture's logits move with the
// thread count (summation order) by well under TieTolerance of its largest |logit|, so a
// sample outside the tolerance cannot change its top-1 that way. Measured: 5.4e-6 relative.
func TestTieToleranceCoversThreadNoise(t *testing.T) {
	if torch.AvailableCPUs() < 2 {
		t.Skip("needs 2 CPUs")
	}
	f := fixtures.Load(t).Get(t, "mobilenet_v2")
	m, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x := f.InputArrays(t)[0]
	in, err := torch.NewTensorAny(x.Data, x.Shape)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	defer torch.SetNumThreads(1) //nolint:errcheck // TestMain's count for the other tests
	logits := func(threads int) []float32 {
		t.Helper()
		if err := torch.SetNumThreads(threads); err != nil {
			t.Fatal(err)
		}
		outs, err := m.Forward(in)
		if err != nil {
			t.Fatal(err)
		}
		defer torch.CloseOutputs(outs)
		d, err := outs[0].Tensor.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	one, two := logits(1), logits(2)
	var diff, scale float64
	for i := range one {
		diff = max(diff, math.Abs(float64(one[i])-float64(two[i])))
		scale = max(scale, math.Abs(float64(one[i])))
	}
	if diff == 0 {
		t.Log("the logits did not move between 1 and 2 threads on this machine")
	}
	if rel := diff / scale; rel > TieTolerance/4 {
		t.Errorf("FP32 logits moved by %.3g (%.3g of the largest |logit|) between 1 and 2 threads: TieTolerance %g leaves under 4x headroom", diff, rel, TieTolerance)
	} else {
		t.Logf("FP32 logits moved by %.3g between 1 and 2 threads: %.3g of the largest |logit| %.3g, %.0fx inside TieTolerance", diff, rel, scale, TieTolerance/max(rel, 1e-300))
	}
}
