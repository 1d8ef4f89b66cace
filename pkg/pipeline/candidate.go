package pipeline

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// state is where a candidate stands in the pipeline's decisions.
type state int

const (
	stCandidate  state = iota // built, outputs match, not yet decided
	stBaseline                // the original
	stKept                    // the chain's last kept step
	stSuperseded              // kept, then built upon by a later kept step
	stRejected                // measured or checked, not kept
	stSkipped                 // not built
	stFailed                  // building or running it failed
)

// String is the report's status word.
func (s state) String() string {
	switch s {
	case stBaseline:
		return report.StatusBaseline
	case stKept:
		return report.StatusKept
	case stSuperseded:
		return report.StatusSuperseded
	case stRejected:
		return report.StatusRejected
	case stSkipped:
		return report.StatusSkipped
	case stFailed:
		return report.StatusFailed
	}
	return "candidate"
}

// kind is which step made a candidate, so decisions never depend on display names.
type kind int

const (
	kindOriginal kind = iota
	kindFold
	kindFreeze
	kindOFI
	kindChannelsLast
	kindINT8
	kindINT8OFI  // INT8 + optimize_for_inference (int8ofi.go)
	kindINT8Fast // an INT8 candidate + fast_qdq (int8fast.go)
	kindFP32Fast // a frozen FP32 candidate + fast_linear (fp32fast.go)
	kindINT8Fuse // an INT8 candidate (or its fast_qdq variant) + fuse_conv_add (int8fuse.go)
	kindFP32Conv // a frozen FP32 candidate (or its fast_linear variant) + fast_conv (fp32fast.go)
	kindFP32BF16 // a fast_linear variant + linear_bf16: its GEMM in BF16 (linearbf16.go)
)

// candidate is one version of the model the pipeline may keep.
type candidate struct {
	name string
	kind kind
	mod  *torch.Module // what runs
	call *caller       // how it is called (method, constants, state reset); nil: forward
	// save is what goes into the archive when mod cannot be saved as is (the frozen module
	// under an optimize_for_inference one). nil: mod.
	save         *torch.Module
	passes       []string // load-time passes that turn save into mod
	channelsLast bool     // 4-D float inputs go in as channels-last
	steps        []string // steps applied, in order
	precision    string   // fp32, bf16 (linear_bf16), int8-static, int8-dynamic
	engine       string
	fp32Layers   []string
	wall         time.Duration
	nodes        map[string]int
	maxAbs       float64
	cosine       float64
	// valCosine is the validation cosine to FP32 of a candidate validated on its own
	// (fuse_conv_add's); 0 for the others.
	valCosine float64
	status    state
	reason    string
	// meas is the measurement this candidate's stage row takes its timings from (the one
	// its keep-or-reject decision was made on); nil: not timed.
	meas *measurement
	// base is the candidate a fast_linear, fast_conv or fuse_conv_add variant was built from (nil for the
	// others).
	base *candidate
	// quantizedOps counts the graph's quantized operators, by kind (quant.QuantizedOps).
	quantizedOps map[string]int
	// checkOuts are its outputs on every check input set (r.checks), kept from its own check
	// so that variants built on it compare against them without running it again (nil: not
	// run on all of them).
	checkOuts [][]float64
}

// outputsOnChecks is c's outputs on every check input set: kept ones, or run now.
func (r *run) outputsOnChecks(c *candidate) ([][]float64, error) {
	if c.checkOuts != nil {
		return c.checkOuts, nil
	}
	return outputsOf(c, r.checks)
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

// forward runs the candidate as Predict would: channels-last conversion included, constants
// and the configured method through its caller.
func (c *candidate) forward(in []*torch.Tensor) ([]torch.Output, error) {
	return c.forwardOn(in, false)
}

// forwardOn is forward, on the calling goroutine's thread with a one-thread team when one is
// set (as Predict runs a one-thread artifact: no hand-off to the inference thread).
func (c *candidate) forwardOn(in []*torch.Tensor, one bool) ([]torch.Output, error) {
	if !c.channelsLast {
		return c.call.callOn(c.mod, in, one)
	}
	conv, release, err := torchspeed.ChannelsLastInputs(in)
	if err != nil {
		return nil, err
	}
	defer release()
	return c.call.callOn(c.mod, conv, one)
}

// start begins a pass over ordered inputs: a stateful model is reset first.
func (c *candidate) start() error { return c.call.start(c.mod) }

// target adapts a candidate to pkg/bench: one Run is one inference on the bench inputs.
type target struct {
	ctx    context.Context
	name   string
	c      *candidate
	inputs []*torch.Tensor
	// delay, if set, is added to every run (tests: a simulated load change).
	delay time.Duration
	// onRun, if set, hears about every run (progress: the original runs once per round).
	onRun func()
	// oneThread runs each forward on the caller's thread with a one-thread team, as Predict
	// runs an artifact of one thread; otherwise on the shared inference thread, as Predict runs
	// one of more.
	oneThread bool
}

func (t *target) Name() string { return t.name }

func (t *target) Run() error {
	if err := t.ctx.Err(); err != nil {
		return err
	}
	if t.onRun != nil {
		t.onRun()
	}
	if t.delay > 0 {
		time.Sleep(t.delay)
	}
	outs, err := t.c.forwardOn(t.inputs, t.oneThread)
	if err != nil {
		return err
	}
	torch.CloseOutputs(outs)
	return nil
}

// outputsOf runs the candidate on each input set, in order from a reset state, and returns
// every output flattened, in a fixed order, as float64 (for comparisons).
func outputsOf(c *candidate, sets [][]*torch.Tensor) ([][]float64, error) {
	if err := c.start(); err != nil {
		return nil, err
	}
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

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// nonFiniteCount counts the NaN and infinite values in outputs.
func nonFiniteCount(outs [][]float64) int {
	n := 0
	for _, o := range outs {
		for _, v := range o {
			if !finite(v) {
				n++
			}
		}
	}
	return n
}

// cosineMeaningful: a cosine over 1-element outputs is only their signs' agreement.
func cosineMeaningful(outs [][]float64) bool {
	for _, o := range outs {
		if len(o) > 1 {
			return true
		}
	}
	return false
}
