// Package pipeline is `torchspeed optimize`: ordered, individually switchable stages (load,
// eval, fold, freeze, optimize_for_inference, channels-last, quantize, validate, bench, save)
// that turn a TorchScript model into a faster artifact that still answers like the original,
// with a report of what each step bought, measured interleaved in one process.
package pipeline

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/calib"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/tserr"
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
	// Serve is the command that serves a model in a process of its own, speaking
	// benchrun.ServeRounds' protocol, before its flags (`torchspeed bench --serve`): the
	// runtime settings are measured in such processes (runtime.measure). nil: not measured.
	Serve []string
	// Stop, when set, lets the caller end the run while a model call holds it (see Stop).
	Stop *Stop

	// slow simulates a load change in one measurement (tests).
	slow slowRound
	// switchPrecision makes the precision check switch whatever it measured (tests).
	switchPrecision bool
	// servePrecision makes the quick search serve the other precision whatever margin the
	// decision was taken by (tests of the measured check, whose margin moves with the load).
	servePrecision bool
	// written hears the paths of every file a run committed (tests check them against the
	// documented schema).
	written func(paths []string)
}

// ValidationError means the result failed its accuracy thresholds: Run returns it with the
// report. It is of the class tserr.ErrAccuracy (errors.Is); errors.As finds the failures.
type ValidationError struct{ Failures []string }

func (e *ValidationError) Error() string {
	return "the optimized model failed validation: " + strings.Join(e.Failures, "; ")
}

// Is makes a validation failure match tserr.ErrAccuracy.
func (e *ValidationError) Is(target error) bool { return target == tserr.ErrAccuracy }

type run struct {
	ctx context.Context
	// confirmPair, if set, stands in for timing a variant alone against its base (tests).
	confirmPair func(base, v *candidate) (pairResult, error)
	cfg         *config.Config
	opts        Options
	rep         *report.Report
	call        *caller           // how the model is called: method, constants, state reset
	inputs      []*torch.Tensor   // bench inputs (batch as configured): the tensor arguments
	checks      [][]*torch.Tensor // input sets for output agreement, in call order
	ref         [][]float64       // the original's outputs on checks
	// stream: checks are the configured input data's ordered calls (model.inputs[].data),
	// which validation replays when no validation data is named.
	stream bool
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
	// fp32Threads is the thread choice measured on the best FP32 model (zero Stats: threads
	// were not chosen by measurement).
	fp32Threads bench.ThreadChoice
	// fp32Deferred: the quick search left FP32's thread choice until a decision needs it
	// (deferFP32Threads).
	fp32Deferred bool
	// runtime is the runtime setting measured fastest (zero: not measured).
	runtime runenv.Candidate
	// int8 is the INT8-or-FP32 decision, for recheckPrecision (nil: none was taken).
	int8 *int8Decision
	// deadline is when optimize.budget runs out (zero: no budget).
	deadline time.Time
	// defaults are the runtime step's latencies of the artifact and of the other precision's
	// model under libtorch's defaults, and of the control group (nil: not measured so): the
	// quick search's precision check takes them rather than timing the same thing again.
	defaults *sharedDefaults
	// fastSkip holds, by pass, why the quick search does not build that fast variant
	// (fastShares).
	fastSkip map[string]string
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
	if err := Preflight(cfg); err != nil {
		return nil, err
	}
	out, err := prepareOutput(cfg)
	if err != nil {
		return nil, err
	}
	opts.Stop.track(out)
	rep, err := r.steps(start, out)
	if err != nil && rep == nil {
		out.abandon()
	}
	return rep, err
}

// Preflight checks what the user gave that can be checked without the model: that its files
// are there and that this libtorch has the quantized engine it names. Errors are bad input
// (tserr.ErrBadInput) and come before any model work, not after minutes of timing FP32 candidates.
// Run calls it; commands call it before setting up the runtime.
func Preflight(cfg *config.Config) error {
	if err := cfg.CheckFiles(); err != nil {
		return tserr.BadInput(err)
	}
	if cfg.Quantize.Mode != "none" {
		if err := quant.CheckEngine(cfg.Quantize.Engine); err != nil {
			return tserr.BadInput(err)
		}
	}
	return nil
}

// steps runs the pipeline and writes its outputs. A nil report with an error means nothing
// was written.
func (r *run) steps(start time.Time, out *output) (*report.Report, error) {
	ctx := r.ctx
	steps := []struct {
		name string
		run  func() error
	}{
		{"load and check the original", func() error { return r.atStageThreads(r.load) }}, {"build FP32 candidates", func() error { return r.atStageThreads(r.fp32Stages) }},
		{"build fast_linear/fast_conv variants", r.fp32Fast}, {r.stagesStep(), func() error { return r.atStageThreads(r.measureStages) }}, {"choose threads", r.chooseThreads}, {"quantize, validate and time INT8", r.quantize},
		{"runtime settings", r.measureRuntime}, {"INT8 or FP32 where the artifact runs", r.recheckPrecision}, {"final benchmark", r.finalBench},
	}
	r.startSearch(start)
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("optimize interrupted: %w (nothing was written)", err)
		}
		t0 := time.Now()
		err := step.run()
		r.rep.StepTimes = append(r.rep.StepTimes, report.StepTime{Name: step.name, WallMs: msOf(time.Since(t0))})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("optimize interrupted: %w (nothing was written)", ctx.Err())
			}
			return nil, err
		}
	}
	final := r.best()
	took := time.Since(start)
	r.rep.WallMs = float64(took.Microseconds()) / 1000
	if b := r.cfg.Optimize.Budget; b > 0 && took > b {
		r.warn(fmt.Sprintf("optimize took %.0f s, over optimize.budget %s: the measurements fit the budget, but loading, building, calibrating and validating the model are not cut (the report's step times say where the time went)", took.Seconds(), b))
	}
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
	if err := torchspeed.LoadOpLibraries(cfg.Model.OpLibraries); err != nil {
		return tserr.BadInput(fmt.Errorf("model.op_libraries: %w", err))
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
	if r.call, err = newCaller(cfg, m); err != nil {
		return err
	}
	r.closes = append(r.closes, r.call.close)
	specs, ins := describeInputs(cfg)
	r.rep.Model = report.ModelInfo{Path: cfg.Model.Path, SHA256: sum, Bytes: size, Inputs: ins}
	if orig, err := bench.MeasureModelSize(cfg.Model.Path); err != nil {
		// libtorch loaded it: a directory archive/zip cannot read costs only this figure.
		r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("model size not measured: %v", err))
	} else {
		r.rep.Memory = &report.Memory{Original: orig}
	}
	if r.inputs, err = r.makeInputs(cfg.Bench.Seed); err != nil {
		return err
	}
	for i, in := range r.rep.Model.Inputs {
		if len(in.Shape) == 0 {
			r.rep.Model.Inputs[i].Shape, r.rep.Model.Inputs[i].DType = r.dataShape(in.Name, in.DType)
		}
	}
	if !r.stream {
		extra, seq, err := r.checkSets()
		if err != nil {
			return err
		}
		// A sequence replaces the random inputs as checks: a stateful model's state after
		// random inputs would not be the stream's.
		r.checks = append([][]*torch.Tensor{r.inputs}, extra...)
		if seq {
			r.checks = extra
		}
	}
	r.orig = &candidate{name: "original", kind: kindOriginal, mod: m, call: r.call, precision: "fp32", status: stBaseline, wall: time.Since(t0)}
	r.orig.nodes, _ = m.NodeCounts()
	r.rep.Model.Nodes = total(r.orig.nodes)
	r.orig.quantizedOps = quant.QuantizedOps(r.orig.nodes)
	if n := r.orig.nodes["prepacked::conv2d_clamp_run"] + r.orig.nodes["prepacked::linear_clamp_run"]; n > 0 {
		r.warn(fmt.Sprintf("model %q holds %s (torch.utils.mobile_optimizer.optimize_for_mobile made them): graph-mode INT8 quantization cannot see them, and XNNPACK ran 20-40x slower than libtorch's own kernels on x86; re-export the model without optimize_for_mobile (torch.jit.script or torch.jit.trace of the nn.Module, then torch.jit.save) for torchspeed to optimize it",
			cfg.Model.Path, report.Plural(n, "XNNPACK prepacked convolution/linear op")))
	}
	r.rep.Model.Precision = "fp32"
	if p := quant.InputPrecision(r.orig.quantizedOps); p != "" {
		// A model that arrives INT8 (PyTorch's eager or dynamic quantization) stays INT8 through
		// every FP32-style step (freeze, optimize_for_inference): its candidates, manifest and
		// report say so, and the INT8 passes are offered on it (int8Input).
		r.orig.precision, r.orig.engine = p, r.quantEngine(cfg.Quantize.Engine)
		r.rep.Model.Precision, r.rep.Model.QuantizedOps = p, r.orig.quantizedOps
		d := fmt.Sprintf("input model: already INT8 (%s: %s, quantized engine %s); torchspeed keeps its quantization and offers its INT8 passes (fast_qdq, fuse_conv_add)",
			p, report.Plural(total(r.orig.quantizedOps), "quantized operator"), r.orig.engine)
		r.rep.Decisions = append(r.rep.Decisions, d)
		r.logf("%s", d)
	}
	if r.ref, err = outputsOf(r.orig, r.checks); err != nil {
		return tserr.BadInput(fmt.Errorf("model %q rejects the configured inputs (model.inputs: %s): %w", cfg.Model.Path, strings.Join(specs, ", "), err))
	}
	if n := nonFiniteCount(r.ref); n > 0 {
		r.warn(fmt.Sprintf("the original model's outputs hold %d NaN or infinite value(s) on the check inputs: candidates are held to the same values at the same places, and those figures are written as null", n))
	}
	r.logf("loaded %s: %d graph nodes, inputs %s", cfg.Model.Path, r.rep.Model.Nodes, strings.Join(specs, ", "))
	if len(r.call.dropped) > 0 {
		r.warn(fmt.Sprintf("the artifact will not have method(s) %s of the original: model.preserve_methods (%s) leaves them out; add them there to keep them",
			strings.Join(r.call.dropped, ", "), strings.Join(cfg.Model.PreserveMethods, ", ")))
	}
	if r.call.stateful() {
		d := fmt.Sprintf("stateful: %s assigns %s between calls; %s resets it before every check, validation and calibration pass, timing and the save, and freezing keeps %s",
			r.call.method, strings.Join(r.call.state, ", "), r.call.reset, strings.Join(r.call.preserve, ", "))
		r.rep.Decisions = append(r.rep.Decisions, d)
		r.logf("%s", d)
	}
	return nil
}

// describeInputs is model.inputs in words for messages ("x float32[1 1 8 8]", "n int = 3") and
// the tensor inputs as the report lists them.
func describeInputs(cfg *config.Config) (specs []string, ins []report.InputSpec) {
	for _, in := range cfg.Model.Inputs {
		if !in.IsTensor() && in.Data != "" {
			specs = append(specs, fmt.Sprintf("%s %s from %s", in.Name, in.Type, in.Data))
			continue
		} else if !in.IsTensor() {
			specs = append(specs, fmt.Sprintf("%s %s = %v", in.Name, in.Type, in.Value))
			continue
		}
		specs = append(specs, fmt.Sprintf("%s %s%v", in.Name, in.DType, in.Shape))
		ins = append(ins, report.InputSpec{Name: in.Name, DType: in.DType, Shape: in.Shape})
	}
	return specs, ins
}

// maxStreamCalls caps the calls of a model.inputs sequence the checks replay.
const maxStreamCalls = 1000

// makeInputs builds the bench inputs (the tensor arguments of one call): the configured data
// (the first call of a sequence), else seeded random tensors with the configured shapes,
// dtypes and integer ranges (benchrun.RandomTensor, the one generator). A sequence also
// becomes the checks: its calls in order.
func (r *run) makeInputs(seed uint64) ([]*torch.Tensor, error) {
	data, seq, calls, err := r.inputData()
	if err != nil {
		return nil, err
	}
	rng := benchrun.NewRand(seed)
	var out []*torch.Tensor
	for k, in := range r.tensorInputs() {
		if data[k] != nil {
			t, err := r.tensorsOf([]*npy.Array{callOf(data[k], seq[k], 0)})
			if err != nil {
				return nil, fmt.Errorf("input %s: %w", in.Name, err)
			}
			out = append(out, t[0])
			continue
		}
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
	if calls == 0 {
		return out, nil
	}
	// The sequence's calls, in order, are the checks every candidate replays from a reset
	// state; inputs without a sequence repeat on every call. Every candidate replays them and
	// the original's outputs are kept: a long stream is cut to its first maxStreamCalls.
	if calls > maxStreamCalls {
		r.rep.Decisions = append(r.rep.Decisions, fmt.Sprintf("model.inputs data: the first %d of %d calls are replayed in the checks and validation", maxStreamCalls, calls))
		calls = maxStreamCalls
	}
	r.stream = true
	r.checks = [][]*torch.Tensor{out}
	for i := 1; i < calls; i++ {
		set := make([]*torch.Tensor, len(out))
		for k := range out {
			if !seq[k] {
				set[k] = out[k]
				continue
			}
			t, err := r.tensorsOf([]*npy.Array{callOf(data[k], true, i)})
			if err != nil {
				return nil, fmt.Errorf("input %s, call %d: %w", r.tensorInputs()[k].Name, i, err)
			}
			set[k] = t[0]
		}
		r.checks = append(r.checks, set)
	}
	return out, nil
}

// checkSets takes a few samples of the validation (or calibration) data, so FP32 stages are
// held to real inputs too, not only random ones; or, for a sequence (seq true), its calls in
// order (up to maxStreamCalls).
func (r *run) checkSets() (sets [][]*torch.Tensor, seq bool, err error) {
	src := r.validationSource()
	if src == nil {
		return nil, false, nil
	}
	s := *src
	s.Limit = 4
	s.BatchSize = 1
	if s.Sequence {
		// Replayed in order from a reset state: the first calls, up to maxStreamCalls.
		if s.Limit <= 0 || s.Limit > maxStreamCalls {
			s.Limit = maxStreamCalls
		}
	}
	specs, err := r.inputSpecs(s)
	if err != nil {
		return nil, false, err
	}
	ds, err := calib.Open(s, specs)
	if err != nil {
		return nil, false, fmt.Errorf("validation data: %w", err)
	}
	for b := range ds.Batches() {
		arrs := b.Inputs
		if s.Sequence {
			arrs = make([]*npy.Array, len(b.Inputs))
			for k, a := range b.Inputs {
				arrs[k] = &npy.Array{Shape: a.Shape[1:], DType: a.DType, Data: a.Data}
			}
		}
		set, err := r.tensorsOf(arrs)
		if err != nil {
			return nil, false, err
		}
		sets = append(sets, set)
	}
	return sets, s.Sequence, nil
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

// validationSource is the data to validate on: validation.data; else nil for a stream (the
// stream is replayed); else the calibration data.
func (r *run) validationSource() *calib.Source {
	v := r.cfg.Validation.Data
	if v.Path != "" || v.Kind != "" {
		return &v
	}
	if r.stream {
		// A stream's calls depend on the ones before them (state, context): shuffled or
		// batched calibration samples would check a different use than the model's.
		return nil
	}
	c := r.cfg.Calibration
	if c.Path != "" || c.Kind != "" {
		return &c
	}
	return nil
}

// inputSpecs are the tensor inputs as src's samples hold them: the input's shape with the
// batch dimension (0) as the sample axis, or for a sequence one whole call per sample. An
// input without a batch dimension 0 (batch_dim: none or another axis) can only come as a
// sequence.
func (r *run) inputSpecs(src calib.Source) ([]calib.InputSpec, error) {
	var specs []calib.InputSpec
	for _, in := range r.tensorInputs() {
		if src.Sequence {
			specs = append(specs, calib.InputSpec{Name: in.Name, Shape: append([]int64{-1}, in.Shape...), DType: in.DType})
			continue
		}
		if d, ok := in.Batch(); !ok || d != 0 {
			return nil, tserr.BadInput(fmt.Errorf("model.inputs %s has no batch dimension 0 (batch_dim: %s), so its data cannot be split into samples: give the data as an ordered sequence of calls (sequence: true)", in.Name, in.BatchDim))
		}
		if len(in.Shape) == 0 {
			return nil, tserr.BadInput(fmt.Errorf("model.inputs %s has no shape: give its shape to read calibration or validation data for it", in.Name))
		}
		shape := append([]int64{-1}, in.Shape[1:]...)
		specs = append(specs, calib.InputSpec{Name: in.Name, Shape: shape, DType: in.DType})
	}
	return specs, nil
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
		out = append(out, &npy.Array{Shape: t.Shape(), DType: r.tensorInputs()[i].DType, Data: d})
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
//
// Under optimize.budget the rounds become a maximum: the measurement stops after a third of the
// time left beyond the final benchmark's.
func (r *run) stageOptions(rounds int) bench.CompareOptions {
	return r.capped(bench.CompareOptions{
		Options: bench.Options{Runs: rounds, Warmup: max(2, rounds/10)},
		Order:   bench.Shuffled, Seed: r.cfg.Bench.Seed,
	}, 1.0/3)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
