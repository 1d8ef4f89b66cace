// Package pipeline is `torchspeed optimize`: ordered, individually switchable stages (load,
// eval, fold, freeze, optimize_for_inference, channels-last, quantize, validate, bench, save)
// that turn a TorchScript model into a faster artifact that still answers like the original,
// with a report of what each step bought, measured interleaved in one process.
package pipeline

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/calib"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// Options are how the caller wants to hear about the run.
type Options struct {
	// Log receives progress lines (stderr); nil: quiet.
	Log io.Writer
	// Threads is the intra-op thread count the runtime settings chose (0: libtorch's).
	Threads int
	// Settings are the runtime settings applied to this process, for the report.
	Settings map[string]string
	// Machine is the probe, for the report.
	Machine *cpu.Probe
	// AutoThreads lists thread counts to try when the config leaves threads to auto.
	AutoThreads []int
	// Progress, if set, hears about long stages: calibration (done of total samples) and each
	// interleaved measurement ("measuring: stages", "measuring: final", ...; done of total
	// rounds, warm-up included).
	Progress func(stage string, done, total int)
	// MKLDNNBroken, when set, says why libtorch's oneDNN kernels cannot be used on this
	// machine (internal/mkldnncheck, run in a child process): the optimize_for_inference candidates,
	// which run on them, are skipped with this reason instead of crashing the process.
	MKLDNNBroken string

	// slow simulates a load change in one measurement (tests).
	slow slowRound
	// written hears the paths of every file a run committed (tests check them against the
	// documented schema).
	written func(paths []string)
}

// ValidationError means the result failed its accuracy thresholds.
type ValidationError struct{ Failures []string }

func (e *ValidationError) Error() string {
	return "the optimized model failed validation: " + strings.Join(e.Failures, "; ")
}

// ExitCode makes a validation failure exit with 3.
func (e *ValidationError) ExitCode() int { return exitcode.Validation }

type run struct {
	ctx    context.Context
	cfg    *config.Config
	opts   Options
	rep    *report.Report
	inputs []*torch.Tensor   // bench inputs (batch as configured)
	checks [][]*torch.Tensor // input sets for output agreement
	ref    [][]float64       // the original's outputs on checks
	orig   *candidate
	cands  []*candidate
	closes []func()
	// unfrozen is the folded, not frozen module: what static quantization starts from.
	unfrozen      *torch.Module
	unfrozenSteps []string
	// measurements are every interleaved timing taken, in order; stageMeas is the FP32
	// stages' one and finalMeas the final benchmark's.
	measurements []*measurement
	stageMeas    *measurement
	finalMeas    *measurement
	threads      int
}

func (r *run) logf(format string, a ...any) {
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, format+"\n", a...)
	}
}

// Run optimizes cfg.Model and writes the artifact and reports into cfg.Output.Dir, all together
// or none (see output). Nothing is written unless the whole run succeeds, or fails only
// validation: then report.failed.json/.md are written and no artifact; a failed run leaves no
// folder it created. The input model is never modified.
func Run(ctx context.Context, cfg *config.Config, opts Options) (*report.Report, error) {
	start := time.Now()
	r := &run{ctx: ctx, cfg: cfg, opts: opts, rep: &report.Report{
		SchemaVersion: report.SchemaVersion, Torchspeed: version.Version, Libtorch: torch.Version(), Started: start, Config: cfg,
		Machine: opts.Machine,
	}}
	defer func() {
		for i := len(r.closes) - 1; i >= 0; i-- {
			r.closes[i]()
		}
	}()
	out, err := prepareOutput(cfg)
	if err != nil {
		return nil, err
	}
	rep, err := r.steps(start, out)
	if err != nil && rep == nil {
		out.abandon()
	}
	return rep, err
}

// steps runs the pipeline and writes its outputs. A nil report with an error means nothing
// was written.
func (r *run) steps(start time.Time, out *output) (*report.Report, error) {
	ctx := r.ctx
	steps := []func() error{r.load, r.fp32Stages, r.measureStages, r.chooseThreads, r.quantize, r.finalBench}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("optimize interrupted: %w (nothing was written)", err)
		}
		if err := step(); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("optimize interrupted: %w (nothing was written)", ctx.Err())
			}
			return nil, err
		}
	}
	final := r.best()
	r.rep.WallMs = float64(time.Since(start).Microseconds()) / 1000
	var verr *ValidationError
	if r.rep.Validation != nil && !r.rep.Validation.Passed {
		verr = &ValidationError{Failures: r.rep.Validation.Failures}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("optimize interrupted: %w (nothing was written)", err)
	}
	if err := out.write(r, final, verr == nil); err != nil {
		return nil, err
	}
	if verr != nil {
		return r.rep, verr
	}
	return r.rep, nil
}

// load reads the original, checks that it accepts the configured inputs, and records its
// outputs as the reference every later stage is held to.
func (r *run) load() error {
	cfg := r.cfg
	sum, size, err := safefile.SHA256(cfg.Model.Path)
	if err != nil {
		return fmt.Errorf("model.path: %w", err)
	}
	t0 := time.Now()
	m, err := torch.Load(cfg.Model.Path)
	if err != nil {
		return err
	}
	r.closes = append(r.closes, func() { m.Close() })
	if err := m.Eval(); err != nil {
		return err
	}
	if n := m.NumInputs(); n >= 0 && n < len(cfg.Model.Inputs) {
		return fmt.Errorf("model %q: forward takes %d input(s), the config lists %d (model.inputs): fix model.inputs", cfg.Model.Path, n, len(cfg.Model.Inputs))
	}
	var specs []string
	var ins []report.InputSpec
	for _, in := range cfg.Model.Inputs {
		specs = append(specs, fmt.Sprintf("%s %s%v", in.Name, in.DType, in.Shape))
		ins = append(ins, report.InputSpec{Name: in.Name, DType: in.DType, Shape: in.Shape})
	}
	r.rep.Model = report.ModelInfo{Path: cfg.Model.Path, SHA256: sum, Bytes: size, Inputs: ins}
	if r.inputs, err = r.makeInputs(cfg.Bench.Seed); err != nil {
		return err
	}
	r.checks = [][]*torch.Tensor{r.inputs}
	if extra, err := r.checkSets(); err != nil {
		return err
	} else {
		r.checks = append(r.checks, extra...)
	}
	r.orig = &candidate{name: "original", kind: kindOriginal, mod: m, precision: "fp32", status: stBaseline, wall: time.Since(t0)}
	r.orig.nodes, _ = m.NodeCounts()
	r.rep.Model.Nodes = total(r.orig.nodes)
	if r.ref, err = outputsOf(r.orig, r.checks); err != nil {
		return fmt.Errorf("model %q rejects the configured inputs (model.inputs: %s): %w", cfg.Model.Path, strings.Join(specs, ", "), err)
	}
	if n := nonFiniteCount(r.ref); n > 0 {
		r.warn(fmt.Sprintf("the original model's outputs hold %d NaN or infinite value(s) on the check inputs: candidates are held to the same values at the same places, and those figures are written as null", n))
	}
	r.logf("loaded %s: %d graph nodes, inputs %s", cfg.Model.Path, r.rep.Model.Nodes, strings.Join(specs, ", "))
	return nil
}

// makeInputs builds seeded random inputs with the configured shapes, dtypes and integer
// ranges (benchrun.RandomTensor, the one generator).
func (r *run) makeInputs(seed uint64) ([]*torch.Tensor, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	var out []*torch.Tensor
	for _, in := range r.cfg.Model.Inputs {
		dt, err := torch.ParseDType(in.DType)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		t, err := benchrun.RandomTensor(rng, in.Shape, dt, in.Range)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		r.closes = append(r.closes, func() { t.Close() })
		out = append(out, t)
	}
	return out, nil
}

// checkSets takes a few samples of the validation (or calibration) data, so FP32 stages are
// held to real inputs too, not only random ones.
func (r *run) checkSets() ([][]*torch.Tensor, error) {
	src := r.validationSource()
	if src == nil {
		return nil, nil
	}
	s := *src
	s.Limit = 4
	s.BatchSize = 1
	ds, err := calib.Open(s, r.inputSpecs())
	if err != nil {
		return nil, fmt.Errorf("validation data: %w", err)
	}
	var sets [][]*torch.Tensor
	for b := range ds.Batches() {
		set, err := r.tensorsOf(b.Inputs)
		if err != nil {
			return nil, err
		}
		sets = append(sets, set)
	}
	return sets, nil
}

func (r *run) tensorsOf(arrays []*npy.Array) ([]*torch.Tensor, error) {
	var set []*torch.Tensor
	for _, a := range arrays {
		t, err := torch.NewTensorAny(a.Data, a.Shape)
		if err != nil {
			return nil, err
		}
		r.closes = append(r.closes, func() { t.Close() })
		set = append(set, t)
	}
	return set, nil
}

// validationSource is the data to validate on: validation.data, else the calibration data.
func (r *run) validationSource() *calib.Source {
	v := r.cfg.Validation.Data
	if v.Path != "" || v.Kind != "" {
		return &v
	}
	c := r.cfg.Calibration
	if c.Path != "" || c.Kind != "" {
		return &c
	}
	return nil
}

func (r *run) inputSpecs() []calib.InputSpec {
	var specs []calib.InputSpec
	for _, in := range r.cfg.Model.Inputs {
		shape := append([]int64{-1}, in.Shape[1:]...)
		specs = append(specs, calib.InputSpec{Name: in.Name, Shape: shape, DType: in.DType})
	}
	return specs
}

func total(counts map[string]int) int {
	n := 0
	for _, v := range counts {
		n += v
	}
	return n
}

// inputArrays copies the bench inputs into arrays, as validation data of last resort.
func (r *run) inputArrays() ([]*npy.Array, error) {
	var out []*npy.Array
	for i, t := range r.inputs {
		d, err := torch.DataAny(t)
		if err != nil {
			return nil, err
		}
		out = append(out, &npy.Array{Shape: t.Shape(), DType: r.cfg.Model.Inputs[i].DType, Data: d})
	}
	return out, nil
}

// best is the fastest kept candidate (the last one kept, since each is kept only if faster).
func (r *run) best() *candidate {
	b := r.orig
	for _, c := range r.cands {
		if c.status == stKept {
			b = c
		}
	}
	return b
}

// stageOptions is the short measurement of all candidates: every candidate runs once per
// round, in a shuffled order, since a fixed order measured a small model 12-20% slow when it
// always ran right after an oneDNN candidate (caches), and 1-2% with shuffled rounds.
func (r *run) stageOptions(rounds int) bench.CompareOptions {
	return bench.CompareOptions{
		Options: bench.Options{Runs: rounds, Warmup: max(2, rounds/10)},
		Order:   bench.Shuffled, Seed: r.cfg.Bench.Seed,
	}
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
