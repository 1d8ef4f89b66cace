package pipeline

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// candidate is one version of the model the pipeline may keep.
type candidate struct {
	name string
	mod  *torch.Module // what runs
	// save is what goes into the archive when mod cannot be saved as is (the frozen module
	// under an optimize_for_inference one). nil: mod.
	save         *torch.Module
	passes       []string // load-time passes that turn save into mod
	channelsLast bool     // 4-D float inputs go in as channels-last
	steps        []string // steps applied, in order
	precision    string   // fp32, int8-static, int8-dynamic
	engine       string
	fp32Layers   []string
	wall         time.Duration
	nodes        map[string]int
	maxAbs       float64
	cosine       float64
	status       string
	reason       string
}

func (c *candidate) close() {
	if c == nil {
		return
	}
	if c.save != nil && c.save != c.mod {
		c.save.Close()
	}
	c.mod.Close()
}

// forward runs the candidate as Predict would: channels-last conversion included.
func (c *candidate) forward(in []*torch.Tensor) ([]torch.Output, error) {
	if !c.channelsLast {
		return c.mod.Forward(in...)
	}
	conv, release, err := torchspeed.ChannelsLastInputs(in)
	if err != nil {
		return nil, err
	}
	defer release()
	return c.mod.Forward(conv...)
}

// target adapts a candidate to pkg/bench: one Run is one inference on the bench inputs.
type target struct {
	ctx    context.Context
	name   string
	c      *candidate
	inputs []*torch.Tensor
}

func (t *target) Name() string { return t.name }

func (t *target) Run() error {
	if err := t.ctx.Err(); err != nil {
		return err
	}
	outs, err := t.c.forward(t.inputs)
	if err != nil {
		return err
	}
	torch.CloseOutputs(outs)
	return nil
}

// outputsOf runs the candidate on each input set and returns every output flattened, in a
// fixed order, as float64 (for comparisons).
func outputsOf(c *candidate, sets [][]*torch.Tensor) ([][]float64, error) {
	var all [][]float64
	for _, in := range sets {
		outs, err := c.forward(in)
		if err != nil {
			return nil, err
		}
		for _, o := range outs {
			v, err := o.Tensor.Float32s()
			if err != nil {
				torch.CloseOutputs(outs)
				return nil, fmt.Errorf("output %s: %w", o.Name, err)
			}
			f := make([]float64, len(v))
			for i, x := range v {
				f[i] = float64(x)
			}
			all = append(all, f)
		}
		torch.CloseOutputs(outs)
	}
	return all, nil
}

// agreement is the largest absolute difference and the smallest per-output cosine similarity
// between two output lists.
func agreement(ref, got [][]float64) (maxAbs, minCos float64, err error) {
	if len(ref) != len(got) {
		return 0, 0, fmt.Errorf("%d outputs, the original gives %d", len(got), len(ref))
	}
	minCos = 1
	for i := range ref {
		if len(ref[i]) != len(got[i]) {
			return 0, 0, fmt.Errorf("output %d has %d elements, the original's has %d", i, len(got[i]), len(ref[i]))
		}
		var dot, na, nb float64
		for j := range ref[i] {
			d := math.Abs(ref[i][j] - got[i][j])
			if math.IsNaN(d) {
				return math.Inf(1), 0, nil
			}
			maxAbs = max(maxAbs, d)
			dot += ref[i][j] * got[i][j]
			na += ref[i][j] * ref[i][j]
			nb += got[i][j] * got[i][j]
		}
		cos := 1.0
		if na > 0 || nb > 0 {
			cos = dot / (math.Sqrt(na)*math.Sqrt(nb) + 1e-30)
		}
		minCos = min(minCos, cos)
	}
	return maxAbs, minCos, nil
}
