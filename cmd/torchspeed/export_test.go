package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// export as a user runs it: bad flags and inputs exit with the right code and a message that
// names the input; a real export prints the files and the measured cost (--json for scripts).
func TestCLIExport(t *testing.T) {
	bin := torchspeedBin(t)
	fx, err := fixtures.Find()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cfg := writeConfig(t, "model:\n  path: "+fx+"/digits.pt\n  inputs:\n    - name: x\n      shape: [1, 1, 8, 8]\noutput:\n  dir: "+out+"\nruntime:\n  threads: 1\nbench:\n  runs: 5\n  stage_runs: 3\n")
	if b, err := exec.Command(bin, "optimize", "--quiet", "-c", cfg).CombinedOutput(); err != nil {
		t.Fatalf("optimize: %v\n%s", err, b)
	}
	artifact := filepath.Join(out, "digits.torchspeed.pt")
	repo := t.TempDir()
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no model", []string{"export", "triton", "-o", repo}, 2, "--model"},
		{"bad instances", []string{"export", "triton", "-m", artifact, "-o", repo, "--instances", "-2"}, 2, "--instances -2"},
		{"missing artifact", []string{"export", "torchserve", "-m", filepath.Join(out, "nope.pt"), "-o", repo}, 2, "nope.pt"},
		{"bad name", []string{"export", "triton", "-m", artifact, "--output", repo, "--name", "a/b"}, 2, `--name: model name "a/b"`},
		{"positional artifact", []string{"export", "triton", artifact}, 2, "torchspeed export triton --help"},
		{"plain TorchScript", []string{"export", "triton", "-m", fx + "/digits.pt", "-o", repo}, 1, "no torchspeed manifest"},
		{"params without measuring", []string{"export", "triton", "-m", artifact, "-o", repo, "--measure=false", "--measure-params"}, 2, "--measure-params"},
		{"sweep of nothing", []string{"export", "triton", "-m", artifact, "-o", repo, "--batch-sweep", cfg}, 2, "not a `torchspeed bench --json` report"},
		{"kserve memory not a quantity", []string{"export", "kserve", "-m", artifact, "-o", repo, "--memory", "2GB"}, 2, `--memory "2GB"`},
		{"kserve name not a Kubernetes name", []string{"export", "kserve", "-m", artifact, "-o", repo, "--name", "Digits_1"}, 2, "not a Kubernetes resource name"},
		{"kserve negative instances", []string{"export", "kserve", "-m", artifact, "-o", repo, "--instances", "-1"}, 2, "--instances -1"},
		{"kserve plain TorchScript", []string{"export", "kserve", "-m", fx + "/digits.pt", "-o", repo}, 1, "no torchspeed manifest"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := exec.Command(bin, c.args...).CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != c.code || !strings.Contains(string(b), c.want) {
				t.Fatalf("exit %d (want %d), output lacks %q:\n%s", code, c.code, c.want, b)
			}
		})
	}
	b, err := exec.Command(bin, "export", "triton", "-m", artifact, "-o", repo, "--runs", "10", "--json").Output()
	if err != nil {
		t.Fatalf("export triton: %v\n%s", err, b)
	}
	var res struct {
		ConfigPath string   `json:"config_path"`
		ModelPath  string   `json:"model_path"`
		Notes      []string `json:"notes"`
		Cost       struct {
			PlainP50Ms float64 `json:"plain_p50_ms"`
			Sentence   string  `json:"sentence"`
			Params     *struct {
				Settings []struct {
					Setting string  `json:"setting"`
					P50Ms   float64 `json:"p50_ms"`
				} `json:"settings"`
				Chosen string `json:"chosen"`
			} `json:"triton_params"`
		} `json:"cost"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("--json output: %v\n%s", err, b)
	}
	if res.ConfigPath != filepath.Join(repo, "digits", "config.pbtxt") || res.Cost.PlainP50Ms <= 0 || !strings.HasPrefix(res.Cost.Sentence, "Triton will run this model at p50 ") {
		t.Errorf("export triton --json: %s", b)
	}
	for _, p := range []string{res.ConfigPath, res.ModelPath} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
	if p := res.Cost.Params; p == nil || len(p.Settings) != 5 || p.Chosen == "" || p.Settings[0].P50Ms <= 0 {
		t.Errorf("export triton --json: no executor setting measurement: %s", b)
	}
	// Text output: the table of settings, and --measure-params=false leaves the defaults.
	b, err = exec.Command(bin, "export", "triton", "-m", artifact, "-o", repo, "--runs", "5", "--overwrite").Output()
	if err != nil {
		t.Fatalf("export triton: %v\n%s", err, b)
	}
	for _, want := range []string{"Triton backend parameters, measured", "inference mode off", "<- chosen", "Triton will run this model at p50 "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("export triton output lacks %q:\n%s", want, b)
		}
	}
	b, err = exec.Command(bin, "export", "triton", "-m", artifact, "-o", repo, "--runs", "5", "--overwrite", "--measure-params=false").Output()
	if err != nil {
		t.Fatalf("export triton --measure-params=false: %v\n%s", err, b)
	}
	if strings.Contains(string(b), "backend parameters, measured") || !strings.Contains(string(b), "not measured (--measure-params=false)") {
		t.Errorf("export triton --measure-params=false output:\n%s", b)
	}
	dir := t.TempDir()
	b, err = exec.Command(bin, "export", "torchserve", "-m", artifact, "--output", dir, "--measure=false", "--workers", "2").Output()
	if err != nil {
		t.Fatalf("export torchserve: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "torch-model-archiver --model-name digits ") || strings.Contains(string(b), "will run this model") {
		t.Errorf("export torchserve --measure=false output:\n%s", b)
	}
	// --out, the old name of --output, still works and says what to use instead.
	old := t.TempDir()
	b, err = exec.Command(bin, "export", "torchserve", "-m", artifact, "--out", old, "--measure=false").CombinedOutput()
	if err != nil || !strings.Contains(string(b), "use --output") {
		t.Errorf("export torchserve --out: %v\n%s", err, b)
	}
	if _, err := os.Stat(filepath.Join(old, "config.properties")); err != nil {
		t.Errorf("export torchserve --out wrote nothing there: %v", err)
	}
	// The TorchServe export prints its own cost line, and no Triton parameter table.
	b, err = exec.Command(bin, "export", "torchserve", "-m", artifact, "-o", t.TempDir(), "--runs", "5").Output()
	if err != nil {
		t.Fatalf("export torchserve: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "TorchServe will run this model at p50 ") || strings.Contains(string(b), "backend parameters, measured") {
		t.Errorf("export torchserve output:\n%s", b)
	}
	props, _ := os.ReadFile(filepath.Join(dir, "config.properties"))
	if !strings.Contains(string(props), "default_workers_per_model=2\n") {
		t.Errorf("--workers 2: config.properties:\n%s", props)
	}
}
