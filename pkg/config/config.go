// Package config is torchspeed's YAML configuration: typed structs, defaults, loading with
// spf13/viper (flag > TORCHSPEED_* environment > file > default), and validation that names
// the key, the bad value and what is allowed.
package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

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
	// PreserveMethods are kept through freezing (the reset method always is).
	PreserveMethods []string `mapstructure:"preserve_methods" json:"preserve_methods,omitempty"`
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
	// Tolerance bounds how far an FP32 stage may move the outputs from the original's.
	MaxAbsError float64 `mapstructure:"max_abs_error" json:"max_abs_error"`
	MinCosine   float64 `mapstructure:"min_cosine" json:"min_cosine"`
	// MinSpeedup: a stage must make the model at least this much faster (ratio of medians) to
	// be kept when auto. 1.0 keeps anything not slower.
	MinSpeedup float64 `mapstructure:"min_speedup" json:"min_speedup"`
}

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
			Freeze: true, FoldBN: true, OptimizeForInference: Auto, ChannelsLast: Auto,
			MaxAbsError: 1e-3, MinCosine: 0.9999, MinSpeedup: 1.02,
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

// Load reads a config file (empty path: defaults only), applies TORCHSPEED_* environment
// variables and the flags the user set, and validates the result. Flags are bound by their
// names as dotted keys (e.g. a flag named "runtime.threads"), or through aliases: flag name ->
// key.
func Load(path string, flags *pflag.FlagSet, aliases map[string]string) (*Config, error) {
	return LoadValues(path, flags, aliases, true)
}

// LoadValues is Load for commands that take the model or its inputs from elsewhere (bench
// reads them from flags or an artifact's manifest): with full false, model.path and
// model.inputs may be missing, and every value given is still checked.
func LoadValues(path string, flags *pflag.FlagSet, aliases map[string]string, full bool) (*Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()
	def := Default()
	var keys []string
	setDefaults(v, "", reflect.ValueOf(def), &keys)
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("config %q: file not found: check the path, or write one with `torchspeed config init -m MODEL`", path)
			}
			return nil, fmt.Errorf("config %q: %w", path, err)
		}
		err = v.ReadConfig(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("config %q: not valid YAML: %w", path, err)
		}
	}
	changed := map[string]bool{}
	if flags != nil {
		var bindErr error
		flags.VisitAll(func(fl *pflag.Flag) {
			key := fl.Name
			if k, ok := aliases[fl.Name]; ok {
				key = k
			} else if !strings.Contains(key, ".") {
				return
			}
			if err := v.BindPFlag(key, fl); err != nil && bindErr == nil {
				bindErr = err
			}
			if fl.Changed {
				changed[key] = true
			}
		})
		if bindErr != nil {
			return nil, bindErr
		}
	}
	cfg := def
	dc := func(c *mapstructure.DecoderConfig) {
		c.ErrorUnused = true
		c.WeaklyTypedInput = true
		c.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
			wholeNumberHook,
		)
	}
	if err := v.Unmarshal(&cfg, dc); err != nil {
		return nil, fmt.Errorf("config %s: %s", orDefaults(path), explainDecode(err, v))
	}
	cfg.File = path
	cfg.given = map[string]bool{}
	for _, k := range keys {
		if changed[k] || v.InConfig(k) || os.Getenv(EnvName(k)) != "" {
			cfg.given[k] = true
		}
	}
	cfg.resolvePaths()
	validate := cfg.Validate
	if !full {
		validate = cfg.ValidateValues
	}
	if err := validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", orDefaults(path), err)
	}
	return &cfg, nil
}

// wholeNumberHook refuses a number with a fraction, or one beyond int64, for an integer key:
// mapstructure would truncate threads: 1.5 to 1, and YAML reads 99999999999999999999 as a
// float that converts to -9223372036854775808.
func wholeNumberHook(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	if to == reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	var f float64
	switch v := data.(type) {
	case float64:
		f = v
	case float32:
		f = float64(v)
	default:
		return data, nil
	}
	if f != math.Trunc(f) || math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return nil, fmt.Errorf("%v is not a whole number in range: give an integer", data)
	}
	return int64(f), nil
}

func orDefaults(path string) string {
	if path == "" {
		return "(flags and defaults)"
	}
	return fmt.Sprintf("%q", path)
}

// setDefaults registers every leaf key, so environment variables reach keys the file lacks.
func setDefaults(v *viper.Viper, prefix string, val reflect.Value, keys *[]string) {
	t := val.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("mapstructure"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		fv := val.Field(i)
		if fv.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
			setDefaults(v, key, fv, keys)
			continue
		}
		if fv.Kind() == reflect.Func {
			continue
		}
		v.SetDefault(key, fv.Interface())
		*keys = append(*keys, key)
	}
}

// explainDecode turns mapstructure's messages into ones that name the key and what is allowed.
func explainDecode(err error, v *viper.Viper) string {
	msg := err.Error()
	quoted := regexp.MustCompile(`'([a-z0-9_.\[\]]+)'`)
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "*"))
		if l == "" || strings.HasPrefix(l, "decoding failed due to") || strings.HasSuffix(l, "error(s) decoding:") {
			continue
		}
		if strings.Contains(l, "has invalid keys:") {
			l += " (a typo? see configs/ for the keys each section takes)"
		} else if m := quoted.FindStringSubmatch(l); m != nil && v.IsSet(m[1]) {
			l = fmt.Sprintf("%s: got %q", l, fmt.Sprint(v.Get(m[1])))
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return msg
	}
	return strings.Join(lines, "; ")
}

// resolvePaths makes paths in the file relative to the file's folder.
func (c *Config) resolvePaths() {
	if c.File == "" {
		return
	}
	base := filepath.Dir(c.File)
	rel := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(base, *p)
		}
	}
	rel(&c.Model.Path)
	rel(&c.Calibration.Path)
	rel(&c.Validation.Data.Path)
	rel(&c.Output.Dir)
	c.rebaseData(base)
	// Labels may be an npz member name; only file paths are made relative to the config.
	for _, l := range []*string{&c.Calibration.Labels, &c.Validation.Data.Labels} {
		if strings.ContainsRune(*l, '/') || strings.HasSuffix(*l, ".npy") || strings.HasSuffix(*l, ".txt") {
			rel(l)
		}
	}
}

// Validate checks values the types cannot: each error names the key, the value and what is
// allowed.
func (c *Config) Validate() error {
	var errs []error
	if c.Model.Path == "" {
		errs = append(errs, errors.New("model.path: missing: give the TorchScript file to optimize"))
	}
	if len(c.Model.Inputs) == 0 {
		errs = append(errs, errors.New("model.inputs: missing: list each forward argument with its shape and dtype (torchspeed config init writes them)"))
	}
	return errors.Join(append(errs, c.ValidateValues())...)
}

// ValidateValues checks the values that are given, as Validate does, without requiring
// model.path and model.inputs: for commands that take them from flags or an artifact's
// manifest (bench).
func (c *Config) ValidateValues() error {
	var errs []error
	bad := func(key string, val any, allowed string) {
		errs = append(errs, fmt.Errorf("%s: %v is not allowed: %s", key, val, allowed))
	}
	if c.Model.Name != "" {
		if err := CheckName(c.Model.Name); err != nil {
			errs = append(errs, fmt.Errorf("model.name: %w", err))
		}
	}
	dtypes := []string{"float32", "float64", "int64", "int32", "uint8", "bool"}
	for i, in := range c.Model.Inputs {
		key := fmt.Sprintf("model.inputs[%d]", i)
		if err := checkValues(in); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", key, in.Name, err))
		}
		if !in.IsTensor() {
			continue
		}
		if in.Value != nil {
			bad(key+".value", in.Value, "a tensor takes shape and dtype (or data), not a value")
		}
		if in.BatchDim != "" && !strings.EqualFold(in.BatchDim, "none") {
			if d, err := strconv.Atoi(in.BatchDim); err != nil || d < 0 || (len(in.Shape) > 0 && d >= len(in.Shape)) {
				bad(key+".batch_dim", in.BatchDim, fmt.Sprintf("none, or a dimension from 0 to %d of shape %v", max(len(in.Shape)-1, 0), in.Shape))
			}
		}
		if len(in.Shape) == 0 && in.Data != "" {
			// the shape comes from the data file
		} else if len(in.Shape) == 0 {
			bad(key+".shape", "[]", "give the full shape, batch first, e.g. [1, 3, 224, 224]")
		}
		for _, d := range in.Shape {
			if d <= 0 {
				bad(key+".shape", in.Shape, "every dimension must be >= 1")
				break
			}
		}
		if in.DType == "" {
			c.Model.Inputs[i].DType = "float32"
		} else if !slices.Contains(dtypes, in.DType) {
			bad(key+".dtype", in.DType, "one of "+strings.Join(dtypes, ", "))
		}
		switch strings.ToLower(in.Layout) {
		case "", "nchw", "nhwc":
		default:
			bad(key+".layout", in.Layout, "nchw or nhwc")
		}
		if err := CheckRange(in.Range, c.Model.Inputs[i].DType); err != nil {
			bad(key+".range", in.Range, err.Error())
		}
	}
	if len(errs) == 0 {
		var specs []InputSpec
		for i, in := range c.Model.Inputs {
			if !in.IsTensor() || len(in.Shape) == 0 {
				continue
			}
			name := fmt.Sprintf("model.inputs[%d]", i)
			if in.Name != "" {
				name += " (" + in.Name + ")"
			}
			specs = append(specs, InputSpec{Name: name, Shape: in.Shape, DType: in.DType})
		}
		if err := CheckInputs("model.inputs", specs); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range []struct {
		key string
		v   Toggle
	}{{"optimize.optimize_for_inference", c.Optimize.OptimizeForInference}, {"optimize.channels_last", c.Optimize.ChannelsLast}, {"runtime.measure", c.Runtime.Measure}} {
		if t.v != Auto && t.v != On && t.v != Off {
			bad(t.key, t.v, "auto, true or false")
		}
	}
	if c.Optimize.MaxAbsError < 0 {
		bad("optimize.max_abs_error", c.Optimize.MaxAbsError, "must be >= 0")
	}
	if c.Optimize.MinCosine < -1 || c.Optimize.MinCosine > 1 {
		bad("optimize.min_cosine", c.Optimize.MinCosine, "between -1 and 1")
	}
	if c.Optimize.MinSpeedup <= 0 {
		bad("optimize.min_speedup", c.Optimize.MinSpeedup, "a ratio > 0 (1.02 = at least 2% faster)")
	}
	if err := c.Quantize.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Quantize.Mode == "static" && c.Calibration.Path == "" && c.Calibration.Kind != calib.KindRandom {
		errs = append(errs, errors.New("calibration: static quantization needs calibration data: set calibration.path (npy, npz or an image folder), or calibration.kind: random to accept an unverified result"))
	}
	if v := c.Validation.MinCosine; v < -1 || v > 1 {
		bad("validation.min_cosine", v, "between -1 and 1")
	}
	if v := c.Validation.MinTop1Agreement; v < 0 || v > 1 {
		bad("validation.min_top1_agreement", v, "a fraction between 0 and 1")
	}
	if c.Validation.MaxAbsError < 0 {
		bad("validation.max_abs_error", c.Validation.MaxAbsError, "must be >= 0 (0: not checked)")
	}
	if c.Validation.MaxAccuracyDrop < 0 {
		bad("validation.max_accuracy_drop", c.Validation.MaxAccuracyDrop, "points, >= 0")
	}
	if err := CheckThreads("runtime.threads", c.Runtime.Threads, "auto"); err != nil {
		errs = append(errs, err)
	}
	if err := CheckThreads("runtime.interop_threads", c.Runtime.InteropThreads, ""); err != nil {
		errs = append(errs, err)
	}
	if c.Runtime.NUMANode < -1 {
		bad("runtime.numa_node", c.Runtime.NUMANode, "-1 (any) or a node number")
	}
	if !slices.Contains([]string{"default", "jemalloc", "tcmalloc"}, c.Runtime.Allocator) {
		bad("runtime.allocator", c.Runtime.Allocator, "default, jemalloc or tcmalloc")
	}
	if !slices.Contains([]string{"latency", "throughput"}, c.Runtime.Mode) {
		bad("runtime.mode", c.Runtime.Mode, "latency or throughput")
	}
	if c.Bench.Runs < 0 || (c.Bench.Runs == 0 && c.Bench.Duration <= 0) {
		bad("bench.runs", c.Bench.Runs, "a positive count, or 0 with a positive bench.duration")
	}
	if c.Bench.Duration < 0 {
		bad("bench.duration", c.Bench.Duration, "a positive duration like 10s")
	}
	if c.Bench.Warmup < 0 {
		bad("bench.warmup", c.Bench.Warmup, "must be >= 0")
	}
	if c.Bench.StageRuns < 3 {
		bad("bench.stage_runs", c.Bench.StageRuns, "3 or more (medians of fewer runs mean little)")
	}
	if c.Output.Dir == "" {
		bad("output.dir", `""`, "a folder to write the artifact and reports to")
	}
	return errors.Join(errs...)
}

// ArtifactName is the artifact's base name.
func (c *Config) ArtifactName() string {
	if c.Model.Name != "" {
		return c.Model.Name
	}
	b := filepath.Base(c.Model.Path)
	return strings.TrimSuffix(b, filepath.Ext(b))
}

// ArtifactSuffix ends every artifact's file name.
const ArtifactSuffix = ".torchspeed.pt"

// ArtifactPath is where the artifact goes: output.dir/<name>.torchspeed.pt. It is the one
// place the path is computed, so every check (exists, would overwrite the input model) looks
// at the file that is written.
func (c *Config) ArtifactPath() string {
	return filepath.Join(c.Output.Dir, c.ArtifactName()+ArtifactSuffix)
}

// CheckOutput refuses a run whose artifact already exists (without output.overwrite) or
// would replace the input model: both are the user's choice of paths, found before any work.
func (c *Config) CheckOutput() error {
	art := c.ArtifactPath()
	if same(art, c.Model.Path) {
		return fmt.Errorf("output %q would overwrite the input model: choose another output.dir or model.name", art)
	}
	if _, err := os.Lstat(art); err == nil && !c.Output.Overwrite {
		return fmt.Errorf("output %q exists: remove it, choose another output.dir, or set output.overwrite: true (--overwrite)", art)
	}
	return nil
}

// same reports whether two paths name one file (or one absolute path, when neither exists).
func same(a, b string) bool {
	if fa, err := os.Stat(a); err == nil {
		if fb, err := os.Stat(b); err == nil {
			return os.SameFile(fa, fb)
		}
	}
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == ab
}
