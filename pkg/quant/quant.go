// Package quant turns a TorchScript model INT8 without Python: static post-training
// quantization (calibrated on real data) or dynamic quantization, through the shim's
// graph-mode passes (bindings/torch QuantPrepare/QuantConvert/QuantDynamic). It picks the
// quantized engine for this CPU, checks calibration data before use, measures each layer's
// share of the quantization error, keeps the most sensitive layers in FP32 until the
// validation thresholds pass (QuantizeChecked), and decides whether INT8 is worth it on this
// machine at all (DecideINT8).
package quant

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/cpuid/v2"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// Modes.
const (
	ModeStatic  = "static"
	ModeDynamic = "dynamic"
)

// Options configure one quantization. Zero values are replaced by DefaultOptions' values
// (except PerChannel, which DefaultOptions sets to true).
type Options struct {
	// Mode is "static" (calibrated activations, for CNNs) or "dynamic" (INT8 weights,
	// activations quantized at run time, for Linear-heavy transformer and recurrent models).
	Mode string `mapstructure:"mode"`
	// Engine is "auto", "x86", "fbgemm", "onednn" or "qnnpack". auto picks the best this
	// libtorch supports for this CPU and never qnnpack on x86.
	Engine string `mapstructure:"engine"`
	// Observer is the activation observer: "minmax", "moving_average", "histogram" or
	// "percentile" (static mode).
	Observer string `mapstructure:"observer"`
	// Percentile is the clipping percentile of the percentile observer (default 99.99).
	Percentile float64 `mapstructure:"percentile"`
	// AveragingConstant is the moving-average observer's constant (default 0.01).
	AveragingConstant float64 `mapstructure:"averaging_constant"`
	// PerChannel quantizes weights per output channel (symmetric qint8); false: per tensor.
	PerChannel bool `mapstructure:"per_channel"`
	// ReduceRange is "auto", "true" or "false": 7-bit activations, which the x86, fbgemm and
	// onednn kernels need on CPUs without VNNI to avoid int16 saturation. auto decides from
	// engine and CPU (ResolveReduceRange).
	ReduceRange string `mapstructure:"reduce_range"`
	// Skip lists submodule paths kept in FP32 (e.g. ["fc1", "layer4.1.conv2"]).
	Skip []string `mapstructure:"skip"`
	// CalibrationSamples caps the samples used for calibration (0: all batches).
	CalibrationSamples int `mapstructure:"calibration_samples"`
	// CalibrationThreads, if > 0, is the intra-op thread count the calibration passes run at
	// (the count in force is set back before converting, so the INT8 model first runs at the
	// caller's count). The observers' ranges come from FP32 arithmetic whose summation order
	// follows the thread count; a range one float step apart moves roundings inside the INT8
	// model, which then answers differently: mobilenet_v2 calibrated at 1 and at 2 threads
	// gave INT8 logits up to 0.03 apart (7 output steps) and another top-1 on 2 of 16 inputs.
	// A fixed count makes the INT8 model the same whatever count the caller runs at.
	CalibrationThreads int `mapstructure:"-" json:"-"`
	// Preserve names methods the quantized model must keep (finalizing freezes it): a
	// stateful model's reset method, other exported methods.
	Preserve []string `mapstructure:"-" json:"-"`

	// Progress, if set, is called after each calibration batch with samples done and the
	// planned total.
	Progress func(done, total int) `mapstructure:"-" json:"-"`
	// VNNI overrides ExactU8S8 (whether the CPU has an exact u8 x s8 dot product, VNNI on
	// x86) for reduce_range auto (tests); nil: detect.
	VNNI *bool `mapstructure:"-" json:"-"`
}

// DefaultOptions is static quantization with the config's quantize defaults (pkg/config is
// the one source of them: engine and reduce range chosen for this machine, histogram
// observer, per-channel weights).
func DefaultOptions() Options {
	d := config.Default().Quantize
	return Options{Mode: ModeStatic, Engine: d.Engine, Observer: d.Observer, Percentile: d.Percentile,
		AveragingConstant: 0.01, PerChannel: d.PerChannel, ReduceRange: string(d.ReduceRange)}
}

func (o *Options) fill() {
	d := DefaultOptions()
	if o.Mode == "" {
		o.Mode = d.Mode
	}
	if o.Engine == "" {
		o.Engine = d.Engine
	}
	if o.Observer == "" {
		o.Observer = d.Observer
	}
	if o.Percentile == 0 {
		o.Percentile = d.Percentile
	}
	if o.AveragingConstant == 0 {
		o.AveragingConstant = d.AveragingConstant
	}
	if o.ReduceRange == "" {
		o.ReduceRange = d.ReduceRange
	}
}

// Validate checks the options, naming the key, the bad value and what is allowed. The keys
// the options share with the config's quantize section are checked by config.Quantize's
// Validate; the rest here.
func (o Options) Validate() error {
	o.fill()
	errs := []error{config.Quantize{Mode: o.Mode, Engine: o.Engine, Observer: o.Observer, Percentile: o.Percentile,
		ReduceRange: config.Toggle(o.ReduceRange)}.Validate()}
	if o.Mode == "none" || o.Mode == "auto" {
		// Valid in a config, where they are decided before quantizing; not here.
		errs = append(errs, fmt.Errorf("quantize.mode: %s is not allowed here: static or dynamic", o.Mode))
	}
	if !(o.AveragingConstant > 0 && o.AveragingConstant <= 1) {
		errs = append(errs, fmt.Errorf("quantize.averaging_constant: %g is not allowed: a value in (0, 1], e.g. 0.01", o.AveragingConstant))
	}
	if o.CalibrationSamples < 0 {
		errs = append(errs, fmt.Errorf("quantize.calibration_samples: %d is not allowed: 0 (all) or more", o.CalibrationSamples))
	}
	for _, s := range o.Skip {
		if strings.TrimSpace(s) == "" {
			errs = append(errs, errors.New("quantize.skip: empty module path"))
		}
	}
	return errors.Join(errs...)
}

// enginePreference is the order auto tries on x86: x86 (fbgemm + onednn dispatch, official
// 2.x builds), fbgemm, onednn (Debian's 1.13 build). qnnpack is for ARM; on x86 it measured
// 4-5x slower than onednn, so auto never picks it there.
var enginePreference = []string{"x86", "fbgemm", "onednn"}

// ResolveEngine picks the quantized engine: want unless it is "auto" (then the best of
// supported for arch). It fails when want is not supported, or when auto finds only engines
// that would make INT8 slow.
func ResolveEngine(want string, supported []string, arch string) (string, error) {
	if want != "" && want != "auto" {
		if !slices.Contains(supported, want) {
			return "", fmt.Errorf("quantize.engine %q is not supported by this libtorch build (supported: %s): set quantize.engine (--engine) to auto or one of those", want, strings.Join(supported, ", "))
		}
		return want, nil
	}
	if arch == "amd64" || arch == "386" {
		for _, e := range enginePreference {
			if slices.Contains(supported, e) {
				return e, nil
			}
		}
		if slices.Contains(supported, "qnnpack") {
			return "", errors.New("quantize.engine auto: this libtorch offers only qnnpack, which runs 4-5x slower than onednn/fbgemm on x86; set quantize.engine: qnnpack to use it anyway, or use a libtorch with fbgemm/onednn")
		}
	} else {
		for _, e := range []string{"qnnpack", "onednn", "x86", "fbgemm"} {
			if slices.Contains(supported, e) {
				return e, nil
			}
		}
	}
	return "", fmt.Errorf("quantize.engine auto: this libtorch has no quantized engine (supported: %q)", supported)
}

// ResolveReduceRange decides reduce_range: explicit "true"/"false" win; auto uses 7-bit
// activations wherever the engine's kernels would saturate on this CPU. exact says whether the
// CPU sums u8 x s8 products exactly (see ExactU8S8). Without VNNI, the x86 INT8 kernels of
// fbgemm and of oneDNN (the onednn engine, and x86, which dispatches to both) add each pair of
// u8 x s8 products into int16 with saturation (vpmaddubsw); 255*127*2 overflows it, 127*128*2
// does not. Measured on Zen 3 (AVX2): libtorch's onednn conv/linear outputs were up to 108
// quantization steps from exact math and matched a pairwise-saturating model to one step;
// dynamic LSTM/GRU cosine vs FP32 fell to 0.987/0.963 (0.99998/0.99977 with 7 bits).
// qnnpack widens to int16 before multiplying and keeps the full range.
func ResolveReduceRange(setting, engine string, exact bool) bool {
	switch setting {
	case "true":
		return true
	case "false":
		return false
	}
	return (engine == "x86" || engine == "fbgemm" || engine == "onednn") && !exact
}

// ExactU8S8 reports whether this CPU's INT8 kernels sum u8 x s8 products without int16
// saturation: on x86 only with AVX512-VNNI or AVX-VNNI (vpdpbusd; AMX CPUs have them too) that
// ONEDNN_MAX_CPU_ISA leaves oneDNN to use (cpu.ExactU8S8); other architectures' engines do not
// use vpmaddubsw.
func ExactU8S8() bool {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "386" {
		return true
	}
	return cpu.ExactU8S8(cpu.ISA{AVX512VNNI: cpuid.CPU.Supports(cpuid.AVX512VNNI), AVXVNNI: cpuid.CPU.Supports(cpuid.AVXVNNI)}, os.LookupEnv)
}

// Config is the shim configuration these options describe (after engine resolution).
func (o Options) Config(engine string) torch.QuantConfig {
	o.fill()
	exact := ExactU8S8()
	if o.VNNI != nil {
		exact = *o.VNNI
	}
	rr := ResolveReduceRange(o.ReduceRange, engine, exact)
	var c torch.QuantConfig
	if o.Mode == ModeDynamic {
		// Only the LSTM/GRU cells read reduce_range here: libtorch's dynamic graph pass
		// hard-codes reduce_range=true in every quantized::linear_dynamic it inserts (as
		// quantize_dynamic_jit's graphs show), whatever the observer says.
		c.Activation = torch.ObserverConfig{Observer: torch.ObserverPlaceholder, ReduceRange: rr}
	} else {
		c.Activation = torch.ObserverConfig{Observer: o.Observer, ReduceRange: rr}
		switch o.Observer {
		case torch.ObserverPercentile:
			c.Activation.Percentile = o.Percentile
		case torch.ObserverMovingAverage:
			c.Activation.AveragingConstant = o.AveragingConstant
		}
	}
	if o.PerChannel {
		c.Weight = torch.ObserverConfig{Observer: torch.ObserverPerChannelMinMax}
	} else {
		c.Weight = torch.ObserverConfig{Observer: torch.ObserverMinMax, DType: "qint8", QScheme: "per_tensor_symmetric"}
	}
	if len(o.Skip) > 0 {
		c.Modules = map[string]*torch.QConfig{}
		for _, s := range o.Skip {
			c.Modules[s] = nil
		}
	}
	return c
}

// Outcome says how a model was quantized and, after QuantizeChecked, how it validated.
type Outcome struct {
	Mode        string   `json:"mode"`
	Engine      string   `json:"engine"`
	ReduceRange bool     `json:"reduce_range"`
	Activation  string   `json:"activation,omitempty"`
	Weight      string   `json:"weight"`
	FP32Layers  []string `json:"fp32_layers,omitempty"` // kept in FP32 (skip + fallback)
	// QuantizedOps counts the quantized operators in the result's graph, by kind (QuantizedOps).
	QuantizedOps       map[string]int `json:"quantized_ops"`
	CalibrationSamples int            `json:"calibration_samples,omitempty"`
	CalibrationBatches int            `json:"calibration_batches,omitempty"`
	Duration           time.Duration  `json:"duration_ns"`
	// Validation is the chosen model's comparison with FP32 (QuantizeChecked only).
	Validation *validate.Result `json:"validation,omitempty"`
	// Failures are the thresholds the chosen model missed (empty when it passed).
	Failures []validate.Failure `json:"failures,omitempty"`
	// Unchecked are thresholds that could not be measured on the validation data.
	Unchecked []validate.Failure `json:"unchecked,omitempty"`
	// Sensitivity is the per-layer table, most sensitive first (when it was measured).
	Sensitivity []LayerSensitivity `json:"sensitivity,omitempty"`
	// Attempts lists every configuration tried, in order.
	Attempts []Attempt `json:"attempts,omitempty"`
	Warnings []string  `json:"warnings,omitempty"`
	// Unchanged are the layers the fallback tried in FP32 whose exclusion left the quantized
	// graph as it was (QuantizeChecked); they are not in FP32Layers.
	Unchanged []string `json:"unchanged_layers,omitempty"`
}

// CheckEngine resolves want (a quantize.engine value) against this libtorch's engines, as
// Quantize will: callers run it before any model work, so an engine the build lacks is
// reported at once rather than after the FP32 candidates are timed.
func CheckEngine(want string) error {
	engines, err := torch.SupportedQEngines()
	if err != nil {
		return err
	}
	_, err = ResolveEngine(want, engines, runtime.GOARCH)
	return err
}

// Quantize returns the INT8 version of m. Static mode calibrates on data (every batch, or
// CalibrationSamples); dynamic mode ignores data. m is not modified. The engine is set
// process-wide (set it again with torch.SetQEngine before loading the saved model elsewhere).
func Quantize(ctx context.Context, m *torch.Module, data validate.Batches, opts Options) (*torch.Module, *Outcome, error) {
	if err := opts.Validate(); err != nil {
		return nil, nil, err
	}
	opts.fill()
	start := time.Now()
	engines, err := torch.SupportedQEngines()
	if err != nil {
		return nil, nil, err
	}
	engine, err := ResolveEngine(opts.Engine, engines, runtime.GOARCH)
	if err != nil {
		return nil, nil, err
	}
	cfg := opts.Config(engine)
	rep := &Outcome{Mode: opts.Mode, Engine: engine, ReduceRange: cfg.Activation.ReduceRange,
		FP32Layers: slices.Clone(opts.Skip)}
	if opts.PerChannel {
		rep.Weight = "per_channel_symmetric qint8"
	} else {
		rep.Weight = "per_tensor_symmetric qint8"
	}
	var q *torch.Module
	if opts.Mode == ModeDynamic {
		q, err = m.QuantDynamic(cfg, engine, opts.Preserve...)
		if err != nil {
			return nil, nil, fmt.Errorf("quantize %q (dynamic): %w", m.Name(), err)
		}
	} else {
		rep.Activation = opts.Observer
		if opts.Observer == torch.ObserverPercentile {
			rep.Activation = fmt.Sprintf("percentile %g", opts.Percentile)
		}
		q, err = quantizeStatic(ctx, m, data, opts, cfg, engine, rep)
		if err != nil {
			return nil, nil, err
		}
	}
	counts, err := q.NodeCounts()
	if err != nil {
		q.Close()
		return nil, nil, err
	}
	rep.QuantizedOps = QuantizedOps(counts)
	if len(rep.QuantizedOps) == 0 {
		rep.Warnings = append(rep.Warnings, "no layer was quantized: the model has no Conv/Linear the graph-mode passes recognize (or all are skipped)")
	}
	rep.Duration = time.Since(start)
	return q, rep, nil
}

// signature is an input's dtype and per-sample shape, to check batches agree.
func signature(ts []*torch.Tensor) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		s := t.Shape()
		if len(s) > 0 {
			s = s[1:]
		}
		parts[i] = fmt.Sprintf("%s%v", t.DType(), s)
	}
	return strings.Join(parts, ", ")
}

// checkFinite fails on NaN/Inf in a calibration batch: an observer fed one NaN gives NaN
// scales and a model that answers garbage.
func checkFinite(b validate.Batch, i int) error {
	for k, t := range b.Inputs {
		dt := t.DType()
		if dt != torch.Float32 && dt != torch.Float64 {
			continue
		}
		v, err := t.Float32s()
		if err != nil {
			return err
		}
		bad, first := 0, -1
		for j, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				if first < 0 {
					first = j
				}
				bad++
			}
		}
		if bad > 0 {
			per := max(1, len(v)/max(1, int(t.Shape()[0])))
			return fmt.Errorf("calibration batch %d, input %d: %d NaN/Inf values (first in sample %d of the batch): clean the calibration data", i, k, bad, first/per)
		}
	}
	return nil
}

func quantizeStatic(ctx context.Context, m *torch.Module, data validate.Batches, opts Options, cfg torch.QuantConfig, engine string, rep *Outcome) (*torch.Module, error) {
	if data == nil || data.Len() == 0 {
		return nil, errors.New("quantize: static quantization needs calibration data (quantize.calibration in the config), or use mode dynamic")
	}
	// Check every batch before the model is touched: consistent shapes and dtypes, finite
	// values, and that the first batch fits the FP32 model.
	var want string
	plan := 0
	nb := 0
	for i := 0; i < data.Len(); i++ {
		if opts.CalibrationSamples > 0 && plan >= opts.CalibrationSamples {
			break
		}
		b, err := data.Batch(i)
		if err != nil {
			return nil, fmt.Errorf("quantize: calibration batch %d: %w", i, err)
		}
		sig := signature(b.Inputs)
		if len(b.Inputs) == 0 {
			b.Close()
			return nil, fmt.Errorf("quantize: calibration batch %d has no inputs", i)
		}
		n := int(b.Inputs[0].Shape()[0])
		if err := checkFinite(b, i); err != nil {
			b.Close()
			return nil, fmt.Errorf("quantize: %w", err)
		}
		if i == 0 {
			want = sig
			if err := validate.Start(m, data); err != nil {
				b.Close()
				return nil, fmt.Errorf("quantize: %w", err)
			}
			outs, err := validate.Forward(m, data, b)
			if err != nil {
				b.Close()
				return nil, fmt.Errorf("quantize: calibration data (%s per sample) do not fit model %q: %w", sig, m.Name(), err)
			}
			torch.CloseOutputs(outs)
		} else if sig != want {
			b.Close()
			return nil, fmt.Errorf("quantize: calibration batch %d holds %s per sample, batch 0 %s: every batch must have the same dtypes and sample shapes", i, sig, want)
		}
		b.Close()
		plan += n
		nb++
	}
	if opts.CalibrationSamples > 0 {
		plan = min(plan, opts.CalibrationSamples)
	}
	observed, err := m.QuantPrepare(cfg)
	if err != nil {
		return nil, fmt.Errorf("quantize %q: prepare: %w", m.Name(), err)
	}
	defer observed.Close()
	done, err := calibrate(ctx, m.Name(), observed, data, nb, plan, opts)
	if err != nil {
		return nil, err
	}
	rep.CalibrationSamples, rep.CalibrationBatches = done, nb
	q, err := observed.QuantConvert(engine, opts.Preserve...)
	if err != nil {
		return nil, fmt.Errorf("quantize %q: convert: %w", m.Name(), err)
	}
	return q, nil
}

// calibrate runs the observed model over the first nb batches of data, at
// opts.CalibrationThreads threads when set, and returns the samples it saw.
func calibrate(ctx context.Context, name string, observed *torch.Module, data validate.Batches, nb, plan int, opts Options) (done int, err error) {
	if n := opts.CalibrationThreads; n > 0 {
		if prev := torch.NumThreads(); prev != n {
			if err := torch.SetNumThreads(n); err != nil {
				return 0, fmt.Errorf("quantize: calibration threads: %w", err)
			}
			defer func() {
				if e := torch.SetNumThreads(prev); e != nil && err == nil {
					err = fmt.Errorf("quantize: thread count back to %d after calibration: %w", prev, e)
				}
			}()
		}
	}
	if err := validate.Start(observed, data); err != nil {
		return 0, fmt.Errorf("quantize: %w", err)
	}
	for i := 0; i < nb; i++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		b, err := data.Batch(i)
		if err != nil {
			return 0, fmt.Errorf("quantize: calibration batch %d: %w", i, err)
		}
		n := int(b.Inputs[0].Shape()[0])
		outs, err := validate.Forward(observed, data, b)
		b.Close()
		if err != nil {
			return 0, fmt.Errorf("quantize %q: calibration batch %d: %w", name, i, err)
		}
		torch.CloseOutputs(outs)
		done += n
		if opts.Progress != nil {
			opts.Progress(min(done, plan), plan)
		}
	}
	return done, nil
}

// QuantizedOps picks a graph's quantized operators out of its node counts (Module.NodeCounts):
// quantized:: ops (conv, linear, linear_dynamic, ...) and aten::quantized_* (the dynamic LSTM
// and GRU calls, aten::quantized_lstm/gru). An empty result means no layer is INT8.
func QuantizedOps(nodes map[string]int) map[string]int {
	q := map[string]int{}
	for k, n := range nodes {
		if strings.HasPrefix(k, "quantized::") || strings.HasPrefix(k, "aten::quantized_") {
			q[k] = n
		}
	}
	return q
}

// fp32LayerOps are the graph operators of FP32 convolutions and linear layers, as a frozen
// graph holds them.
var fp32LayerOps = []string{"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution", "aten::convolution", "aten::linear"}

// FP32LayerOps picks the FP32 convolutions and linear layers out of a graph's node counts
// (Module.NodeCounts), as QuantizedOps picks the quantized ones: in an INT8 model, the layers
// quantize.skip, the fallback or dynamic quantization left in FP32. An empty result means none.
func FP32LayerOps(nodes map[string]int) map[string]int {
	f := map[string]int{}
	for _, k := range fp32LayerOps {
		if n := nodes[k]; n > 0 {
			f[k] = n
		}
	}
	return f
}

// InputPrecision is the precision a model arrived in, read from its quantized operators
// (QuantizedOps): "" when it holds none (FP32), "int8-dynamic" when every one of them
// quantizes its activations at run time (quantized::linear_dynamic and its kin, as
// torch.ao.quantization.quantize_dynamic leaves them), else "int8-static" (eager or graph-mode
// static quantization: quantized::conv2d, quantized::linear, quantized::add, ...).
func InputPrecision(ops map[string]int) string {
	if len(ops) == 0 {
		return ""
	}
	for k := range ops {
		if !strings.Contains(k, "_dynamic") {
			return "int8-" + ModeStatic
		}
	}
	return "int8-" + ModeDynamic
}

// AddedOps is what quantization added: the quantized operators of after beyond those of
// before (a model that was already INT8 keeps its own), by kind; kinds it did not add are left
// out.
func AddedOps(before, after map[string]int) map[string]int {
	d := map[string]int{}
	for k, n := range after {
		if n > before[k] {
			d[k] = n - before[k]
		}
	}
	return d
}
