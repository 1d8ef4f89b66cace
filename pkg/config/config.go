// Package config is torchspeed's YAML configuration: typed structs, defaults, loading with
// spf13/viper (flag > TORCHSPEED_* environment > file > default), and validation that names
// the key, the bad value and what is allowed.
package config

import (
	"strconv"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/pkg/calib"
)

// EnvPrefix is the prefix of environment variables that set config keys: TORCHSPEED_ plus the
// dotted key in upper case with "." and "-" as "_", e.g. TORCHSPEED_RUNTIME_THREADS=4.
const EnvPrefix = "TORCHSPEED"

// Config is one optimization job.
type Config struct {
	Model       Model        `mapstructure:"model" json:"model"`
	Optimize    Optimize     `mapstructure:"optimize" json:"optimize"`
	Quantize    Quantize     `mapstructure:"quantize" json:"quantize"`
	Calibration calib.Source `mapstructure:"calibration" json:"calibration"`
	Validation  Validation   `mapstructure:"validation" json:"validation"`
	Runtime     Runtime      `mapstructure:"runtime" json:"runtime"`
	Bench       Bench        `mapstructure:"bench" json:"bench"`
	Output      Output       `mapstructure:"output" json:"output"`

	// File is the config file it was read from ("" when none); relative paths in it are taken
	// relative to its folder.
	File string `mapstructure:"-" json:"file,omitempty"`
	// given holds the keys a file, a TORCHSPEED_* variable or a flag the user typed set (see
	// Given); the others hold their defaults.
	given map[string]bool
}

// Given reports whether the user set key (a dotted key such as "runtime.mode") in the file,
// the environment or a flag, rather than leaving its default.
func (c *Config) Given(key string) bool { return c.given[key] }

// EnvName is the environment variable that sets key, e.g. TORCHSPEED_RUNTIME_THREADS.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// Model is the TorchScript model to optimize and how to call it.
type Model struct {
	// Path of the TorchScript file (torch.jit.save of a traced or scripted module).
	Path string `mapstructure:"path" json:"path"`
	// Name of the artifact (<name>.torchspeed.pt); default: the file name without extension.
	Name   string  `mapstructure:"name" json:"name,omitempty"`
	Inputs []Input `mapstructure:"inputs" json:"inputs"`
	// Method is the method to optimize, validate and call ("" or "forward": forward).
	Method string `mapstructure:"method" json:"method,omitempty"`
	// ResetMethod returns a stateful model to its initial state ("": reset_states or reset
	// when the model has one). It is called before every validation pass, timing and save.
	ResetMethod string `mapstructure:"reset_method" json:"reset_method,omitempty"`
	// PreserveMethods are kept through freezing (the reset method always is). Unset, every
	// public method (a name not starting with "_") is kept, as the original exports it.
	PreserveMethods []string `mapstructure:"preserve_methods" json:"preserve_methods,omitempty"`
	// OpLibraries are shared libraries of custom operators (TORCH_LIBRARY extensions) that the
	// model calls, loaded (dlopen, RTLD_NOW | RTLD_GLOBAL) before it; relative paths are from
	// the config file's folder.
	OpLibraries []string `mapstructure:"op_libraries" json:"op_libraries,omitempty"`
}

// Input is one argument of the model's forward.
type Input struct {
	Name  string  `mapstructure:"name" json:"name"`
	Shape []int64 `mapstructure:"shape" json:"shape"`
	DType string  `mapstructure:"dtype" json:"dtype"`
	// Layout is the memory layout callers hand over: "nchw" (contiguous, default) or "nhwc"
	// (channels-last) for 4-D inputs.
	Layout string `mapstructure:"layout" json:"layout,omitempty"`
	// Range bounds random integer inputs (token ids): [low, high).
	Range []int64 `mapstructure:"range" json:"range,omitempty"`
	// Type is the argument's TorchScript type: "" or "Tensor" for a tensor; "int", "float",
	// "bool", "str", "None", "Optional[T]", "List[T]", "Tuple[...]" or "Dict[str, Tensor]".
	Type string `mapstructure:"type" json:"type,omitempty"`
	// Value is a non-tensor argument's value (16000 for sr: int; a list for List[int]; null
	// for None), passed on every call.
	Value any `mapstructure:"value" json:"value,omitempty"`
	// BatchDim is the tensor's batch dimension: "" (0), an index, or "none" for inputs that
	// have none (recurrent state): batch sweeps and data checks leave those dimensions alone.
	BatchDim string `mapstructure:"batch_dim" json:"batch_dim,omitempty"`
	// Data is a file holding this tensor's values: a .npy (or FILE.npz:MEMBER) used on every
	// call, or "seq:FILE.npy" whose slice i along dimension 0 is call i's input, in order.
	Data string `mapstructure:"data" json:"data,omitempty"`
}

// IsTensor reports whether the input is a tensor argument (Type "" or "Tensor").
func (in Input) IsTensor() bool { return in.Type == "" || in.Type == "Tensor" }

// Batch returns the input's batch dimension, and false when it has none (batch_dim: none, or
// not a tensor). BatchDim must have passed validation.
func (in Input) Batch() (int, bool) {
	if !in.IsTensor() || strings.EqualFold(in.BatchDim, "none") {
		return 0, false
	}
	if in.BatchDim == "" {
		return 0, true
	}
	d, err := strconv.Atoi(in.BatchDim)
	if err != nil {
		return 0, false
	}
	return d, true
}

// Toggle is "auto", "true" or "false". auto means: try both on this machine, keep the faster
// one whose outputs still match.
type Toggle string

// Toggle values.
const (
	Auto Toggle = "auto"
	On   Toggle = "true"
	Off  Toggle = "false"
)

// Optimize switches the FP32 stages.
type Optimize struct {
	Freeze               bool   `mapstructure:"freeze" json:"freeze"`
	FoldBN               bool   `mapstructure:"fold_bn" json:"fold_bn"`
	OptimizeForInference Toggle `mapstructure:"optimize_for_inference" json:"optimize_for_inference"`
	ChannelsLast         Toggle `mapstructure:"channels_last" json:"channels_last"`
	// FastQDQ: static INT8 models run torchspeed's quantize_per_tensor/dequantize and quantized
	// add/add_relu (the same bits, vectorized and parallel) through the fast_qdq load-time pass;
	// auto keeps it when it measures faster.
	FastQDQ Toggle `mapstructure:"fast_qdq" json:"fast_qdq"`
	// FastLinear: FP32 models run their constant-weight linears through torchspeed's own GEMM
	// (weights packed at load time) by the fast_linear load-time pass; auto keeps it when it
	// measures faster and its outputs agree with its base's.
	FastLinear Toggle `mapstructure:"fast_linear" json:"fast_linear"`
	// LinearBF16: the fast_linear variant's GEMM takes BF16 weights and inputs (the linear_bf16
	// load-time pass; vdpbf16ps with AVX512_BF16, widened to float elsewhere). Lower precision,
	// so it must pass the validation thresholds against the original, as INT8 must: auto offers
	// it when quantize.mode accepts reduced precision (anything but none) and keeps it when it
	// measures faster; true offers it whatever the mode and keeps it when it passes; false never
	// builds it.
	LinearBF16 Toggle `mapstructure:"linear_bf16" json:"linear_bf16"`
	// FastConv: FP32 models run their small constant-weight 2-D convolutions (groups 1) as
	// im2col + torchspeed's GEMM by the fast_conv load-time pass; auto keeps it when it measures
	// faster and its outputs agree with its base's.
	FastConv Toggle `mapstructure:"fast_conv" json:"fast_conv"`
	// FuseConvAdd: static INT8 models compute each quantized conv and the add (add_relu) after
	// it as one oneDNN convolution, by the fuse_conv_add load-time pass; its outputs differ
	// from the unfused model's by one rounding, so auto keeps it when it passes the validation
	// thresholds against FP32 like the INT8 model, its cosine to FP32 is within 1e-3 of the
	// INT8 model's, and it measures faster.
	FuseConvAdd Toggle `mapstructure:"fuse_conv_add" json:"fuse_conv_add"`
	// Tolerance bounds how far an FP32 stage may move the outputs from the original's.
	MaxAbsError float64 `mapstructure:"max_abs_error" json:"max_abs_error"`
	MinCosine   float64 `mapstructure:"min_cosine" json:"min_cosine"`
	// MinSpeedup: a stage must make the model at least this much faster (ratio of medians) to
	// be kept when auto. 1.0 keeps anything not slower.
	MinSpeedup float64 `mapstructure:"min_speedup" json:"min_speedup"`
	// Search is how much optimize measures: "quick" screens the runtime settings in one short
	// round and measures in full only those that come near the defaults (and skips the
	// allocator and huge-page settings where the model allocates and touches little); "full"
	// measures every candidate in full.
	Search string `mapstructure:"search" json:"search"`
	// Budget, when > 0, bounds optimize's wall time: each measuring step fits what is left,
	// and a step that no longer fits is skipped and reported as not measured.
	Budget time.Duration `mapstructure:"budget" json:"budget"`
}

// Search values (optimize.search).
const (
	SearchQuick = "quick"
	SearchFull  = "full"
)

// Quantize configures INT8.
type Quantize struct {
	// Mode: "none", "static" (calibrated activations + weights), "dynamic" (Linear/LSTM/GRU
	// weights, activations at run time), "auto" (static for conv nets, dynamic otherwise).
	Mode string `mapstructure:"mode" json:"mode"`
	// Engine: "auto", "x86", "fbgemm", "onednn", "qnnpack".
	Engine string `mapstructure:"engine" json:"engine"`
	// Observer for activations: "minmax", "moving_average", "histogram", "percentile".
	Observer   string  `mapstructure:"observer" json:"observer"`
	Percentile float64 `mapstructure:"percentile" json:"percentile"`
	PerChannel bool    `mapstructure:"per_channel" json:"per_channel"`
	// ReduceRange: "auto" (on where the engine needs it: x86, fbgemm or onednn on a CPU without VNNI), "true", "false".
	ReduceRange Toggle `mapstructure:"reduce_range" json:"reduce_range"`
	// Skip lists submodule paths kept in FP32 from the start.
	Skip []string `mapstructure:"skip" json:"skip,omitempty"`
	// Fallback keeps the most sensitive layers in FP32, one by one, until the thresholds pass,
	// at most MaxFallbackLayers of them.
	Fallback          bool `mapstructure:"fallback" json:"fallback"`
	MaxFallbackLayers int  `mapstructure:"max_fallback_layers" json:"max_fallback_layers"`
	// Force keeps INT8 even when it is not faster than the best FP32 model.
	Force bool `mapstructure:"force" json:"force"`
}

// Validation compares the result with the FP32 original.
type Validation struct {
	// Data to compare on; empty Path and Kind: the calibration data.
	Data calib.Source `mapstructure:"data" json:"data"`
	// Thresholds for INT8; failing them fails the run unless fallback fixes it.
	MinCosine        float64 `mapstructure:"min_cosine" json:"min_cosine"`
	MaxAbsError      float64 `mapstructure:"max_abs_error" json:"max_abs_error"`
	MinTop1Agreement float64 `mapstructure:"min_top1_agreement" json:"min_top1_agreement"`
	// MaxAccuracyDrop in points (0.5 = half a percentage point), when labels are given.
	MaxAccuracyDrop float64 `mapstructure:"max_accuracy_drop" json:"max_accuracy_drop"`
}

// Runtime is how the process sits on the machine.
type Runtime struct {
	// Threads: intra-op threads; 0 = auto (measured when optimize.auto choices run, else the
	// physical cores available).
	Threads        int    `mapstructure:"threads" json:"threads"`
	InteropThreads int    `mapstructure:"interop_threads" json:"interop_threads"`
	NUMANode       int    `mapstructure:"numa_node" json:"numa_node"`
	Allocator      string `mapstructure:"allocator" json:"allocator"`
	// Mode: "latency" or "throughput" presets for thread and OpenMP settings.
	Mode string `mapstructure:"mode" json:"mode"`
	// Measure: time the OpenMP wait policies and allocators against libtorch's defaults in
	// processes of their own and keep one only where it wins; auto: when the final benchmark
	// is long enough to be worth it (MeasureRuntime).
	Measure Toggle `mapstructure:"measure" json:"measure"`
}

// MeasureRuntime says whether optimize measures the runtime settings: runtime.measure true,
// or auto with bench.runs >= 100 or bench.duration >= 10s (the measurement takes a few
// seconds; quick runs and tests skip it).
func (c *Config) MeasureRuntime() bool {
	switch c.Runtime.Measure {
	case On:
		return true
	case Auto:
		return c.Bench.Runs >= 100 || c.Bench.Duration >= 10*time.Second
	}
	return false
}

// Bench is the final measurement and the short per-stage ones.
type Bench struct {
	Runs      int           `mapstructure:"runs" json:"runs"`
	Warmup    int           `mapstructure:"warmup" json:"warmup"`
	Duration  time.Duration `mapstructure:"duration" json:"duration"`
	StageRuns int           `mapstructure:"stage_runs" json:"stage_runs"`
	Seed      uint64        `mapstructure:"seed" json:"seed"`
}

// Output says where results go.
type Output struct {
	Dir   string `mapstructure:"dir" json:"dir"`
	Quiet bool   `mapstructure:"quiet" json:"quiet"`
	// Overwrite replaces an artifact of the same name; otherwise an existing one is an error.
	Overwrite bool `mapstructure:"overwrite" json:"overwrite"`
}

// Default is the configuration every file starts from.
func Default() Config {
	return Config{
		Optimize: Optimize{
			Freeze: true, FoldBN: true, OptimizeForInference: Auto, ChannelsLast: Auto, FastQDQ: Auto, FastLinear: Auto, LinearBF16: Auto, FastConv: Auto, FuseConvAdd: Auto,
			MaxAbsError: 1e-3, MinCosine: 0.9999, MinSpeedup: 1.02, Search: SearchQuick,
		},
		Quantize: Quantize{
			Mode: "none", Engine: "auto", Observer: "histogram", Percentile: 99.99, PerChannel: true,
			ReduceRange: Auto, Fallback: true, MaxFallbackLayers: 8,
		},
		Validation: Validation{MinCosine: 0.99, MinTop1Agreement: 0.98, MaxAccuracyDrop: 1.0},
		Runtime:    Runtime{InteropThreads: 1, NUMANode: -1, Allocator: "default", Mode: "latency", Measure: Auto},
		Bench:      Bench{Runs: 200, Warmup: 20, StageRuns: 30, Seed: 1},
		Output:     Output{Dir: "out"},
	}
}
