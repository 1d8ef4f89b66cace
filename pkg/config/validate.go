package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/calib"
)

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
	for i, l := range c.Model.OpLibraries {
		if strings.TrimSpace(l) == "" {
			bad(fmt.Sprintf("model.op_libraries[%d]", i), `""`, "give the path of the shared library (.so) that registers the model's custom operators")
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
	}{{"optimize.optimize_for_inference", c.Optimize.OptimizeForInference}, {"optimize.channels_last", c.Optimize.ChannelsLast}, {"optimize.fast_qdq", c.Optimize.FastQDQ}, {"optimize.fast_linear", c.Optimize.FastLinear}, {"optimize.linear_bf16", c.Optimize.LinearBF16}, {"optimize.fast_conv", c.Optimize.FastConv}, {"optimize.fuse_conv_add", c.Optimize.FuseConvAdd}, {"runtime.measure", c.Runtime.Measure}} {
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
	if c.Optimize.Search != SearchQuick && c.Optimize.Search != SearchFull {
		bad("optimize.search", c.Optimize.Search, "quick (screen the runtime settings, measure the contenders) or full (measure every one)")
	}
	if c.Optimize.Budget < 0 {
		bad("optimize.budget", c.Optimize.Budget, "a positive duration like 5m, or 0 for none")
	} else if c.Optimize.Budget > 0 && c.Optimize.Budget < 10*time.Second {
		bad("optimize.budget", c.Optimize.Budget, "at least 10s (loading, checking and saving a model take seconds), or 0 for none")
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
	if c.Bench.Runs > bench.DefaultMaxRuns {
		bad("bench.runs", c.Bench.Runs, fmt.Sprintf("at most %d (every latency is kept in memory); for a longer measurement give bench.duration (--duration)", bench.DefaultMaxRuns))
	}
	if c.Bench.Warmup < 0 || c.Bench.Warmup > bench.DefaultMaxRuns {
		bad("bench.warmup", c.Bench.Warmup, fmt.Sprintf("0 to %d", bench.DefaultMaxRuns))
	}
	if c.Bench.StageRuns < 3 || c.Bench.StageRuns > bench.DefaultMaxRuns {
		bad("bench.stage_runs", c.Bench.StageRuns, fmt.Sprintf("3 (medians of fewer runs mean little) to %d", bench.DefaultMaxRuns))
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
	if safefile.Same(art, c.Model.Path) {
		return fmt.Errorf("output %q would overwrite the input model: choose another output.dir or model.name", art)
	}
	if _, err := os.Lstat(art); err == nil && !c.Output.Overwrite {
		return fmt.Errorf("output %q exists: remove it, choose another output.dir, or set output.overwrite: true (--overwrite)", art)
	}
	return nil
}
