package quant

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
)

// Decision is DecideINT8's verdict.
type Decision struct {
	UseINT8 bool    `json:"use_int8"`
	Speedup float64 `json:"speedup"` // FP32 p50 / INT8 p50
	Reason  string  `json:"reason"`
}

// DecideINT8 says whether to ship the INT8 model given p50 latencies measured on this machine
// (interleaved, same inputs and threads): INT8 must be at least minSpeedup times faster than
// the best FP32 artifact (minSpeedup <= 1 means merely faster). force keeps INT8 regardless, as
// a config that insists on it must be able to, but the reason still says what was measured.
func DecideINT8(int8P50, fp32P50 time.Duration, minSpeedup float64, force bool) Decision {
	if minSpeedup < 1 {
		minSpeedup = 1
	}
	if int8P50 <= 0 || fp32P50 <= 0 {
		if force {
			return Decision{UseINT8: true, Reason: "INT8 forced by the config; latencies were not measured"}
		}
		return Decision{UseINT8: false, Reason: "latencies not measured: keeping FP32 (measure both, or force INT8)"}
	}
	s := float64(fp32P50) / float64(int8P50)
	// Reasons are read by people: microsecond resolution is plenty.
	int8P50, fp32P50 = int8P50.Round(time.Microsecond), fp32P50.Round(time.Microsecond)
	d := Decision{Speedup: s}
	faster := s > 1 && s >= minSpeedup
	switch {
	case faster:
		d.UseINT8 = true
		d.Reason = fmt.Sprintf("INT8 p50 %v is %.2fx faster than FP32 p50 %v", int8P50, s, fp32P50)
	case force:
		d.UseINT8 = true
		d.Reason = fmt.Sprintf("INT8 forced by the config although it is not faster here: INT8 p50 %v vs FP32 p50 %v (%.2fx, needed > %.2fx)", int8P50, fp32P50, s, minSpeedup)
	default:
		d.Reason = fmt.Sprintf("INT8 is not worth it on this machine: INT8 p50 %v vs FP32 p50 %v (%.2fx, needed > %.2fx); keeping FP32", int8P50, fp32P50, s, minSpeedup)
	}
	return d
}

// InterleavedLatency returns a LatencyFunc that measures the models side by side with
// bench.Compare (shuffled rounds, each model once per round; warmup rounds untimed, then
// rounds timed) on the shared inference thread, and reports each model's p50: the one
// interleaved timing loop, as bench and optimize's stage measurements use. Call it outside
// torch.Do.
func InterleavedLatency(inputs []*torch.Tensor, warmup, rounds int) LatencyFunc {
	return func(ctx context.Context, models []*torch.Module) ([]time.Duration, error) {
		if rounds < 1 {
			return nil, errors.New("interleaved latency: rounds must be >= 1")
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(models) == 0 {
			return nil, nil
		}
		targets := make([]bench.Target, len(models))
		for i, m := range models {
			targets[i] = benchrun.NewModuleTarget(fmt.Sprintf("candidate %d", i), m, inputs)
		}
		if len(models) == 1 {
			// Compare needs two: time the one against itself.
			targets = append(targets, benchrun.NewModuleTarget("candidate 0 (again)", models[0], inputs))
		}
		var (
			cmp *bench.Comparison
			err error
		)
		torch.Do(func() {
			cmp, err = bench.Compare(targets, bench.CompareOptions{
				Options: bench.Options{Runs: rounds, Warmup: warmup},
				Order:   bench.Shuffled, Seed: 1,
			})
		})
		if err != nil {
			return nil, fmt.Errorf("interleaved latency: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out := make([]time.Duration, len(models))
		for i := range out {
			out[i] = cmp.Results[i].Stats.P50
		}
		return out, nil
	}
}
