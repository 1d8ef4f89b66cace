package quant_test

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/quant"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// BenchmarkINT8VsFP32 times, interleaved in one run at batch 1, the plain traced FP32 model,
// the best FP32 artifact (frozen + optimize_for_inference) and the INT8 model torchspeed makes
// (static, min/max, per-channel weights, auto engine), and reports p50s, the INT8 speedups and
// the INT8 cosine vs FP32 on the calibration images (the fixtures have no other real data, so
// this figure is optimistic). Threads: TORCHSPEED_BENCH_THREADS (default: all CPUs); activation
// observer: TORCHSPEED_BENCH_ACTIVATION (default minmax). b.N is the number of interleaved
// rounds (use -benchtime 200x).
func BenchmarkINT8VsFP32(b *testing.B) {
	man := fixtures.Load(b)
	for _, name := range []string{"resnet18", "resnet50"} {
		f, ok := man.Lookup(name)
		if !ok {
			continue // resnet50 is skipped by FIXTURES_SKIP_LARGE=1
		}
		b.Run(name, func(b *testing.B) { benchINT8(b, man, f) })
	}
}

func benchINT8(b *testing.B, man *fixtures.Manifest, f fixtures.Fixture) {
	threads := runtime.NumCPU()
	if s := os.Getenv("TORCHSPEED_BENCH_THREADS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("TORCHSPEED_BENCH_THREADS=%q: %v", s, err)
		}
		threads = n
	}
	if err := torch.SetNumThreads(threads); err != nil {
		b.Fatal(err)
	}
	defer torch.SetNumThreads(1)
	ctx := context.Background()
	m := load(b, f)
	if err := m.Eval(); err != nil {
		b.Fatal(err)
	}
	// Calibration: the resnet18 fixture's 16 images; the others (resnet50) borrow them.
	cf := f
	if f.Calib == nil {
		cf = man.Get(b, "resnet18")
	}
	calib := dataset(b, cf, cf.Calib, 4)
	opts := quant.DefaultOptions()
	if a := os.Getenv("TORCHSPEED_BENCH_ACTIVATION"); a != "" {
		opts.Observer = a
	}
	start := time.Now()
	q, rep, err := quant.Quantize(ctx, m, calib, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	quantTime := time.Since(start)
	frozen, err := m.Freeze()
	if err != nil {
		b.Fatal(err)
	}
	defer frozen.Close()
	best, err := frozen.OptimizeForInference()
	if err != nil {
		b.Fatal(err)
	}
	defer best.Close()

	// Accuracy proxy: cosine vs FP32 on the calibration images plus the saved input.
	val, err := validate.FromArrays([]*npy.Array{cf.Array(b, cf.Calib.Inputs[0])}, nil, []string{"x"}, 4)
	if err != nil {
		b.Fatal(err)
	}
	res, err := validate.Compare(ctx, m, q, val)
	if err != nil {
		b.Fatal(err)
	}

	x := f.InputArrays(b)[0]
	in, err := torch.NewTensorAny(x.Data, x.Shape)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	models := []*torch.Module{m, best, q}
	// Warm up (first runs prepack, allocate and tune).
	for _, mod := range models {
		if _, err := mod.TimeForward(5, in); err != nil {
			b.Fatal(err)
		}
	}
	samples := make([][]int64, len(models))
	b.ResetTimer()
	for r := 0; r < b.N; r++ {
		for k := range models {
			i := (k + r) % len(models)
			ns, err := models[i].TimeForward(1, in)
			if err != nil {
				b.Fatal(err)
			}
			samples[i] = append(samples[i], ns[0])
		}
	}
	b.StopTimer()
	p50 := make([]time.Duration, len(models))
	for i, s := range samples {
		slices.Sort(s)
		p50[i] = time.Duration(s[len(s)/2])
	}
	speedPlain := float64(p50[0]) / float64(p50[2])
	speedBest := float64(p50[1]) / float64(p50[2])
	b.ReportMetric(float64(p50[0])/1e6, "fp32-p50-ms")
	b.ReportMetric(float64(p50[1])/1e6, "fp32opt-p50-ms")
	b.ReportMetric(float64(p50[2])/1e6, "int8-p50-ms")
	b.ReportMetric(speedPlain, "speedup-vs-plain")
	b.ReportMetric(speedBest, "speedup-vs-opt")
	b.ReportMetric(res.Cosine, "cosine")
	d := quant.DecideINT8(p50[2], min(p50[0], p50[1]), 1, false)
	b.Logf("%s, %d threads, engine %s, activations %s, reduce_range %v, quantized in %v: FP32 plain p50 %v, FP32 frozen+optimized p50 %v, INT8 p50 %v: %.2fx vs plain, %.2fx vs optimized; cosine vs FP32 %.5f over %d images; guard: %s",
		f.Name, threads, rep.Engine, rep.Activation, rep.ReduceRange, quantTime.Round(time.Millisecond), p50[0], p50[1], p50[2], speedPlain, speedBest, res.Cosine, res.Samples, d.Reason)
}
