package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/fixtures"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// torchspeedBin builds the CLI once for the tests that run it as a user would.
func torchspeedBin(t testing.TB) string {
	checkWrittenReports(t)
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "torchspeed-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "torchspeed")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = err
			t.Logf("%s", out)
		}
	})
	if binErr != nil {
		t.Fatalf("go build: %v", binErr)
	}
	return binPath
}

// fixtureDir is the fixture folder (TORCHSPEED_FIXTURES, else build/fixtures), as every other
// package's tests find it.
func fixtureDir(t *testing.T) string { return fixtures.Dir(t) }

func writeConfig(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCLIOptimizeExitCodes(t *testing.T) {
	bin := torchspeedBin(t)
	fx := fixtureDir(t)
	out := t.TempDir()
	base := "model:\n  path: " + fx + "/digits.pt\n  inputs:\n    - name: x\n      shape: [1, 1, 8, 8]\noutput:\n  dir: " + out + "\nbench:\n  runs: 5\n  stage_runs: 3\n"
	cases := []struct {
		name string
		body string
		args []string
		code int
		want string
	}{
		{"typo key", base + "runtime:\n  thread: 2\n", nil, 2, "thread"},
		{"wrong type", base + "runtime:\n  threads: two\n", nil, 2, "runtime.threads"},
		{"missing model", strings.Replace(base, "digits.pt", "nope.pt", 1), nil, 2, "file not found"},
		{"bad flag value", base, []string{"--quantize", "int2"}, 2, "quantize.mode"},
		// The last line: the wall time with the CPU time of the process tree and the load.
		{"took", base, nil, 0, "s of CPU ("},
		// INT8 that fails its thresholds: required (quantize.force), exit 3; asked for but not
		// required, the FP32 result is kept with a warning.
		{"validation fails", base + "quantize:\n  mode: static\n  force: true\n  fallback: false\n  observer: minmax\ncalibration:\n  path: " + fx + "/digits_calib.npy\n  limit: 2\nvalidation:\n  min_cosine: 0.9999999\n", nil, 3, "validation"},
		{"validation fails, FP32 kept", base + "quantize:\n  mode: static\n  fallback: false\n  observer: minmax\ncalibration:\n  path: " + fx + "/digits_calib.npy\n  limit: 2\nvalidation:\n  min_cosine: 0.9999999\n", nil, 0, "FP32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Each case its own output folder: optimize refuses to replace an earlier case's
			// reports without --overwrite.
			body := strings.Replace(c.body, "dir: "+out, "dir: "+t.TempDir(), 1)
			args := append([]string{"optimize", "--quiet", "-c", writeConfig(t, body)}, c.args...)
			cmd := exec.Command(bin, args...)
			b, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != c.code || !strings.Contains(string(b), c.want) {
				t.Fatalf("exit %d (want %d), output lacks %q:\n%s", code, c.code, c.want, b)
			}
			if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); code == 0 && !strings.HasPrefix(lines[len(lines)-1], "optimize took ") {
				t.Errorf("last line %q: want optimize's wall time", lines[len(lines)-1])
			}
			if _, err := os.Stat(filepath.Join(out, "digits.torchspeed.pt")); err == nil {
				t.Fatal("an artifact was written by a failed run")
			}
		})
	}
}

// Ctrl-C during optimize: exit 130, nothing in the output folder.
func TestCLIOptimizeInterrupt(t *testing.T) {
	bin := torchspeedBin(t)
	fx := fixtureDir(t)
	out := t.TempDir()
	cfg := writeConfig(t, "model:\n  path: "+fx+"/resnet18.pt\n  inputs:\n    - name: x\n      shape: [1, 3, 224, 224]\noutput:\n  dir: "+out+"\nbench:\n  runs: 2000\n")
	cmd := exec.Command(bin, "optimize", "-c", cfg)
	cmd.Env = append(os.Environ(), "TORCHSPEED_PROGRESS=1")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the stages are being built.
	buf := make([]byte, 4096)
	var seen strings.Builder
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(seen.String(), "building FP32 candidates") && time.Now().Before(deadline) {
		n, err := stderr.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := stderr.Read(buf); err != nil {
				return
			}
		}
	}()
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 130 {
		t.Fatalf("exit: %v (want 130); stderr so far:\n%s", err, seen.String())
	}
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		t.Errorf("left behind after Ctrl-C: %s", e.Name())
	}
}
