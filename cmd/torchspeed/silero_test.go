package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/npy"
)

// sileroBound is how far the artifact's speech probability may move from PyTorch's on any
// chunk of the stream. The optimized graph computes the same network in float32 with sums
// reordered (constant folding, fast_conv's blocked GEMMs); a reordered float32 sum of K
// products differs by at most gamma_K = K*u/(1-K*u) (u = 2^-24) of the sum of its terms'
// magnitudes. The longest reductions in Silero VAD are the encoder's 3-tap convolutions over
// 258 channels (774 products), so K = 1024 covers every one; twice gamma_1024 (1.2e-4) bounds a
// probability in [0, 1] after the sigmoid (slope at most 1/4) with the error of the layers
// before it, and lies far below the 0.15 gap between the authors' speech and silence
// thresholds (0.5 and 0.35).
func sileroBound() float64 {
	const u = 1.0 / (1 << 24)
	const k = 1024.0
	return 2 * k * u / (1 - k*u)
}

// Silero VAD v4 and v5 as their authors ship them, optimized with their bench-peers config:
// the artifact's speech probability over the whole real-speech stream, called in order from a
// reset state, stays within sileroBound of PyTorch's, and bench runs the stream past its end
// (through the reset) at the artifact's settings.
func TestCLISileroVADStream(t *testing.T) {
	man := fixtures.Load(t)
	for _, name := range []string{"silero_v4", "silero_v5"} {
		t.Run(name, func(t *testing.T) {
			f, ok := man.Lookup(name)
			if !ok {
				t.Fatalf("fixture %s missing from %s: rebuild with `make fixtures`", name, man.Dir)
			}
			s := f.Stream(t, "forward")
			x := f.Path(s.Args[0].Tensor.File)
			ref := f.Array(t, s.Outputs[0])
			want, err := ref.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			checkSpeechAndSilence(t, want)
			art := optimizeSilero(t, f)
			dir := t.TempDir()
			out := filepath.Join(dir, "probs.npz")
			inputs := []string{"--input", "x=seq:" + x, "--input", "sr=int:16000"}
			if _, stderr, code := cli(t, "", nil, append([]string{"run", "-m", art, "--save", out}, inputs...)...); code != 0 {
				t.Fatalf("run of the artifact over the stream: exit %d\n%s", code, stderr)
			}
			arrays, _, err := npy.ReadNPZ(out)
			if err != nil {
				t.Fatal(err)
			}
			got, err := arrays["output_0"].Float32s()
			if err != nil || len(got) != len(want) {
				t.Fatalf("artifact output: %d values (%v), want %d, one per chunk", len(got), err, len(want))
			}
			worst, at := 0.0, 0
			for i := range want {
				if d := math.Abs(float64(got[i]) - float64(want[i])); d > worst {
					worst, at = d, i
				}
			}
			if worst > sileroBound() {
				t.Errorf("speech probability of chunk %d: %.6f, PyTorch %.6f: difference %.3g > %.3g", at, got[at], want[at], worst, sileroBound())
			}
			t.Logf("%s: %d chunks, max abs difference %.3g (bound %.3g)", name, len(want), worst, sileroBound())
			runs := len(want) + 38
			stdout, stderr, code := cli(t, "", nil, append([]string{"bench", "-m", art, "--runs", strconv.Itoa(runs), "--warmup", "1",
				"--interrupts", "0", "--json"}, inputs...)...)
			if code != 0 {
				t.Fatalf("bench over the stream: exit %d\n%s", code, stderr)
			}
			var rep bench.RunReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("bench --json: %v\n%s", err, stdout)
			}
			if len(rep.Results) != 1 || len(rep.Results[0].Samples) != runs {
				t.Fatalf("bench: want one result of %d calls (the stream and 38 more after its reset), got %+v", runs, rep.Results)
			}
		})
	}
}

// checkSpeechAndSilence makes sure the stream exercises both decisions.
func checkSpeechAndSilence(t *testing.T, probs []float32) {
	t.Helper()
	speech, silence := 0, 0
	for _, p := range probs {
		if p > 0.5 {
			speech++
		} else if p < 0.1 {
			silence++
		}
	}
	if speech < len(probs)/10 || silence < len(probs)/10 {
		t.Fatalf("the reference stream has %d speech and %d silence chunks of %d: want real speech with pauses", speech, silence, len(probs))
	}
}

// optimizeSilero runs optimize with scripts/peers/configs/NAME.yaml, its paths pointed at the
// fixtures in use and a temporary output folder, and returns the artifact.
func optimizeSilero(t *testing.T, f fixtures.Fixture) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "scripts", "peers", "configs", f.Name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := strings.ReplaceAll(string(raw), "../../../build/fixtures", f.Dir)
	cfg = strings.ReplaceAll(cfg, "../../../build/peers/"+f.Name, dir)
	cfg += "bench:\n  runs: 20\n  stage_runs: 10\n"
	path := filepath.Join(dir, "silero.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := cli(t, "", nil, "optimize", "-c", path, "--threads", "1", "--quiet"); code != 0 {
		t.Fatalf("optimize: exit %d\n%s\nconfig:\n%s", code, stderr, cfg)
	}
	art := filepath.Join(dir, f.Name+".torchspeed.pt")
	if _, err := os.Stat(art); err != nil {
		t.Fatal(err)
	}
	return art
}
