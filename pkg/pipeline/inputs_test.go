package pipeline

import (
	"slices"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/config"
)

// optimize's random inputs honour the configured integer ranges (token ids below a vocabulary
// size) and dtypes, and the same seed gives the same values.
func TestMakeInputsRanges(t *testing.T) {
	cfg := &config.Config{}
	cfg.Model.Inputs = []config.Input{
		{Name: "tokens", Shape: []int64{1, 300}, DType: "int64", Range: []int64{5, 8}},
		{Name: "mask", Shape: []int64{1, 300}, DType: "int32", Range: []int64{0, 2}},
		{Name: "x", Shape: []int64{2, 3}, DType: "float32"},
	}
	draw := func() ([]int64, []int32, []float32) {
		r := &run{cfg: cfg, call: &caller{method: "forward", tensors: cfg.Model.Inputs}}
		defer func() {
			for _, c := range r.closes {
				c()
			}
		}()
		ins, err := r.makeInputs(7)
		if err != nil {
			t.Fatal(err)
		}
		tok, err1 := torch.Data[int64](ins[0])
		mask, err2 := torch.Data[int32](ins[1])
		x, err3 := torch.Data[float32](ins[2])
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatal(err1, err2, err3)
		}
		return slices.Clone(tok), slices.Clone(mask), slices.Clone(x)
	}
	tok, mask, x := draw()
	if slices.Min(tok) != 5 || slices.Max(tok) != 7 {
		t.Errorf("tokens in [5, 8): min %d max %d", slices.Min(tok), slices.Max(tok))
	}
	if slices.Min(mask) != 0 || slices.Max(mask) != 1 {
		t.Errorf("mask in [0, 2): min %d max %d", slices.Min(mask), slices.Max(mask))
	}
	if len(x) != 6 {
		t.Errorf("x has %d values, want 6", len(x))
	}
	tok2, mask2, x2 := draw()
	if !slices.Equal(tok, tok2) || !slices.Equal(mask, mask2) || !slices.Equal(x, x2) {
		t.Error("the same seed gave different inputs")
	}
}
