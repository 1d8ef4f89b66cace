package torchspeed

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
)

// BenchmarkPredictHandoff splits Predict's per-call time, on the cases in
// TORCHSPEED_HANDOFF_CASES (model:threads, comma-separated; default below), into what the model
// costs and what the Go API adds. Modes, interleaved in rounds in one process (order shuffled
// within each round):
//
//	cxx     Module.TimeForward: the C++ loop on the inference thread, no Go per call
//	locked  ForwardOnThisThread in a loop already on the inference thread: no hand-off
//	sleep   Predict with both sides of the hand-off sleeping at once (SetHandoffSpin(0, 0))
//	serve   Predict with only the inference thread spinning for its next job
//	spin    Predict with the default spins on both sides
//
// Each Predict mode runs a Go service's call: the input tensor made from a Go slice (timed as
// new-us), Predict (timed per mode), the output copied into a Go slice and closed (out-us). Each ratio comes
// with a 95% bootstrap interval. Models are the fixtures, or the artifacts
// TORCHSPEED_HANDOFF_ARTIFACTS/<name>/<name>.torchspeed.pt when that folder is set (as
// `make bench-peers` leaves them in build/peers).
func BenchmarkPredictHandoff(b *testing.B) {
	cases := os.Getenv("TORCHSPEED_HANDOFF_CASES")
	if cases == "" {
		cases = "transformer_traced:1,transformer_traced:2,digits:1,resnet18:2,mobilenet_v2:2"
	}
	defServe, defWait := torch.HandoffSpin()
	defer func() { _ = torch.SetHandoffSpin(defServe, defWait) }()
	for _, c := range strings.Split(cases, ",") {
		name, th, _ := strings.Cut(strings.TrimSpace(c), ":")
		threads, err := strconv.Atoi(th)
		if err != nil || threads < 1 {
			b.Fatalf("TORCHSPEED_HANDOFF_CASES: %q: want model:threads", c)
		}
		b.Run(fmt.Sprintf("%s/threads=%d", name, threads), func(b *testing.B) {
			benchHandoff(b, name, threads, defServe, defWait)
		})
	}
}

type handoffMode struct {
	name        string
	serve, wait time.Duration
}

func benchHandoff(b *testing.B, name string, threads int, defServe, defWait time.Duration) {
	f := fixtures.Load(b).Get(b, name)
	path := f.ModelPath()
	if dir := os.Getenv("TORCHSPEED_HANDOFF_ARTIFACTS"); dir != "" {
		path = filepath.Join(dir, name, name+".torchspeed.pt")
	}
	m, err := Load(path, LoadOptions{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	arrays := f.InputArrays(b)
	if len(arrays) != 1 {
		b.Skipf("%s takes %d inputs; the benchmark feeds one", name, len(arrays))
	}
	x, err := torch.NewTensorAny(arrays[0].Data, arrays[0].Shape)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	direct := []*torch.Tensor{x}
	if m.Manifest != nil && m.Manifest.ChannelsLast {
		conv, release, err := ChannelsLastInputs(direct)
		if err != nil {
			b.Fatal(err)
		}
		defer release()
		direct = conv
	}
	for i := 0; i < 20; i++ { // profiling runs, first-call allocations
		outs, err := m.Predict(x)
		if err != nil {
			b.Fatal(err)
		}
		torch.CloseOutputs(outs)
	}
	modes := []handoffMode{{"sleep", 0, 0}, {"serve", defServe, 0}, {"spin", defServe, defWait}}
	const round = 20
	ns := map[string][]float64{}
	var newNs, outNs []float64
	rng := rand.New(rand.NewPCG(1, uint64(threads)))
	runMode := func(mode string) {
		switch mode {
		case "cxx":
			t, err := m.Module().TimeForward(round, direct...)
			if err != nil {
				b.Fatal(err)
			}
			for _, v := range t {
				ns[mode] = append(ns[mode], float64(v))
			}
		case "locked":
			var ferr error
			torch.Do(func() {
				for i := 0; i < round && ferr == nil; i++ {
					t0 := time.Now()
					var outs []torch.Output
					outs, ferr = m.Module().ForwardOnThisThread(direct...)
					el := time.Since(t0)
					torch.CloseOutputs(outs)
					ns[mode] = append(ns[mode], float64(el.Nanoseconds()))
				}
			})
			if ferr != nil {
				b.Fatal(ferr)
			}
		default:
			i := slices.IndexFunc(modes, func(hm handoffMode) bool { return hm.name == mode })
			if err := torch.SetHandoffSpin(modes[i].serve, modes[i].wait); err != nil {
				b.Fatal(err)
			}
			for k := 0; k < round; k++ {
				// A Go service's call: input from a Go slice, Predict, output back to one.
				t0 := time.Now()
				in, err := torch.NewTensorAny(arrays[0].Data, arrays[0].Shape)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				outs, err := m.Predict(in)
				t2 := time.Now()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := outs[0].Tensor.Float32s(); err != nil {
					b.Fatal(err)
				}
				torch.CloseOutputs(outs)
				in.Close()
				t3 := time.Now()
				newNs = append(newNs, float64(t1.Sub(t0).Nanoseconds()))
				ns[mode] = append(ns[mode], float64(t2.Sub(t1).Nanoseconds()))
				outNs = append(outNs, float64(t3.Sub(t2).Nanoseconds()))
			}
		}
	}
	order := []string{"cxx", "locked", "sleep", "serve", "spin"}
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, mode := range order {
			runMode(mode)
		}
	}
	b.StopTimer()
	for _, mode := range []string{"cxx", "locked", "sleep", "serve", "spin"} {
		b.ReportMetric(medianOf(ns[mode])/1e3, mode+"-p50-us")
	}
	b.ReportMetric(medianOf(newNs)/1e3, "new-us")
	b.ReportMetric(medianOf(outNs)/1e3, "out-us")
	if b.N < 100 {
		return // go test's first, one-iteration run: too few samples to compare
	}
	var lines []string
	for _, p := range [][2]string{{"cxx", "locked"}, {"locked", "sleep"}, {"locked", "spin"}, {"sleep", "serve"}, {"sleep", "spin"}} {
		r, lo, hi, err := bench.RatioOfMediansCI(ns[p[0]], ns[p[1]], 0.95, 1000, 1)
		if err != nil {
			b.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("%s/%s %.3f [%.3f, %.3f]", p[1], p[0], r, lo, hi))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("n=%d per mode; %s; load average %s", len(ns["cxx"]), strings.Join(lines, "; "), strings.TrimSpace(string(load)))
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
