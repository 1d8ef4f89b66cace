package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// The fixtures that look like third-party models as shipped (a Silero-like LSTM stream model
// with an int argument, a model with an extra public method and uint8 input, one calling a
// custom op library, CNNs already INT8 (static and dynamic), a mobile-optimized CNN) each go
// through run, bench with two streams, optimize, and run of the artifact, which keeps the
// expected precision and methods.
func TestCLIRealModelLookalikes(t *testing.T) {
	fx := fixtureDir(t)
	path := func(f string) string { return filepath.Join(fx, f) }
	opLib := path("libtsfixture_ops.so")
	for _, c := range []struct {
		name      string
		args      []string // run and bench
		inputs    string   // model.inputs in a config
		opLibs    []string
		precision string
		method    string // a public method the artifact must keep
	}{
		{"vad_lstm", []string{"--input", "x=seq:" + path("vad_lstm_in_x.npy"), "--input", "sr=int:16000"},
			"    - {name: x, data: \"seq:" + path("vad_lstm_in_x.npy") + "\"}\n    - {name: sr, type: int, value: 16000}\n", nil, "fp32", "reset_states"},
		{"classes", []string{"--input", "x=seq:" + path("classes_in_x.npy")},
			"    - {name: x, dtype: uint8, data: \"seq:" + path("classes_in_x.npy") + "\"}\n", nil, "fp32", "get_classes"},
		{"custom_op", []string{"--input", "x=" + path("custom_op_in_x.npy"), "--op-library", opLib},
			"    - {name: x, data: " + path("custom_op_in_x.npy") + "}\n", []string{opLib}, "fp32", ""},
		{"int8_cnn", []string{"--input", "x=" + path("int8_cnn_in_x.npy")},
			"    - {name: x, data: " + path("int8_cnn_in_x.npy") + "}\n", nil, "int8-static", ""},
		{"int8_dynamic", []string{"--input", "x=" + path("int8_dynamic_in_x.npy")},
			"    - {name: x, data: " + path("int8_dynamic_in_x.npy") + "}\n", nil, "int8-dynamic", ""},
		{"mobile_cnn", []string{"--input", "x=" + path("mobile_cnn_in_x.npy")},
			"    - {name: x, data: " + path("mobile_cnn_in_x.npy") + "}\n", nil, "fp32", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			model := path(c.name + ".pt")
			if _, stderr, code := cli(t, "", nil, append([]string{"run", "-m", model}, c.args...)...); code != 0 {
				t.Fatalf("run: exit %d\n%s", code, stderr)
			}
			if _, stderr, code := cli(t, "", nil, append([]string{"bench", "-m", model, "--streams", "2", "--runs", "4", "--warmup", "1",
				"--interrupts", "0"}, c.args...)...); code != 0 {
				t.Fatalf("bench --streams 2: exit %d\n%s", code, stderr)
			}
			dir := t.TempDir()
			cfg := fmt.Sprintf("model:\n  path: %s\n  inputs:\n%s", model, c.inputs)
			if len(c.opLibs) > 0 {
				cfg += "  op_libraries: [" + strings.Join(c.opLibs, ", ") + "]\n"
			}
			cfg += fmt.Sprintf("bench:\n  runs: 10\n  stage_runs: 5\noutput:\n  dir: %s\n", dir)
			cfgPath := filepath.Join(dir, "model.yaml")
			if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, stderr, code := cli(t, "", nil, "optimize", "-c", cfgPath, "--quiet"); code != 0 {
				t.Fatalf("optimize: exit %d\n%s\nconfig:\n%s", code, stderr, cfg)
			}
			art := filepath.Join(dir, c.name+".torchspeed.pt")
			man, err := torchspeed.VerifyArchive(art)
			if err != nil || man == nil {
				t.Fatalf("artifact: %v", err)
			}
			if man.Precision != c.precision {
				t.Errorf("manifest precision %q, want %q", man.Precision, c.precision)
			}
			if c.method != "" && !slices.Contains(man.PreserveMethods, c.method) && man.ResetMethod != c.method {
				t.Errorf("the artifact does not keep %s: preserve %v, reset %q", c.method, man.PreserveMethods, man.ResetMethod)
			}
			runArt := []string{"run", "-m", art}
			for _, l := range c.opLibs {
				runArt = append(runArt, "--op-library", l)
			}
			if _, stderr, code := cli(t, "", nil, runArt...); code != 0 {
				t.Fatalf("run of the artifact: exit %d\n%s", code, stderr)
			}
		})
	}
}
