package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/npy"
)

// Outputs that are NaN or infinite (an input of 2e37 overflows the digits model to -Inf and +Inf;
// a NaN pixel makes every output NaN) once made `run --json` fail with "json: unsupported
// value": it exits 0 with valid JSON, null where a figure is not a number.
func TestHostileRunJSONNonFinite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		name              string
		fill              float32
		nans              int
		minNull, meanNull bool
		finiteTopKEntries int // at least
	}{
		{"overflow to infinity", 2e37, 0, true, true, 0},
		{"NaN", float32(nan()), 10, true, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := filepath.Join(dir, c.name+".npy")
			d := make([]float32, 64)
			if c.nans > 0 {
				d[0] = c.fill
			} else {
				for i := range d {
					d[i] = c.fill
				}
			}
			if err := npy.WriteFile(x, npy.FromFloat32([]int64{1, 1, 8, 8}, d)); err != nil {
				t.Fatal(err)
			}
			stdout, stderr, code := cli(t, dir, nil, "run", "-m", filepath.Join(fixtureDir(t), "digits.pt"), "--input", x, "--topk", "10", "--json")
			expectExit(t, stderr, code, 0)
			var got struct {
				Outputs []struct {
					Min, Max, Mean *float64
					NaNs           int `json:"nans"`
					TopK           []struct{ Value *float64 }
				}
			}
			if err := json.Unmarshal([]byte(stdout), &got); err != nil || len(got.Outputs) != 1 {
				t.Fatalf("not the JSON of one output (%v):\n%s", err, stdout)
			}
			o := got.Outputs[0]
			if o.NaNs != c.nans || (o.Min == nil) != c.minNull || (o.Max == nil) != c.minNull || (o.Mean == nil) != c.meanNull {
				t.Errorf("nans %d, min %v, max %v, mean %v:\n%s", o.NaNs, o.Min, o.Max, o.Mean, stdout)
			}
			finite := 0
			for _, k := range o.TopK {
				if k.Value != nil {
					finite++
				}
			}
			if len(o.TopK) != 10 || finite < c.finiteTopKEntries || (c.nans > 0 && finite > 0) {
				t.Errorf("top-k %d entries, %d of them numbers:\n%s", len(o.TopK), finite, stdout)
			}
		})
	}
}

func nan() float64 { return math.NaN() }
