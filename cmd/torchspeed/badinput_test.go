package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
)

// TestCLIBadInputBeforeWork: what the user typed or configured is checked before any model
// work: each case exits 2 with a message naming the input, in the time it takes to start,
// and leaves no output folder behind (the folder is made when work starts).
func TestCLIBadInputBeforeWork(t *testing.T) {
	bin := torchspeedBin(t)
	fx := fixtureDir(t)
	model := filepath.Join(fx, "digits.pt")
	missing := filepath.Join(t.TempDir(), "missing")
	// An engine this libtorch lacks (Debian's 1.13 has onednn and qnnpack, official 2.x
	// builds have x86 and fbgemm).
	supported, err := torch.SupportedQEngines()
	if err != nil {
		t.Fatal(err)
	}
	absent := ""
	for _, e := range []string{"x86", "fbgemm", "onednn"} {
		if !slices.Contains(supported, e) {
			absent = e
			break
		}
	}
	config := func(extra string) string {
		return "model:\n  path: " + model + "\n  inputs:\n    - name: x\n      shape: [1, 1, 8, 8]\n" + extra
	}
	cases := []struct {
		name string
		args []string
		cfg  string // a config body, passed with -c
		want string
	}{
		{"model flag", []string{"optimize", "-m", missing + ".pt", "--input-shape", "1x1x8x8"}, "", "model.path"},
		{"model in config", nil, strings.Replace(config(""), model, missing+".pt", 1), "model.path"},
		{"model is a folder", []string{"optimize", "-m", fx, "--input-shape", "1x1x8x8"}, "", "is a folder"},
		{"engine", []string{"optimize", "-m", model, "--input-shape", "1x1x8x8", "--quantize", "dynamic", "--engine", absent}, "", "quantize.engine"},
		{"engine in config", nil, config("quantize:\n  mode: auto\n  engine: " + absent + "\n"), "quantize.engine"},
		{"calibration", []string{"optimize", "-m", model, "--input-shape", "1x1x8x8", "--quantize", "static", "--calibration", missing + ".npy"}, "", "calibration.path"},
		{"validation data", nil, config("validation:\n  data:\n    path: " + missing + ".npy\n"), "validation.data.path"},
		{"input data", nil, "model:\n  path: " + model + "\n  inputs:\n    - name: x\n      data: " + missing + ".npy\n", "model.inputs[0].data"},
		{"op library", []string{"optimize", "-m", model, "--input-shape", "1x1x8x8", "--op-library", missing + ".so"}, "", "model.op_libraries[0]"},
		{"search", []string{"optimize", "-m", model, "--input-shape", "1x1x8x8", "--search", "deep"}, "", "optimize.search"},
		{"budget", []string{"optimize", "-m", model, "--input-shape", "1x1x8x8", "--budget", "5s"}, "", "optimize.budget"},
		{"budget in config", nil, config("optimize:\n  budget: -1m\n"), "optimize.budget"},
		{"positional model", []string{"optimize", model}, "", "torchspeed optimize --help"},
		{"bench positional model", []string{"bench", model}, "", "torchspeed bench --help"},
		{"run positional model", []string{"run", model}, "", "torchspeed run --help"},
		{"export missing artifact", []string{"export", "triton", "-m", missing + ".pt", "--output", missing}, "", "--model"},
		{"export bad name", []string{"export", "torchserve", "-m", model, "-o", missing, "--name", ".."}, "", "--name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if slices.Contains(c.args, "") || strings.Contains(c.cfg, "engine: \n") {
				t.Skipf("this libtorch has every engine (%v)", supported)
			}
			out := filepath.Join(t.TempDir(), "out")
			args := c.args
			if c.cfg != "" {
				args = []string{"optimize", "-c", writeConfig(t, c.cfg)}
			}
			if args[0] == "optimize" {
				args = append(args, "--quiet", "-o", out)
			}
			start := time.Now()
			b, err := exec.Command(bin, args...).CombinedOutput()
			took := time.Since(start)
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != 2 || !strings.Contains(string(b), c.want) {
				t.Fatalf("torchspeed %s: exit %d (want 2), output lacks %q:\n%s", strings.Join(args, " "), code, c.want, b)
			}
			// Starting up (libtorch, probing the CPU) takes well under a second; timing the
			// FP32 candidates of even the smallest fixture takes longer.
			if took > 10*time.Second {
				t.Errorf("took %v: the input was checked after work started", took)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s was made by a run that should have stopped before any work", out)
			}
		})
	}
}
