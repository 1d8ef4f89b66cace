package export

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
)

func sweepRow(batch, threads int, itemsPerS float64, p50, p99 time.Duration) bench.SweepRow {
	return bench.SweepRow{
		Point: bench.Point{Batch: batch, Threads: threads, Streams: 1},
		Result: &bench.ThroughputResult{ItemsPerSecond: itemsPerS,
			Latency: bench.Summary{P50: p50, P99: p99}},
	}
}

func TestDynamicBatching(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name      string
		budget    time.Duration
		rows      []bench.SweepRow
		preferred int32
		delayUs   uint64
		why       string
	}{
		{"pays, no budget: delay is one batch-1 p50", 0,
			[]bench.SweepRow{sweepRow(1, 2, 100, 10*ms, 12*ms), sweepRow(4, 2, 180, 22*ms, 25*ms), sweepRow(8, 2, 150, 53*ms, 60*ms)},
			4, 10000, "batch 4 gave 1.80x"},
		{"budget rules out the fastest batch", 40 * ms,
			[]bench.SweepRow{sweepRow(1, 2, 100, 10*ms, 12*ms), sweepRow(4, 2, 130, 30*ms, 35*ms), sweepRow(8, 2, 200, 40*ms, 45*ms)},
			4, 5000, "batch 4 gave 1.30x"},
		{"gain under the threshold", 0,
			[]bench.SweepRow{sweepRow(1, 2, 100, 10*ms, 12*ms), sweepRow(4, 2, 105, 38*ms, 40*ms)},
			0, 0, "does not pay"},
		{"other thread counts ignored", 0,
			[]bench.SweepRow{sweepRow(1, 2, 100, 10*ms, 12*ms), sweepRow(4, 1, 300, 10*ms, 12*ms), sweepRow(4, 2, 90, 44*ms, 50*ms)},
			0, 0, "does not pay"},
		{"no batch-1 point", 0,
			[]bench.SweepRow{sweepRow(4, 2, 300, 10*ms, 12*ms)},
			0, 0, "no batch-1 point"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &bench.SweepResult{Config: bench.SweepConfig{P99Budget: c.budget}, Rows: c.rows}
			db, why := DynamicBatching(s, 2)
			if !strings.Contains(why, c.why) {
				t.Errorf("why %q, want it to contain %q", why, c.why)
			}
			if c.preferred == 0 {
				if db != nil {
					t.Errorf("dynamic batching %v, want none", db)
				}
				return
			}
			if db == nil || len(db.PreferredBatchSize) != 1 || db.PreferredBatchSize[0] != c.preferred || db.MaxQueueDelayMicroseconds != c.delayUs {
				t.Errorf("dynamic batching %v, want preferred %d, delay %d us", db, c.preferred, c.delayUs)
			}
		})
	}
}

// A sweep report is accepted only for the artifact it measured; with one that pays, the
// written config.pbtxt has dynamic_batching and a max_batch_size that admits its batch.
func TestTritonBatchSweep(t *testing.T) {
	path, _ := artifact(t, "digits")
	a, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	sum, _, err := safefile.SHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	threads := a.Manifest.Runtime.Threads
	ms := time.Millisecond
	rep := bench.RunReport{
		Environment: bench.Environment{ModelHashes: map[string]string{"digits.torchspeed.pt": sum}},
		Sweep: &bench.SweepResult{Rows: []bench.SweepRow{
			sweepRow(1, threads, 1000, ms, 2*ms), sweepRow(16, threads, 4000, 4*ms, 5*ms)}},
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "sweep.json")
	b, _ := json.Marshal(rep)
	os.WriteFile(good, b, 0o644)
	rep.Environment.ModelHashes = map[string]string{"other.pt": "00"}
	other := filepath.Join(dir, "other.json")
	b, _ = json.Marshal(rep)
	os.WriteFile(other, b, 0o644)

	if _, err := ReadBatchSweep(other, path); err == nil || !strings.Contains(err.Error(), "another model") {
		t.Errorf("sweep of another model: %v", err)
	}
	if _, err := ReadBatchSweep(filepath.Join(dir, "missing.json"), path); err == nil {
		t.Error("missing sweep file accepted")
	}
	sweep, err := ReadBatchSweep(good, path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := WriteTriton(a, t.TempDir(), TritonOptions{BatchSweep: sweep})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ReadTritonConfig(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := WriteTorchServe(a, t.TempDir(), TorchServeOptions{BatchSweep: sweep})
	if err != nil {
		t.Fatal(err)
	}
	if ts.ModelConfig.BatchSize != 16 || ts.ModelConfig.MaxBatchDelay != 1 {
		t.Errorf("TorchServe model-config %+v: want batchSize 16, maxBatchDelay 1 (ms)", ts.ModelConfig)
	}
	db := cfg.GetDynamicBatching()
	if db == nil || len(db.PreferredBatchSize) != 1 || db.PreferredBatchSize[0] != 16 || db.MaxQueueDelayMicroseconds != 1000 || cfg.MaxBatchSize != 16 {
		t.Errorf("dynamic_batching %v, max_batch_size %d; want preferred 16, delay 1000 us, max 16", db, cfg.MaxBatchSize)
	}
}
