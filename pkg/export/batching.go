package export

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/export/tritonpb"
)

// MinBatchGain is how much more throughput (items/s) a batch must give over single samples,
// at the same threads, for an export to turn dynamic batching on: below it the gain is
// within what a shared machine's noise and the queue delay take back.
const MinBatchGain = 1.10

// MaxBatchSweepBytes bounds the bench report ReadBatchSweep reads: a sweep of several points
// of a million runs each, every latency kept, fits.
const MaxBatchSweepBytes = 64 << 20

// ReadBatchSweep reads the JSON report of `torchspeed bench --sweep-batch ... --json` and
// checks that it measured the artifact at path (by SHA-256).
func ReadBatchSweep(reportPath, artifactPath string) (*bench.SweepResult, error) {
	// Bounded: a report given as /dev/zero once grew the process until the kernel killed it.
	b, err := safefile.ReadFileLimit(reportPath, MaxBatchSweepBytes)
	if err != nil {
		return nil, fmt.Errorf("batch sweep %q: %w", reportPath, err)
	}
	var rep bench.RunReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("batch sweep %q: not a `torchspeed bench --json` report: %w", reportPath, err)
	}
	if rep.Sweep == nil || len(rep.Sweep.Rows) == 0 {
		return nil, fmt.Errorf("batch sweep %q: the report holds no sweep: run `torchspeed bench -m ARTIFACT --sweep-batch 1,2,4,8 --json` on the serving machine", reportPath)
	}
	sum, _, err := safefile.SHA256(artifactPath)
	if err != nil {
		return nil, err
	}
	for _, h := range rep.Environment.ModelHashes {
		if h == sum {
			return rep.Sweep, nil
		}
	}
	return nil, fmt.Errorf("batch sweep %q measured another model (SHA-256 %v), not %s (%s): sweep this artifact", reportPath, rep.Environment.ModelHashes, artifactPath, sum)
}

// DynamicBatching decides from a batch sweep whether batching pays at the artifact's thread
// count with one stream: the batch with the most items/s, if it beats batch 1 by
// MinBatchGain and its p99 is within the sweep's latency budget. The queue delay is what the
// budget leaves after that batch's p99 or, without a budget, one single-sample p50 (a request
// then waits at most one inference for company). A nil result comes with the reason.
func DynamicBatching(s *bench.SweepResult, threads int) (*tritonpb.ModelDynamicBatching, string) {
	var base, best *bench.SweepRow
	for i := range s.Rows {
		r := &s.Rows[i]
		if r.Result == nil || r.Point.Streams != 1 || (threads > 0 && r.Point.Threads != threads) {
			continue
		}
		if r.Point.Batch == 1 {
			base = r
			continue
		}
		if s.Config.P99Budget > 0 && r.Result.Latency.P99 > s.Config.P99Budget {
			continue
		}
		if best == nil || r.Result.ItemsPerSecond > best.Result.ItemsPerSecond {
			best = r
		}
	}
	if base == nil {
		return nil, fmt.Sprintf("the batch sweep has no batch-1 point at %d thread(s) and 1 stream to compare with: sweep --sweep-batch 1,... --threads %d", threads, threads)
	}
	if best == nil {
		return nil, fmt.Sprintf("the batch sweep has no batch above 1 at %d thread(s) and 1 stream within its p99 budget %v", threads, s.Config.P99Budget)
	}
	gain := best.Result.ItemsPerSecond / base.Result.ItemsPerSecond
	if gain < MinBatchGain {
		return nil, fmt.Sprintf("the batch sweep shows batching does not pay: batch %d gives %.1f items/s vs %.1f at batch 1 (%.2fx, under %.2fx)",
			best.Point.Batch, best.Result.ItemsPerSecond, base.Result.ItemsPerSecond, gain, MinBatchGain)
	}
	delay := base.Result.Latency.P50
	if s.Config.P99Budget > 0 {
		delay = s.Config.P99Budget - best.Result.Latency.P99
	}
	delay = delay.Round(time.Microsecond)
	return &tritonpb.ModelDynamicBatching{
		PreferredBatchSize:        []int32{int32(best.Point.Batch)},
		MaxQueueDelayMicroseconds: uint64(delay / time.Microsecond),
	}, fmt.Sprintf("dynamic_batching: batch %d gave %.2fx the items/s of batch 1 in the sweep (p99 %v); queue delay %v", best.Point.Batch, gain, best.Result.Latency.P99.Round(time.Microsecond), delay)
}
