package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// The hostile-input matrix: every way a user was once able to crash or hang torchspeed, cost
// them a file or get a wrong result reported as right (16 items), run as that
// user would (the CLI), each case named after its item ("02 ..."). `go test -run TestHostile
// -v ./cmd/torchspeed/ ./bindings/torch/ ./pkg/torchspeed/ ./pkg/launch/` prints it; the items
// that live in the Go API (the deadlock, concurrent use, the engine set before Load, a killed
// launcher) are the TestHostileNN tests of those packages.
//
// Every case checks the exit code, words of the message, that nothing crashed, and what was
// left on disk.

// expectExit fails t unless the run exited with code, its stderr holds every word, and it did
// not crash.
func expectExit(t *testing.T, stderr string, got, code int, words ...string) {
	t.Helper()
	if got != code {
		t.Errorf("exit %d, want %d:\n%s", got, code, stderr)
	}
	for _, w := range words {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if strings.Contains(stderr, "panic") || strings.Contains(stderr, "fatal error") || strings.Contains(stderr, "goroutine ") {
		t.Errorf("crashed:\n%s", stderr)
	}
}

// copyModel copies a fixture into dir and returns the copy's path and SHA-256.
func copyModel(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtureDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	sum, _, err := safefile.SHA256(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, sum
}

// Items 2 (sizes), 3 (thread counts), 5 (model.name) and 16 (a count past int64): exit 2, a
// message naming the input, nothing left in the output folder and the input model unchanged.
// Before, the shapes died of Go's out-of-memory error or a makeslice panic, the thread counts
// were truncated or ran thousands of threads, and model.name x/digits overwrote the input.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model, sum := copyModel(t, dir, "digits.pt")
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
		{"02 run huge shape", []string{"run", "-m", model, "--input-shape", oom}, []string{"--input-shape", "input 0 " + oom + " float32", "is available"}},
		{"02 run overflowing shape", []string{"run", "-m", model, "--input-shape", overflow}, []string{"--input-shape", "more than 9223372036854775807 elements"}},
		{"02 bench huge shape", []string{"bench", "-m", model, "--input-shape", oom, "-o", out}, []string{"--input-shape", "is available"}},
		{"02 bench overflowing shape", []string{"bench", "-m", model, "--input-shape", overflow, "-o", out}, []string{"elements"}},
		{"02 bench artifact's overflowing shape", []string{"bench", "-m", huge, "-o", out}, []string{"the manifest of huge.torchspeed.pt", "elements"}},
		{"02 bench artifact's huge shape", []string{"bench", "-m", big, "-o", out}, []string{"the manifest of big.torchspeed.pt", "is available"}},
		{"02 run artifact's huge shape", []string{"run", "-m", big}, []string{"the manifest of", "is available"}},
		{"02 optimize config huge shape", []string{"optimize", "-c", writeConfig(t, "model:\n  path: "+model+"\n  inputs:\n    - {name: x, shape: [1, 3, 100000, 100000]}\noutput:\n  dir: "+out+"\n")}, []string{"model.inputs[0] (x)", "is available"}},
		{"02 optimize flag huge shape", []string{"optimize", "-m", model, "--input-shape", oom, "-o", out}, []string{"model.inputs", "is available"}},
		{"02 int64 range wider than int64", []string{"optimize", "-c", writeConfig(t, "model:\n  path: "+model+"\n  inputs:\n    - {name: x, shape: [1, 4], dtype: int64, range: [-9223372036854775808, 9223372036854775807]}\noutput:\n  dir: "+out+"\n")}, []string{"model.inputs[0].range", "width"}},
		{"03 config threads 100000", []string{"optimize", "-c", cfg("runtime:\n  threads: 100000\n")}, []string{"runtime.threads: 100000 is not allowed"}},
		{"03 config threads 1.5", []string{"optimize", "-c", cfg("runtime:\n  threads: 1.5\n")}, []string{"runtime.threads", "1.5", "not a whole number"}},
		{"03 bench config threads 100000", []string{"bench", "-c", cfg("runtime:\n  threads: 100000\n")}, []string{"runtime.threads: 100000 is not allowed"}},
		{"03 flag threads 2^32+1", []string{"bench", "-m", model, "--input-shape", "1x1x8x8", "--threads", "4294967297"}, []string{"--threads (runtime.threads): 4294967297 is not allowed"}},
		{"03 flag threads -3", []string{"optimize", "-c", cfg(""), "--threads", "-3"}, []string{"--threads (runtime.threads): -3 is not allowed"}},
		{"03 run threads 2^32+1", []string{"run", "-m", model, "--input-shape", "1x1x8x8", "--threads", "4294967297"}, []string{"--threads: 4294967297 is not allowed"}},
		{"05 model.name with a folder", []string{"optimize", "-c", cfg(""), "--name", "x/digits"}, []string{"model.name", "path separator"}},
		{"05 model.name dot-dot", []string{"optimize", "-c", cfg(""), "--name", ".."}, []string{"model.name"}},
		{"16 config threads 1e20", []string{"optimize", "-c", cfg("runtime:\n  threads: 99999999999999999999\n")}, []string{"runtime.threads", "not a whole number"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := cli(t, dir, nil, c.args...)
			expectExit(t, stderr, code, exitcode.Usage, c.want...)
			if strings.Contains(c.name, "threads") && strings.Contains(stderr, "-9223372036854775808") {
				t.Errorf("a count wrapped around:\n%s", stderr)
			}
			if names := listDir(t, out); len(names) > 0 {
				t.Errorf("left in the output folder: %v", names)
			}
			if now, _, _ := safefile.SHA256(model); now != sum {
				t.Errorf("the input model changed")
			}
		})
	}
	t.Run("03 manifest threads 3000 clamped with a warning", func(t *testing.T) {
		many := saveArtifactWith(t, m, "many.torchspeed.pt", []int64{1, 1, 8, 8}, 3000)
		stdout, stderr, code := cli(t, dir, nil, "run", "-m", many)
		expectExit(t, stderr, code, 0, "asks for 3000 threads")
		if !strings.Contains(stdout, "1 output(s)") {
			t.Errorf("no outputs:\n%s", stdout)
		}
		// bench once hung on such a manifest.
		_, stderr, code = cli(t, dir, nil, "bench", "-m", many, "--runs", "5", "-o", filepath.Join(t.TempDir(), "bench"))
		expectExit(t, stderr, code, 0, "asks for 3000 threads")
	})
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

// rewriteManifest rewrites the artifact's manifest record with edit.
func rewriteManifest(t *testing.T, src string, edit func([]byte) []byte) string {
	t.Helper()
	found := false
	p := fixtures.RewriteZip(t, src, func(name string, data []byte) []byte {
		if strings.HasSuffix(name, "/extra/"+torchspeed.ManifestFile) {
			found = true
			return edit(data)
		}
		return data
	})
	if !found {
		t.Fatalf("%s has no %s record", src, torchspeed.ManifestFile)
	}
	return p
}
