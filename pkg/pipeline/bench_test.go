package pipeline

import (
	"context"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// BenchmarkArtifactVsHandMade optimizes each fixture (FP32 passes only), then measures the
// artifact, loaded as users load it, interleaved with the variants an engineer would make by
// hand with the same libtorch: frozen, frozen + optimize_for_inference, and channels-last +
// frozen + optimize_for_inference. It reports the artifact's p50 over the best hand-made p50
// (target: <= 1.0, within noise). Rounds run in shuffled order: a small model measured right
// after an oneDNN one pays for the caches the other left behind, which fixed order would pin on
// one target.
func BenchmarkArtifactVsHandMade(b *testing.B) {
	man := fixtures.Load(b)
	for _, name := range []string{"resnet18", "mobilenet_v2", "transformer_traced", "digits"} {
		b.Run(name, func(b *testing.B) {
			f := man.Get(b, name)
			cfg := testConfig(b, f, b.TempDir())
			cfg.Bench.StageRuns = 10
			rep, err := Run(context.Background(), cfg, testOptions())
			if err != nil {
				b.Fatal(err)
			}
			art, err := torchspeed.Load(*rep.Artifact, torchspeed.LoadOptions{KeepThreads: true})
			if err != nil {
				b.Fatal(err)
			}
			defer art.Close()
			orig, err := torch.Load(f.ModelPath())
			if err != nil {
				b.Fatal(err)
			}
			defer orig.Close()
			orig.Eval()
			frozen, err := orig.Freeze()
			if err != nil {
				b.Fatal(err)
			}
			defer frozen.Close()
			ofi, err := frozen.OptimizeForInference()
			if err != nil {
				b.Fatal(err)
			}
			defer ofi.Close()
			in := tensors(b, f.InputArrays(b))
			targets := []bench.Target{
				&target{ctx: context.Background(), name: "artifact", c: &candidate{mod: art.Module(), channelsLast: art.Manifest.ChannelsLast}, inputs: in},
				&target{ctx: context.Background(), name: "frozen", c: &candidate{mod: frozen}, inputs: in},
				&target{ctx: context.Background(), name: "frozen+ofi", c: &candidate{mod: ofi}, inputs: in},
			}
			if len(f.Inputs) == 1 && len(f.Inputs[0].Shape) == 4 {
				cl, err := orig.Clone()
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				if _, err := cl.ChannelsLast(); err != nil {
					b.Fatal(err)
				}
				clf, err := cl.Freeze()
				if err != nil {
					b.Fatal(err)
				}
				defer clf.Close()
				clo, err := clf.OptimizeForInference()
				if err != nil {
					b.Fatal(err)
				}
				defer clo.Close()
				targets = append(targets, &target{ctx: context.Background(), name: "cl+frozen+ofi", c: &candidate{mod: clo, channelsLast: true}, inputs: in})
			}
			b.ResetTimer()
			cmp, err := bench.Compare(targets, bench.CompareOptions{Options: bench.Options{Runs: max(b.N, 20), Warmup: 3}, Order: bench.Shuffled, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			bestHand := cmp.Results[1].Stats.P50
			for _, r := range cmp.Results[2:] {
				bestHand = min(bestHand, r.Stats.P50)
			}
			artP50 := cmp.Results[0].Stats.P50
			b.ReportMetric(float64(artP50.Microseconds()), "artifact-p50-us")
			b.ReportMetric(float64(bestHand.Microseconds()), "best-hand-p50-us")
			b.ReportMetric(float64(artP50)/float64(bestHand), "artifact/best-hand")
			for _, r := range cmp.Results {
				b.Logf("%-14s p50 %v p95 %v", r.Name, r.Stats.P50, r.Stats.P95)
			}
		})
	}
}
