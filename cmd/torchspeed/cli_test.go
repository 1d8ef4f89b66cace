package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
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

// Hostile input gets exit 2, a message naming the input, and leaves no file behind: before
// these checks, the shapes below died of Go's out-of-memory error or a makeslice panic, the
// thread counts were truncated or ran thousands of threads, and model.name x/digits
// overwrote the input model.
func TestCLIHostileInput(t *testing.T) {
	fx := fixtureDir(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "digits.pt")
	raw, err := os.ReadFile(filepath.Join(fx, "digits.pt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(model, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	sum, _, err := safefile.SHA256(model)
	if err != nil {
		t.Fatal(err)
	}
	m, err := torch.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	huge := saveArtifactWith(t, m, "huge.torchspeed.pt", []int64{4611686018427387904, 3, 1, 1}, 1)
	big := saveArtifactWith(t, m, "big.torchspeed.pt", []int64{1, 3, 100000, 100000}, 1)
	out := filepath.Join(dir, "out")
	cfg := func(extra string) string {
		return writeConfig(t, "model:\n  path: "+model+"\n  inputs:\n    - name: x\n      shape: [1, 1, 8, 8]\n"+extra+"output:\n  dir: "+out+"\n")
	}
	const oom = "1x3x100000x100000"
	const overflow = "4611686018427387904x3x1x1"
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"run huge shape", []string{"run", "-m", model, "--input-shape", oom}, []string{"--input-shape", "input 0 " + oom + " float32", "is available"}},
		{"run overflowing shape", []string{"run", "-m", model, "--input-shape", overflow}, []string{"--input-shape", "more than 9223372036854775807 elements"}},
		{"bench huge shape", []string{"bench", "-m", model, "--input-shape", oom, "-o", out}, []string{"--input-shape", "is available"}},
		{"bench overflowing shape", []string{"bench", "-m", model, "--input-shape", overflow, "-o", out}, []string{"elements"}},
		{"bench artifact's overflowing shape", []string{"bench", "-m", huge, "-o", out}, []string{"the manifest of huge.torchspeed.pt", "elements"}},
		{"bench artifact's huge shape", []string{"bench", "-m", big, "-o", out}, []string{"the manifest of big.torchspeed.pt", "is available"}},
		{"run artifact's huge shape", []string{"run", "-m", big}, []string{"the manifest of", "is available"}},
		{"optimize config huge shape", []string{"optimize", "-c", writeConfig(t, "model:\n  path: "+model+"\n  inputs:\n    - {name: x, shape: [1, 3, 100000, 100000]}\noutput:\n  dir: "+out+"\n")}, []string{"model.inputs[0] (x)", "is available"}},
		{"optimize flag huge shape", []string{"optimize", "-m", model, "--input-shape", oom, "-o", out}, []string{"model.inputs", "is available"}},
		{"config threads 100000", []string{"optimize", "-c", cfg("runtime:\n  threads: 100000\n")}, []string{"runtime.threads: 100000 is not allowed"}},
		{"config threads 1.5", []string{"optimize", "-c", cfg("runtime:\n  threads: 1.5\n")}, []string{"runtime.threads", "1.5", "not a whole number"}},
		{"config threads 1e20", []string{"optimize", "-c", cfg("runtime:\n  threads: 99999999999999999999\n")}, []string{"runtime.threads", "not a whole number"}},
		{"bench config threads", []string{"bench", "-c", cfg("runtime:\n  threads: 100000\n")}, []string{"runtime.threads: 100000 is not allowed"}},
		{"flag threads 2^32+1", []string{"bench", "-m", model, "--input-shape", "1x1x8x8", "--threads", "4294967297"}, []string{"--threads (runtime.threads): 4294967297 is not allowed"}},
		{"flag threads -3", []string{"optimize", "-c", cfg(""), "--threads", "-3"}, []string{"--threads (runtime.threads): -3 is not allowed"}},
		{"run threads 2^32+1", []string{"run", "-m", model, "--input-shape", "1x1x8x8", "--threads", "4294967297"}, []string{"--threads: 4294967297 is not allowed"}},
		{"int64 range overflow", []string{"optimize", "-c", writeConfig(t, "model:\n  path: "+model+"\n  inputs:\n    - {name: x, shape: [1, 4], dtype: int64, range: [-9223372036854775808, 9223372036854775807]}\noutput:\n  dir: "+out+"\n")}, []string{"model.inputs[0].range", "width"}},
		{"name with a folder", []string{"optimize", "-c", cfg(""), "--name", "x/digits"}, []string{"model.name", "path separator"}},
		{"config name with dot-dot", []string{"optimize", "-c", cfg(""), "--name", ".."}, []string{"model.name"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := cli(t, dir, nil, c.args...)
			if code != exitcode.Usage {
				t.Errorf("exit %d, want %d:\n%s", code, exitcode.Usage, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "fatal error") {
				t.Errorf("crashed:\n%s", stderr)
			}
			if names := listDir(t, out); len(names) > 0 {
				t.Errorf("left in the output folder: %v", names)
			}
			if now, _, _ := safefile.SHA256(model); now != sum {
				t.Errorf("the input model changed")
			}
		})
	}
	// A manifest asking for more threads than there are CPUs is clamped with a warning.
	many := saveArtifactWith(t, m, "many.torchspeed.pt", []int64{1, 1, 8, 8}, 3000)
	stdout, stderr, code := cli(t, dir, nil, "run", "-m", many)
	if code != 0 || !strings.Contains(stderr, "asks for 3000 threads") || !strings.Contains(stdout, "1 output(s)") {
		t.Errorf("manifest threads 3000: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// saveArtifactWith writes m as an artifact whose manifest lists one float32 input of shape and
// the given thread count.
func saveArtifactWith(t *testing.T, m *torch.Module, name string, shape []int64, threads int) string {
	t.Helper()
	return writeArtifact(t, m, name, torchspeed.Manifest{Precision: "fp32",
		Inputs: []torchspeed.InputSpec{{Name: "x", Shape: shape, DType: "float32"}}, Runtime: torchspeed.Runtime{Threads: threads}})
}

// writeArtifact saves m with man (its format and versions filled in) as name in a temp folder.
func writeArtifact(t *testing.T, m *torch.Module, name string, man torchspeed.Manifest) string {
	t.Helper()
	man.Format, man.Torchspeed, man.Libtorch = version.ManifestFormat, "test", torch.Version()
	raw, err := man.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(t.TempDir(), name)
	if err := m.Save(art, map[string][]byte{torchspeed.ManifestFile: raw}); err != nil {
		t.Fatal(err)
	}
	return art
}

// config init writes through an O_EXCL temp file: a link planted at the old fixed temp name
// (<out>.tmp) redirects nothing, and an existing output is a usage error.
func TestCLIConfigInit(t *testing.T) {
	fx := fixtureDir(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "c.yaml")
	if err := os.Symlink(victim, out+".tmp"); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := cli(t, dir, nil, "config", "init", "-m", filepath.Join(fx, "digits.pt"), "--output", out, "--input-shape", "2x1x8x8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the planted link was followed: victim holds %q", b)
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
