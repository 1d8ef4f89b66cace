package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// cli runs the built binary in dir with a scrubbed environment plus env, and returns stdout,
// stderr and the exit code.
func cli(t *testing.T, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(torchspeedBin(t), args...)
	cmd.Dir = dir
	cmd.Env = append(scrubbedEnv(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code == 0 {
		checkStdoutReport(t, args, out.String())
	}
	return out.String(), errOut.String(), code
}

// listDir names what a folder holds ("" entries when it does not exist).
func listDir(t *testing.T, dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestCLIVersion(t *testing.T) {
	out, _, code := cli(t, t.TempDir(), nil, "--version")
	if code != 0 || out != "torchspeed "+version.Version+"\n" {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	out, _, code = cli(t, t.TempDir(), nil, "version")
	if code != 0 || !strings.HasPrefix(out, "torchspeed "+version.Version+" ") || !strings.Contains(out, "libtorch") {
		t.Errorf("version: exit %d, %q", code, out)
	}
	_, stderr, code := cli(t, t.TempDir(), nil, "version", "--progress", "sometimes")
	if code != exitcode.Usage || !strings.Contains(stderr, `--progress "sometimes"`) {
		t.Errorf("bad --progress: exit %d, %q", code, stderr)
	}
}

// config init writes the config with the umask's mode, and an existing output is a usage
// error (planted links: TestHostileFiles).
func TestCLIConfigInit(t *testing.T) {
	fx := fixtureDir(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "c.yaml")
	_, stderr, code := cli(t, dir, nil, "config", "init", "-m", filepath.Join(fx, "digits.pt"), "--output", out, "--input-shape", "2x1x8x8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	body, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(body), "shape: [2, 1, 8, 8]") {
		t.Errorf("config: %v\n%s", err, body)
	}
	if fi, err := os.Lstat(out); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != safefile.FileMode() {
		t.Errorf("config file mode: %v %v", fi.Mode(), err)
	}
	_, stderr, code = cli(t, dir, nil, "config", "init", "-m", filepath.Join(fx, "digits.pt"), "-o", out)
	if code != exitcode.Usage || !strings.Contains(stderr, "exists") {
		t.Errorf("existing output: exit %d: %s", code, stderr)
	}
	// The old spelling --out still works.
	_, stderr, code = cli(t, dir, nil, "config", "init", "-m", filepath.Join(fx, "digits.pt"), "--out", out, "--force")
	if code != 0 {
		t.Errorf("--out: exit %d: %s", code, stderr)
	}
}

// stamped matches a progress or log line as written when stderr is not a terminal.
var stamped = regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d\.\d\d\d \S`)

// optimize from flags alone (no YAML file), with stderr in a file: progress comes as
// timestamped lines, --quiet writes none, and run then reads the artifact's inputs from its
// manifest.
func TestCLIOptimizeWithoutConfig(t *testing.T) {
	fx := fixtureDir(t)
	dir := t.TempDir()
	env := []string{"TORCHSPEED_BENCH_STAGE_RUNS=3", "TORCHSPEED_OPTIMIZE_CHANNELS_LAST=false"}
	args := []string{"optimize", "-m", filepath.Join(fx, "digits.pt"), "--input-shape", "1x1x8x8", "--runs", "6", "--threads", "1"}
	logPath := filepath.Join(dir, "stderr.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(torchspeedBin(t), append(args, "-o", filepath.Join(dir, "out"))...)
	cmd.Env = append(scrubbedEnv(), env...)
	cmd.Stderr = logFile
	stdout, err := cmd.Output()
	logFile.Close()
	stderr, _ := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("optimize: %v\n%s\n%s", err, stdout, stderr)
	}
	if n := len(stamped.FindAll(stderr, -1)); n < 3 {
		t.Errorf("%d timestamped progress lines in stderr (a file), want several:\n%s", n, stderr)
	}
	art := filepath.Join(dir, "out", "digits.torchspeed.pt")
	if _, err := os.Stat(art); err != nil {
		t.Fatalf("no artifact: %v", err)
	}

	_, qerr, code := cli(t, dir, env, append(args, "-o", filepath.Join(dir, "quiet"), "--quiet")...)
	if code != 0 {
		t.Fatalf("optimize --quiet: exit %d\n%s", code, qerr)
	}
	if stamped.MatchString(qerr) {
		t.Errorf("--quiet wrote progress lines:\n%s", qerr)
	}

	out, rerr, code := cli(t, dir, nil, "run", "-m", art, "--json")
	if code != 0 || !strings.Contains(out, `"outputs"`) || !strings.Contains(out, "[\n        1,\n        10\n      ]") && !strings.Contains(out, `"shape": [`) {
		t.Errorf("run artifact without inputs: exit %d\n%s\n%s", code, out, rerr)
	}
	// An existing artifact is a usage error (exit 2) without --overwrite.
	_, serr, code := cli(t, dir, env, append(args, "-o", filepath.Join(dir, "out"), "--quiet")...)
	if code != exitcode.Usage || !strings.Contains(serr, "digits.torchspeed.pt") {
		t.Errorf("existing artifact: exit %d (want 2)\n%s", code, serr)
	}
}
