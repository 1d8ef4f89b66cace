package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIConfigInitShapes: libtorch 1.13 keeps no input shapes in a saved model, so config
// init records the shape the user gives (--input-shape, or the --input data's) and otherwise
// leaves the shape empty with a comment saying how to fill it, which optimize refuses by key
// (exit 2) rather than running a made-up shape into the model.
func TestCLIConfigInitShapes(t *testing.T) {
	fx := fixtureDir(t)
	model := filepath.Join(fx, "digits.pt")
	data := filepath.Join(fx, "digits_in_x.npy")
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"nothing given", nil, []string{"libtorch does not save a model's input shapes", "--input-shape 1x3x224x224", "--input x=FILE.npy", "      shape: []\n"}},
		{"input shape", []string{"--input-shape", "2x1x8x8"}, []string{"      shape: [2, 1, 8, 8]\n"}},
		{"input data", []string{"--input", "x=" + data}, []string{"data: \"" + data + "\"", "dtype: float32   # the data's", "# shape from the data: [1, 1, 8, 8]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := cli(t, t.TempDir(), nil, append([]string{"config", "init", "-m", model}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("config lacks %q:\n%s", w, stdout)
				}
			}
			if strings.Contains(stdout, "shape: [1]") {
				t.Errorf("config guesses shape [1]:\n%s", stdout)
			}
		})
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	if _, stderr, code := cli(t, dir, nil, "config", "init", "-m", model, "-o", cfg); code != 0 {
		t.Fatalf("config init -o: exit %d: %s", code, stderr)
	}
	_, stderr, code := cli(t, dir, nil, "optimize", "--quiet", "-c", cfg)
	if code != 2 || !strings.Contains(stderr, "model.inputs[0].shape") {
		t.Errorf("optimize with the shape left empty: exit %d (want 2): %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Error("optimize made its output folder for a config it refused")
	}
}
