// Package report holds what an optimization run found, and writes it as JSON (everything,
// for scripts), Markdown (for people) and a terminal table.
package report

import (
	"time"
)

// Report is the outcome of one `torchspeed optimize` run.
type Report struct {
	Torchspeed string    `json:"torchspeed_version"`
	Libtorch   string    `json:"libtorch_version"`
	Started    time.Time `json:"started"`
	WallMs     float64   `json:"wall_ms"`
	Config     any       `json:"config"`
	Model      ModelInfo `json:"model"`
	Machine    any       `json:"machine,omitempty"`
	// Settings are the runtime settings applied (threads, OpenMP variables, affinity...).
	Settings map[string]string `json:"settings"`
	Stages   []Stage           `json:"stages"`
	// Decisions explain each automatic choice, with the figures behind it.
	Decisions  []string    `json:"decisions"`
	Quantize   any         `json:"quantize,omitempty"`
	Validation *Validation `json:"validation,omitempty"`
	Bench      *Bench      `json:"bench,omitempty"`
	// Roofline holds the optimized model's FLOP count and its share of the measured peak.
	Roofline *Roofline `json:"roofline,omitempty"`
	Artifact string    `json:"artifact"`
	Manifest any       `json:"manifest"`
	Warnings []string  `json:"warnings,omitempty"`
	// Plot is the latency plot's file name, next to the report.
	Plot string `json:"plot,omitempty"`
}

// ModelInfo describes the input model.
type ModelInfo struct {
	Path   string   `json:"path"`
	SHA256 string   `json:"sha256"`
	Bytes  int64    `json:"bytes"`
	Inputs []string `json:"inputs"`
	Nodes  int      `json:"graph_nodes"`
}

// Stage is one row of the stage table: a candidate model after a step.
type Stage struct {
	Name string `json:"name"`
	// Status: "kept", "rejected" (measured, not kept), "skipped" (switched off), "failed".
	Status string  `json:"status"`
	Reason string  `json:"reason,omitempty"`
	WallMs float64 `json:"wall_ms"`
	// NodesBefore/After count the forward graph's nodes by kind (only kinds that changed).
	Nodes     int            `json:"graph_nodes"`
	NodeDelta map[string]int `json:"node_delta,omitempty"`
	P50Ms     float64        `json:"p50_ms"`
	P95Ms     float64        `json:"p95_ms"`
	P50LoMs   float64        `json:"p50_ci_lo_ms"`
	P50HiMs   float64        `json:"p50_ci_hi_ms"`
	Speedup   float64        `json:"speedup_vs_original"`
	SpeedupLo float64        `json:"speedup_ci_lo"`
	SpeedupHi float64        `json:"speedup_ci_hi"`
	MaxAbsErr float64        `json:"max_abs_error"`
	Cosine    float64        `json:"cosine"`
	Measured  bool           `json:"measured"`
}

// Validation compares the final model with the original on the validation set.
type Validation struct {
	Samples   int                `json:"samples"`
	Synthetic bool               `json:"synthetic"`
	Data      string             `json:"data"`
	Metrics   map[string]float64 `json:"metrics"`
	Passed    bool               `json:"passed"`
	Failures  []string           `json:"failures,omitempty"`
	Layers    any                `json:"layers,omitempty"`
}

// Bench is the final interleaved measurement of the artifact against the original.
type Bench struct {
	Runs         int     `json:"runs"`
	Threads      int     `json:"threads"`
	OriginalP50  float64 `json:"original_p50_ms"`
	OriginalP95  float64 `json:"original_p95_ms"`
	OptimizedP50 float64 `json:"optimized_p50_ms"`
	OptimizedP90 float64 `json:"optimized_p90_ms"`
	OptimizedP95 float64 `json:"optimized_p95_ms"`
	OptimizedP99 float64 `json:"optimized_p99_ms"`
	Speedup      float64 `json:"speedup"`
	SpeedupLo    float64 `json:"speedup_ci_lo"`
	SpeedupHi    float64 `json:"speedup_ci_hi"`
	Verdict      string  `json:"verdict"`
	Throughput   float64 `json:"throughput_per_s"`
	Raw          any     `json:"raw,omitempty"`
}
