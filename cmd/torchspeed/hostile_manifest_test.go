package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// evalSafely runs script as `eval "$(torchspeed launch --print-env ...)"` would, with $PWNED
// naming a file that any command smuggled into it would create, and fails t if the file
// appears, the eval fails, or a line is neither a comment nor an export.
func evalSafely(t *testing.T, script string) {
	t.Helper()
	pwned := filepath.Join(t.TempDir(), "pwned")
	for _, line := range strings.Split(strings.TrimSuffix(script, "\n"), "\n") {
		if !strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "export ") {
			t.Errorf("a line that is neither a comment nor an export: %q", line)
		}
	}
	cmd := exec.Command("/bin/bash", "-c", `eval "$1"`, "eval", script)
	cmd.Env = append(os.Environ(), "PWNED="+pwned)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("eval: %v\n%s", err, out)
	}
	if _, err := os.Lstat(pwned); err == nil {
		t.Errorf("eval ran a command from the manifest:\n%s", script)
	}
}

// setJSON sets the value at path (object keys and list indexes) in v, a decoded JSON document.
func setJSON(t *testing.T, v any, path []any, value any) {
	t.Helper()
	for i, k := range path {
		last := i == len(path)-1
		switch k := k.(type) {
		case string:
			obj := v.(map[string]any)
			if last {
				obj[k] = value
				return
			}
			v = obj[k]
		case int:
			list := v.([]any)
			if last {
				list[k] = value
				return
			}
			v = list[k]
		}
	}
}

// hostileManifest is an artifact's manifest with every string field set, so that each can be
// replaced.
func hostileManifest() *torchspeed.Manifest {
	batch := 0
	return &torchspeed.Manifest{Format: version.ManifestFormat, Torchspeed: "test", Libtorch: torch.Version(),
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), SourceName: "digits.pt", SourceSHA256: strings.Repeat("ab", 32),
		Inputs:     []torchspeed.InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32", Type: "Tensor", BatchDim: &batch}},
		LoadPasses: []string{torchspeed.PassFreeze}, Precision: "fp32", QEngine: "onednn", FP32Layers: []string{"fc"},
		Steps: []string{"freeze"}, Method: "forward", StateAttributes: []string{"state.h"}, PreserveMethods: []string{"reset"},
		ResetMethod: "reset", Validation: map[string]float64{"cosine": 1},
		CPU: &torchspeed.CPU{Vendor: "AuthenticAMD", Model: "AMD EPYC", Features: []string{"avx2", "fma"}, Cores: 2},
		Runtime: torchspeed.Runtime{Threads: 1, InteropThreads: 1, OpenMP: "gnu", Allocator: "default", Candidate: "passive",
			WaitPolicy: "PASSIVE", CPUCapability: "avx2", BLASCore: "Haswell"}}
}

// A manifest is a file anyone can write, and `eval "$(torchspeed launch --artifact A
// --print-env)"` puts what launch makes of it into a shell: runtime.candidate with a newline
// once ended the "# note:" comment it was printed in and ran the next line. Every string field
// set to shell metacharacters, a newline, a NUL, a megabyte or an unknown name is refused with
// exit 2 naming the artifact and the field, or printed so that eval runs nothing; run refuses
// the same artifact the same way.
func TestHostileManifestFields(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m, err := torch.Load(filepath.Join(fixtureDir(t), "digits.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	art := filepath.Join(t.TempDir(), "digits.torchspeed.pt")
	if err := torchspeed.SaveArtifact(m, art, hostileManifest()); err != nil {
		t.Fatal(err)
	}
	t.Run("the artifact as saved", func(t *testing.T) {
		stdout, stderr, code := cli(t, dir, nil, "launch", "--artifact", art, "--print-env")
		expectExit(t, stderr, code, 0)
		if !strings.Contains(stdout, "OMP_WAIT_POLICY=PASSIVE") || !strings.Contains(stdout, "# note: runtime candidate: passive") {
			t.Errorf("the artifact's runtime is not applied:\n%s", stdout)
		}
		evalSafely(t, stdout)
	})

	fields := []struct {
		path  []any
		field string // as the message names it
	}{
		{[]any{"torchspeed_version"}, "torchspeed_version"},
		{[]any{"libtorch_version"}, "libtorch_version"},
		{[]any{"created"}, "created"},
		{[]any{"source_name"}, "source_name"},
		{[]any{"source_sha256"}, "source_sha256"},
		{[]any{"records_sha256"}, "records_sha256"},
		{[]any{"precision"}, "precision"},
		{[]any{"qengine"}, "qengine"},
		{[]any{"method"}, "method"},
		{[]any{"reset_method"}, "reset_method"},
		{[]any{"inputs", 0, "name"}, "inputs[0].name"},
		{[]any{"inputs", 0, "dtype"}, "inputs[0].dtype"},
		{[]any{"inputs", 0, "type"}, "inputs[0].type"},
		{[]any{"load_passes", 0}, "load_passes[0]"},
		{[]any{"fp32_layers", 0}, "fp32_layers[0]"},
		{[]any{"steps", 0}, "steps[0]"},
		{[]any{"state_attributes", 0}, "state_attributes[0]"},
		{[]any{"preserve_methods", 0}, "preserve_methods[0]"},
		{[]any{"runtime", "openmp"}, "runtime.openmp"},
		{[]any{"runtime", "allocator"}, "runtime.allocator"},
		{[]any{"runtime", "candidate"}, "runtime.candidate"},
		{[]any{"runtime", "wait_policy"}, "runtime.wait_policy"},
		{[]any{"runtime", "cpu_capability"}, "runtime.cpu_capability"},
		{[]any{"runtime", "blas_core"}, "runtime.blas_core"},
		{[]any{"cpu", "vendor"}, "cpu.vendor"},
		{[]any{"cpu", "model"}, "cpu.model"},
		{[]any{"cpu", "features", 0}, "cpu.features[0]"},
		// Numbers given as strings: a type the field cannot hold.
		{[]any{"runtime", "threads"}, "runtime.threads"},
		{[]any{"runtime", "spin_count"}, "runtime.spin_count"},
	}
	payloads := []struct{ name, value string }{
		{"newline", "passive\ntouch \"$PWNED\"\n"},
		{"metacharacters", "$(touch \"$PWNED\")`touch \"$PWNED\"`';touch \"$PWNED\";'\"|&;<>*?~{}\\"},
		{"NUL", "passive\x00touch"},
		{"1 MB", strings.Repeat("A", 1_000_000)},
		{"unknown name", "turbo-x"},
	}
	for _, f := range fields {
		for _, p := range payloads {
			t.Run(f.field+" "+p.name, func(t *testing.T) {
				path := rewriteManifest(t, art, func(b []byte) []byte {
					var doc any
					if err := json.Unmarshal(b, &doc); err != nil {
						t.Fatal(err)
					}
					setJSON(t, doc, f.path, p.value)
					out, err := json.Marshal(doc)
					if err != nil {
						t.Fatal(err)
					}
					return out
				})
				stdout, stderr, code := cli(t, dir, nil, "launch", "--artifact", path, "--print-env")
				if len(stderr) > 2000 {
					t.Errorf("a %d-byte message", len(stderr))
				}
				if code == 0 {
					evalSafely(t, stdout)
					return
				}
				// A value the schema allows is still an edit its digest refuses.
				want := "manifest field " + f.field
				if !strings.Contains(stderr, want) {
					want = "it was modified after torchspeed wrote it"
				}
				expectExit(t, stderr, code, exitcode.Usage, filepath.Base(path), want)
				if strings.Contains(stderr, "\ntouch") || strings.ContainsRune(stderr, 0) {
					t.Errorf("the message repeats the value unescaped:\n%q", stderr)
				}
				if stdout != "" {
					t.Errorf("printed exports on a refused manifest:\n%s", stdout)
				}
				if f.field == "runtime.candidate" {
					// The other commands read the same manifest the same way.
					_, stderr, code := cli(t, dir, nil, "run", "-m", path)
					expectExit(t, stderr, code, exitcode.Usage, filepath.Base(path), "manifest field runtime.candidate")
				}
			})
		}
	}
}

// Whatever a note holds, --print-env keeps it inside its comment.
func TestPrintEnvNotesStayComments(t *testing.T) {
	s := runenv.Settings{Threads: 1, Instances: 1, Notes: []string{"a\ntouch \"$PWNED\"", "b\rtouch \"$PWNED\"\x00", "c\u2028d\x1b[2J"},
		Vars: []runenv.Var{{Name: "OMP_NUM_THREADS", Value: "1;$(touch \"$PWNED\")`touch \"$PWNED\"`'"}}}
	s.Notes = oneLines(s.Notes)
	out := s.ShellExports()
	if strings.ContainsAny(out, "\r\x00\x1b\u2028") {
		t.Errorf("a control character got through:\n%q", out)
	}
	evalSafely(t, out)
}
