// Package report holds what an optimization run found, and writes it as JSON (everything,
// for scripts, in the versioned schema docs/schema/report.schema.json), Markdown (for people)
// and a terminal table.
package report

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/roofline"
)

// SchemaVersion is report.json's schema_version: raised on any change a reader of an older
// version would misread (a renamed or retyped key); new optional keys keep it.
const SchemaVersion = 1

// Outcome values: what the run decided.
const (
	// OutcomePassed: the artifact was written and passed validation.
	OutcomePassed = "passed"
	// OutcomeValidationFailed: the result missed a validation threshold; no artifact was
	// written, the reports are report.failed.json/.md (exit 3).
	OutcomeValidationFailed = "validation_failed"
)

// Report is the outcome of one `torchspeed optimize` run.
type Report struct {
	SchemaVersion int       `json:"schema_version"`
	Torchspeed    string    `json:"torchspeed_version"`
	Libtorch      string    `json:"libtorch_version"`
	Started       time.Time `json:"started"`
	WallMs        float64   `json:"wall_ms"`
	// Search is how much the run measured (optimize.search): "quick" or "full"; BudgetMs the
	// wall-time budget it was given (optimize.budget; null: none).
	Search   string   `json:"search"`
	BudgetMs *float64 `json:"budget_ms"`
	// StepTimes is the wall time of each step of the run, in order: where WallMs went.
	StepTimes []StepTime `json:"step_times"`
	// Outcome is OutcomePassed or OutcomeValidationFailed.
	Outcome string `json:"outcome"`
	// Summary is the plain-language opening of report.md, as lines.
	Summary []string       `json:"summary"`
	Config  *config.Config `json:"config"`
	Model   ModelInfo      `json:"model"`
	Machine *cpu.Probe     `json:"machine"`
	// Settings are the runtime settings the final benchmark ran with.
	Settings Settings `json:"settings"`
	Stages   []Stage  `json:"stages"`
	// Measurements are the interleaved timings the figures come from, in the order taken.
	Measurements []Measurement `json:"measurements"`
	// Decisions explain each automatic choice, with the figures behind it.
	Decisions  []string    `json:"decisions"`
	Quantize   *Quantize   `json:"quantize"`
	Validation *Validation `json:"validation"`
	Bench      *Bench      `json:"bench"`
	// Runtime is how the runtime settings in the manifest were chosen; null when optimize
	// did not get that far.
	Runtime *Runtime `json:"runtime"`
	// Roofline holds the optimized model's FLOP count and its share of the measured peak.
	Roofline *Roofline `json:"roofline"`
	// Artifact is the written artifact's path; null when none was written.
	Artifact *string `json:"artifact"`
	// Manifest is the manifest stored in the artifact, byte for byte (its own schema,
	// pkg/torchspeed); null when no artifact was written.
	Manifest json.RawMessage `json:"manifest"`
	Warnings []string        `json:"warnings"`
	// Memory is optimize's peak resident set and the model's size before and after; null when
	// optimize did not get that far.
	Memory *Memory `json:"memory"`
	// Plot is the latency plot's file name, next to the report; null when none was drawn.
	Plot *string `json:"plot"`
	// NonFinite lists the figures (JSON paths) that were NaN or infinite: they are written as
	// null, and this list says so.
	NonFinite []string `json:"non_finite"`
}

// Memory is what optimize held and what the model weighs before and after it.
type Memory struct {
	// PeakRSSBytes is optimize's peak resident set: the original, every candidate it built and
	// measured, and libtorch (nil: not read).
	PeakRSSBytes *int64          `json:"peak_rss_bytes"`
	Original     bench.ModelSize `json:"original"`
	// Artifact is null when no artifact was written.
	Artifact *bench.ModelSize `json:"artifact"`
}

// Line says it in a sentence for report.md.
func (m *Memory) Line() string {
	size := func(z bench.ModelSize) string {
		return fmt.Sprintf("%s file, %s of tensors", bench.FormatBytes(z.FileBytes), bench.FormatBytes(z.TensorBytes))
	}
	s := "Memory: the original " + size(m.Original)
	if a := m.Artifact; a != nil {
		s += "; the artifact " + size(*a)
	}
	if m.PeakRSSBytes != nil {
		s += fmt.Sprintf("; optimize's peak resident memory %s", bench.FormatBytes(*m.PeakRSSBytes))
	}
	return s + "."
}

// StepTime is one step of an optimize run and the wall time it took.
type StepTime struct {
	Name   string  `json:"name"`
	WallMs float64 `json:"wall_ms"`
}

// ModelInfo describes the input model.
type ModelInfo struct {
	Path   string      `json:"path"`
	SHA256 string      `json:"sha256"`
	Bytes  int64       `json:"bytes"`
	Inputs []InputSpec `json:"inputs"`
	Nodes  int         `json:"graph_nodes"`
	// Precision is the precision the model arrived in: fp32, or int8-static / int8-dynamic
	// for a model PyTorch had quantized already (empty: not read).
	Precision string `json:"precision,omitempty"`
	// QuantizedOps counts an already-INT8 model's quantized operators, by kind (nil: none).
	QuantizedOps map[string]int `json:"quantized_ops,omitempty"`
}

// InputSpec is one configured model input.
type InputSpec struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// Stage status values (Stage.Status).
const (
	StatusBaseline   = "baseline"   // the original model
	StatusKept       = "kept"       // the chain's last kept step: what the artifact holds
	StatusSuperseded = "superseded" // kept, then built upon by a later kept step
	StatusRejected   = "rejected"   // built and measured (or checked), not kept
	StatusSkipped    = "skipped"    // not built (switched off or unsafe here)
	StatusFailed     = "failed"     // building or running it failed
)

// Stage is one row of the stage table: a candidate model after a step. Every figure of a row
// comes from one measurement (Measurement); Speedup is BaselineP50Ms / P50Ms.
type Stage struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Reason string `json:"reason"`
	// Precision is fp32, bf16 (linear_bf16), int8-static or int8-dynamic.
	Precision string  `json:"precision"`
	WallMs    float64 `json:"build_ms"`
	Nodes     *int    `json:"graph_nodes"`
	// NodeDelta counts the forward graph's nodes by kind against the original (only kinds
	// that changed).
	NodeDelta map[string]int `json:"node_delta"`
	// QuantizedOps counts quantized:: nodes in the candidate's graph (null: not counted).
	QuantizedOps *int `json:"quantized_ops"`
	// Measurement names the Measurements entry the timing figures come from (null: not timed).
	Measurement *string `json:"measurement"`
	// Threads is the intra-op thread count of that measurement.
	Threads *int     `json:"threads"`
	P50Ms   *float64 `json:"p50_ms"`
	P95Ms   *float64 `json:"p95_ms"`
	P50LoMs *float64 `json:"p50_ci_lo_ms"`
	P50HiMs *float64 `json:"p50_ci_hi_ms"`
	// BaselineP50Ms is the original's p50 in the same measurement.
	BaselineP50Ms *float64 `json:"baseline_p50_ms"`
	Speedup       *float64 `json:"speedup"`
	SpeedupLo     *float64 `json:"speedup_ci_lo"`
	SpeedupHi     *float64 `json:"speedup_ci_hi"`
	// MaxAbsErr and Cosine compare the candidate's outputs with the original's (null: not
	// compared, or non-finite).
	MaxAbsErr *float64 `json:"max_abs_error"`
	Cosine    *float64 `json:"cosine"`
}

// Measurement is one interleaved timing run: the original first, then the candidates.
type Measurement struct {
	Name    string        `json:"name"`
	Threads int           `json:"threads"`
	Rounds  int           `json:"rounds"`
	Order   string        `json:"order"`
	Targets []TargetStats `json:"targets"`
}

// TargetStats are one target's latencies in a Measurement.
type TargetStats struct {
	Name   string  `json:"name"`
	N      int     `json:"n"`
	MinMs  float64 `json:"min_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P95Ms  float64 `json:"p95_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
}

// Quantize is what the INT8 step did.
type Quantize struct {
	Mode        string   `json:"mode"`
	Engine      string   `json:"engine"`
	ReduceRange bool     `json:"reduce_range"`
	Activation  string   `json:"activation"`
	Weight      string   `json:"weight"`
	FP32Layers  []string `json:"fp32_layers"`
	// QuantizedOps counts the quantized:: operators in the INT8 graph, by kind; QuantizedOpCount
	// is their total (0: nothing was quantized, and the run does not call the result INT8).
	QuantizedOps       map[string]int `json:"quantized_ops"`
	QuantizedOpCount   int            `json:"quantized_op_count"`
	CalibrationSamples *int           `json:"calibration_samples"`
	DurationMs         float64        `json:"duration_ms"`
	Kept               bool           `json:"kept"`
	Warnings           []string       `json:"warnings"`
	// Attempts lists every INT8 model the per-layer fallback built and checked, in order:
	// the first keeps only quantize.skip in FP32 (empty when the fallback did not run).
	Attempts []FallbackAttempt `json:"attempts"`
}

// FallbackAttempt is one INT8 model the fallback checked: the layers it kept in FP32, what
// validation measured, and its p50 when the passing attempts were timed against each other.
type FallbackAttempt struct {
	FP32Layers []string `json:"fp32_layers"`
	Cosine     *float64 `json:"cosine"`
	Passed     bool     `json:"passed"`
	Failures   []string `json:"failures"`
	P50Ms      *float64 `json:"p50_ms"`
}

// Validation compares the final model (Checked) with the original on the validation data.
type Validation struct {
	// Checked names the model these figures are for, and CheckedPrecision its precision:
	// when INT8 was rejected they are the kept FP32 model's.
	Checked          string `json:"checked"`
	CheckedPrecision string `json:"checked_precision"`
	Samples          int    `json:"samples"`
	// Synthetic: the data was random, so the figures say nothing about real inputs.
	Synthetic bool     `json:"synthetic"`
	Data      string   `json:"data"`
	Metrics   Metrics  `json:"metrics"`
	Passed    bool     `json:"passed"`
	Failures  []string `json:"failures"`
	// Notes qualify figures (e.g. a cosine over a 1-element output means nothing).
	Notes  []string `json:"notes"`
	Layers []Layer  `json:"layers"`
}

// Metrics are the validation figures; null means not measured (no labels, no class output)
// or non-finite (listed in Report.NonFinite).
type Metrics struct {
	Cosine          *float64 `json:"cosine"`
	MinSampleCosine *float64 `json:"min_sample_cosine"`
	MaxAbsError     *float64 `json:"max_abs_error"`
	MeanAbsError    *float64 `json:"mean_abs_error"`
	// Top1Agreement is over the Top1Counted samples; Top1Tied samples, whose FP32 top-1 is a
	// tie at float precision (validate.TieTolerance), are counted neither way.
	Top1Agreement *float64 `json:"top1_agreement"`
	Top1Counted   *int     `json:"top1_counted,omitempty"`
	Top1Tied      *int     `json:"top1_tied,omitempty"`
	KLDivergence  *float64 `json:"kl_divergence"`
	// Top1Original and Top1Checked are accuracies on the labels (fractions).
	Top1Original *float64 `json:"top1_original"`
	Top1Checked  *float64 `json:"top1_checked"`
	Top5Original *float64 `json:"top5_original"`
	Top5Checked  *float64 `json:"top5_checked"`
	// AccuracyDropPoints is (Top1Original - Top1Checked) in percentage points.
	AccuracyDropPoints *float64 `json:"accuracy_drop_points"`
}

// Layer is one row of the per-layer INT8 sensitivity table.
type Layer struct {
	Layer         string   `json:"layer"`
	Type          string   `json:"type"`
	Cosine        *float64 `json:"cosine"`
	MeanAbsError  *float64 `json:"mean_abs_error"`
	Top1Agreement *float64 `json:"top1_agreement"`
}

// Bench is the final interleaved measurement of the artifact against the original.
type Bench struct {
	Measurement  string  `json:"measurement"`
	Runs         int     `json:"runs"`
	Threads      int     `json:"threads"`
	Precision    string  `json:"precision"`
	Optimized    string  `json:"optimized"`
	OriginalP50  float64 `json:"original_p50_ms"`
	OriginalP90  float64 `json:"original_p90_ms"`
	OriginalP95  float64 `json:"original_p95_ms"`
	OriginalP99  float64 `json:"original_p99_ms"`
	OptimizedP50 float64 `json:"optimized_p50_ms"`
	OptimizedP90 float64 `json:"optimized_p90_ms"`
	OptimizedP95 float64 `json:"optimized_p95_ms"`
	OptimizedP99 float64 `json:"optimized_p99_ms"`
	// Speedup is OriginalP50 / OptimizedP50, with the bootstrap interval of that ratio.
	Speedup   float64 `json:"speedup"`
	SpeedupLo float64 `json:"speedup_ci_lo"`
	SpeedupHi float64 `json:"speedup_ci_hi"`
	// UTestP is the Mann-Whitney U test's two-sided p-value; Significant is true only when
	// p < 0.05 and the interval excludes 1.
	UTestP      float64 `json:"u_test_p"`
	Significant bool    `json:"significant"`
	Verdict     string  `json:"verdict"`
	Throughput  float64 `json:"throughput_per_s"`
	// Interruptions is what the machine took from the CPUs in use, measured after the runs;
	// its Floors hold the one at OptimizedP50 (nil: not measured).
	Interruptions *cpu.Interruptions `json:"interruptions"`
}

// Floor is the p95/p50 the machine alone gives fixed work as long as the optimized p50, and
// the thread count it was replayed on; false when not measured.
func (b *Bench) Floor() (cpu.TailFloor, bool) {
	if b == nil {
		return cpu.TailFloor{}, false
	}
	return b.Interruptions.FloorAt(time.Duration(b.OptimizedP50 * 1e6))
}

// Settings are the runtime settings the final benchmark ran with.
type Settings struct {
	Threads        int      `json:"threads"`
	InteropThreads *int     `json:"interop_threads"`
	CPUs           *string  `json:"cpus"`
	OpenMP         *string  `json:"openmp"`
	Mode           *string  `json:"mode"`
	Allocator      *string  `json:"allocator"`
	NUMANode       *int     `json:"numa_node"`
	BLAS           *string  `json:"blas"`
	Env            []EnvVar `json:"env"`
	Applied        []string `json:"applied"`
	// Notes say where a setting differs from what was set at start (e.g. threads chosen by
	// measurement after the environment was fixed).
	Notes []string `json:"notes"`
}

// EnvVar is one environment variable set for the run.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Roofline is pkg/roofline's placement of a measured latency against the machine's peak.
type Roofline = roofline.Roofline
