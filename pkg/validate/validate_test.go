package validate

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/calib"
	"github.com/torchspeed/torchspeed/pkg/npy"
)

func TestMain(m *testing.M) {
	if err := torch.SetNumThreads(1); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

func TestKLSoftmax(t *testing.T) {
	p := []float32{1, 2, 3}
	if kl := klSoftmax(p, p); kl != 0 {
		t.Errorf("KL(p||p) = %g", kl)
	}
	// Shifting logits does not change the softmax.
	if kl := klSoftmax(p, []float32{11, 12, 13}); kl > 1e-12 {
		t.Errorf("KL of shifted logits = %g", kl)
	}
	// By hand: softmax([0, log 3]) = [1/4, 3/4]; q uniform [1/2, 1/2].
	want := 0.25*math.Log(0.25/0.5) + 0.75*math.Log(0.75/0.5)
	if kl := klSoftmax([]float32{0, float32(math.Log(3))}, []float32{0, 0}); math.Abs(kl-want) > 1e-6 {
		t.Errorf("KL = %g, want %g", kl, want)
	}
}

func TestInTopK(t *testing.T) {
	v := []float32{0.1, 0.5, 0.3, 0.9, 0.2, 0.05, 0.4}
	tests := []struct {
		label int64
		k     int
		want  bool
	}{
		{3, 1, true}, {1, 1, false}, {1, 2, true}, {6, 3, true}, {2, 3, false}, {5, 5, false}, {0, 5, false}, {4, 5, true}, {9, 5, false}, {-1, 5, false},
	}
	for _, tc := range tests {
		if got := inTopK(v, tc.label, tc.k); got != tc.want {
			t.Errorf("inTopK(label %d, k %d) = %v, want %v", tc.label, tc.k, got, tc.want)
		}
	}
}

func TestThresholdsCheck(t *testing.T) {
	r := &Result{Cosine: 0.95, MaxAbsError: 0.5, Top1Agreement: 0.9, AccuracyDrop: 0.02, Top1: 0.9, KLDivergence: 0.01}
	tests := []struct {
		name    string
		th      Thresholds
		failed  []string
		skipped []string
	}{
		{"passes", Thresholds{MinCosine: 0.9, MaxAbsError: 1, MinTop1Agreement: 0.8, MaxAccuracyDrop: 0.05, MaxKL: 0.1}, nil, nil},
		{"cosine", Thresholds{MinCosine: 0.99}, []string{"min_cosine: 0.95 below the limit 0.99 by 0.04"}, nil},
		{"abs error", Thresholds{MaxAbsError: 0.25}, []string{"max_abs_error: 0.5 above the limit 0.25 by 0.25"}, nil},
		{"worst first", Thresholds{MinCosine: 0.96, MaxAccuracyDrop: 0.01}, []string{"max_accuracy_drop", "min_cosine"}, nil},
		{"kl", Thresholds{MaxKL: 0.001}, []string{"max_kl"}, nil},
	}
	for _, tc := range tests {
		failed, skipped := tc.th.Check(r)
		if len(failed) != len(tc.failed) || len(skipped) != len(tc.skipped) {
			t.Errorf("%s: failed %v skipped %v, want %v / %v", tc.name, failed, skipped, tc.failed, tc.skipped)
			continue
		}
		for i, w := range tc.failed {
			if !strings.Contains(failed[i].String(), w) {
				t.Errorf("%s: failure %d %q does not say %q", tc.name, i, failed[i], w)
			}
		}
	}
	// Without labels or class scores, the checks that need them are skipped, not failed.
	un := &Result{Cosine: 1, Top1Agreement: -1, AccuracyDrop: -1, Top1: -1, KLDivergence: -1}
	failed, skipped := DefaultThresholds().Check(un)
	if len(failed) != 0 || len(skipped) != 2 || !strings.Contains(skipped[1].String(), "no labels") {
		t.Errorf("unlabelled: failed %v skipped %v", failed, skipped)
	}
}

func TestThresholdsValidate(t *testing.T) {
	bad := []Thresholds{{MinCosine: 1.5}, {MaxAbsError: -1}, {MinTop1Agreement: 2}, {MaxAccuracyDrop: -0.1}, {MaxKL: -1}}
	keys := []string{"min_cosine", "max_abs_error", "min_top1_agreement", "max_accuracy_drop", "max_kl"}
	for i, th := range bad {
		if err := th.Validate(); err == nil || !strings.Contains(err.Error(), keys[i]) {
			t.Errorf("%+v: Validate() = %v, want an error naming %s", th, err, keys[i])
		}
	}
	if err := DefaultThresholds().Validate(); err != nil {
		t.Error(err)
	}
}

// TestCompareOnDigits: the model against itself is perfect and reproduces the fixture's
// accuracy; against a model with other weights it is not.
func TestCompareOnDigits(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "digits")
	m, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	labels, err := f.Array(t, *f.Eval.Labels).Int64s()
	if err != nil {
		t.Fatal(err)
	}
	data, err := FromArrays(f.Arrays(t, f.Eval.Inputs), labels, []string{"x"}, 64)
	if err != nil {
		t.Fatal(err)
	}
	if data.Len() != 8 { // 500 samples in batches of 64
		t.Errorf("%d batches, want 8", data.Len())
	}
	res, err := Compare(context.Background(), m, m, data)
	if err != nil {
		t.Fatal(err)
	}
	if res.Samples != 500 || res.Cosine != 1 || res.MaxAbsError != 0 || res.Top1Agreement != 1 || res.KLDivergence != 0 || res.AccuracyDrop != 0 {
		t.Errorf("self-comparison: %+v", res)
	}
	if math.Abs(res.RefTop1-f.Eval.Accuracy) > 1e-9 || res.Top5 < res.Top1 {
		t.Errorf("accuracy %.4f (top-5 %.4f), fixture says %.4f", res.Top1, res.Top5, f.Eval.Accuracy)
	}
	other, err := torch.Load(man.Get(t, "outlier").ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// The outlier fixture computes the same function (rescaled inside): FP32 agrees closely.
	res, err = Compare(context.Background(), m, other, data)
	if err != nil {
		t.Fatal(err)
	}
	if res.Cosine < 0.9999 || res.Top1Agreement < 0.998 {
		t.Errorf("digits vs outlier FP32: cosine %.6f agreement %.4f", res.Cosine, res.Top1Agreement)
	}
	t.Logf("digits vs outlier (FP32): cosine %.7f, max abs %.3g, mean abs %.3g, KL %.3g", res.Cosine, res.MaxAbsError, res.MeanAbsError, res.KLDivergence)
}

func TestFromArraysErrors(t *testing.T) {
	x := npy.FromFloat32([]int64{4, 2}, make([]float32, 8))
	y := npy.FromFloat32([]int64{3, 2}, make([]float32, 6))
	tests := []struct {
		name   string
		cols   []*npy.Array
		labels []int64
		batch  int
		want   string
	}{
		{"no inputs", nil, nil, 1, "no input arrays"},
		{"batch", []*npy.Array{x}, nil, 0, "batch size 0"},
		{"samples differ", []*npy.Array{x, y}, nil, 2, `input "b" has 3 samples, input "a" has 4`},
		{"labels", []*npy.Array{x}, []int64{1}, 2, "1 labels for 4 samples"},
		{"scalar", []*npy.Array{{Shape: nil, DType: "float32", Data: []float32{1}}}, nil, 1, "scalar"},
	}
	for _, tc := range tests {
		_, err := FromArrays(tc.cols, tc.labels, []string{"a", "b"}, tc.batch)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestFromDataset: data loaded by pkg/calib give the same comparison as the raw arrays.
func TestFromDataset(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "digits")
	m, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	d, err := calib.Open(calib.Source{Kind: calib.KindNPY, Path: f.Path(f.Eval.Inputs[0].File), Labels: f.Path(f.Eval.Labels.File), BatchSize: 50},
		[]calib.InputSpec{{Name: "x", Shape: []int64{-1, 1, 8, 8}, DType: "float32"}})
	if err != nil {
		t.Fatal(err)
	}
	data := FromDataset(d)
	if data.Len() != 10 {
		t.Fatalf("%d batches, want 10", data.Len())
	}
	res, err := Compare(context.Background(), m, m, data)
	if err != nil {
		t.Fatal(err)
	}
	if res.Samples != 500 || math.Abs(res.Top1-f.Eval.Accuracy) > 1e-9 {
		t.Fatalf("%d samples, accuracy %.4f; want 500 and %.4f", res.Samples, res.Top1, f.Eval.Accuracy)
	}
}
