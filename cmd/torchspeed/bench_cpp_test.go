package main

import (
	"io"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
)

// BenchmarkBenchVsCpp checks bench's timing loop against a plain C++ loop
// (the goal: p50 within 5%): resnet18 at 2 threads, in interleaved rounds on the same
// inference thread, bench.Run over the target `torchspeed bench` times
// against Module.TimeForward; -rounds x -round-runs runs per side (200 with
// 10 x 20).
//
//	go test -run XXX -bench BenchVsCpp -benchtime 1x ./cmd/torchspeed/ -rounds 10 -round-runs 20
//
// Both loops run in this process, so under its OpenMP settings: prefix the
// command with `torchspeed launch --` to measure under torchspeed's.
func BenchmarkBenchVsCpp(b *testing.B) {
	model := fixtures.Load(b).Get(b, "resnet18").ModelPath()
	l, err := benchrun.LoadModel(benchrun.ModelSpec{Path: model, Name: "resnet18.pt"}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Model.Close()
	if err := torch.SetNumThreads(2); err != nil {
		b.Fatal(err)
	}
	inputs, err := benchrun.MakeInputs([]benchrun.InputSpec{{Shape: []int64{1, 3, 224, 224}, DType: torch.Float32}}, 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer benchrun.CloseTensors(inputs)
	target := l.Target(inputs)
	warm := bench.Options{Runs: 1, Warmup: 20}
	torch.Do(func() { _, err = bench.Run(target, warm) })
	if err != nil {
		b.Fatal(err)
	}
	var goLat, cLat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := 0; r < *rsRounds; r++ {
			benchFirst := r%2 == 0
			for j := range 2 {
				if (j == 0) == benchFirst {
					var res *bench.Result
					torch.Do(func() { res, err = bench.Run(target, bench.Options{Runs: *rsRuns}) })
					if err != nil {
						b.Fatal(err)
					}
					goLat = append(goLat, res.Samples...)
					continue
				}
				// One extra run, dropped, as bench.Run's untimed first one.
				ns, err := l.Model.Module().TimeForward(*rsRuns+1, inputs...)
				if err != nil {
					b.Fatal(err)
				}
				for _, v := range ns[1:] {
					cLat = append(cLat, time.Duration(v))
				}
			}
		}
	}
	b.StopTimer()
	gs, err := bench.Summarize(goLat)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := bench.Summarize(cLat)
	if err != nil {
		b.Fatal(err)
	}
	ratio := float64(gs.P50) / float64(cs.P50)
	b.ReportMetric(float64(gs.P50)/1e6, "bench-p50-ms")
	b.ReportMetric(float64(cs.P50)/1e6, "cpp-p50-ms")
	b.ReportMetric(ratio, "bench/cpp-p50")
	b.Logf("OpenMP/MKL environment of this process (run it under `torchspeed launch --` for torchspeed's): %v", bench.CaptureEnvironment().OpenMPEnv)
	b.Logf("%d runs per side at %d threads: bench p50 %v [%v, %v], C++ p50 %v [%v, %v], ratio %.3f (the goal: within 5%%)",
		len(goLat), torch.NumThreads(), gs.P50, gs.MedianLo, gs.MedianHi, cs.P50, cs.MedianLo, cs.MedianHi, ratio)
}
