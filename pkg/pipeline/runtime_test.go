package pipeline

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

var (
	serveOnce sync.Once
	serveBin  string
	serveErr  error
)

// torchspeedBinary builds the CLI once: its `bench --serve` serves the runtime candidates.
func torchspeedBinary(t *testing.T) string {
	t.Helper()
	serveOnce.Do(func() {
		dir, err := os.MkdirTemp("", "torchspeed-pipeline-bin-")
		if err != nil {
			serveErr = err
			return
		}
		serveBin = filepath.Join(dir, "torchspeed")
		out, err := exec.Command("go", "build", "-o", serveBin, "github.com/torchspeed/torchspeed/cmd/torchspeed").CombinedOutput()
		if err != nil {
			serveErr = &exec.ExitError{}
			t.Logf("go build: %s", out)
		}
	})
	if serveErr != nil {
		t.Fatalf("go build ./cmd/torchspeed: %v", serveErr)
	}
	return serveBin
}

// Optimize measures the runtime candidates (libtorch's defaults always one) in serve processes
// of their own, several per candidate, and records them in the report, report.md and the
// manifest. With this machine's probe, huge pages and AVX-512 are candidates where it has them.
func TestRuntimeMeasured(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	out := t.TempDir()
	cfg := testConfig(t, f, out)
	cfg.Runtime.Threads, cfg.Runtime.Measure = 2, config.On
	cfg.Optimize.Search = config.SearchFull
	opts := testOptions()
	opts.Serve = []string{torchspeedBinary(t), "bench", "--serve"}
	probe, err := cpu.Detect(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Machine = probe
	// The machine as optimize sees it: with libtorch's own ISA level and OpenBLAS, which decide
	// whether avx512 and openblas-avx512 are candidates (libtorch 2.x may use AVX-512 already).
	machine := (&run{opts: opts}).machine()
	rep, err := Run(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	rt := rep.Runtime
	if rt == nil || !rt.Measured || rt.Threads != 2 || rt.Rounds < minRuntimeRounds || rt.Processes != runtimeProcesses {
		t.Fatalf("runtime %+v, warnings %v", rt, rep.Warnings)
	}
	want := []string{"default", "passive-short-spin", "passive", "active"}
	cands := runenv.Candidates(runenv.Settings{Threads: 2, OpenMP: "gnu"}, machine, nil)
	if len(rt.Candidates) < len(cands)+1 {
		t.Fatalf("candidates %+v, want %d and the control", rt.Candidates, len(cands))
	}
	names := map[string]bool{}
	for _, c := range rt.Candidates {
		names[c.Name] = true
	}
	if machine.HugePagesOK() && !names["thp"] {
		t.Errorf("THP %s and glibc %s, but no thp candidate: %v", machine.THP, machine.Glibc, names)
	}
	if machine.AVX512 && !names["avx512"] && !strings.EqualFold(machine.CPUCapability, "AVX512") {
		t.Errorf("an AVX-512 CPU, but no avx512 candidate: %v", names)
	}
	if machine.OpenBLASAVX512Available() != names["openblas-avx512"] {
		t.Errorf("OpenBLAS %q on a CPU with AVX-512 %v: openblas-avx512 offered %v", machine.OpenBLAS, machine.AVX512, names["openblas-avx512"])
	}
	for _, c := range rt.Candidates {
		if c.Name == "openblas-avx512" && strings.Join(c.Env, " ") != "OPENBLAS_CORETYPE=SkylakeX" {
			t.Errorf("openblas-avx512's environment %q", c.Env)
		}
	}
	kept := ""
	for i, c := range rt.Candidates {
		if i < len(want) && c.Name != want[i] {
			t.Errorf("candidate %d is %s, want %s", i, c.Name, want[i])
		}
		procs := runtimeProcesses
		if i == 0 {
			procs = 2 * runtimeProcesses // both groups of the defaults
		}
		if c.Processes != procs || c.N != procs*rt.Rounds*runtimeTurnRuns || c.P50Ms <= 0 || c.P95Ms < c.P50Ms || c.Why == "" {
			t.Errorf("candidate %+v", c)
		}
		if c.Kept {
			if kept != "" {
				t.Errorf("two kept: %s and %s", kept, c.Name)
			}
			kept = c.Name
		}
	}
	if kept == "" || kept != rt.Chosen {
		t.Fatalf("kept %q, chosen %q", kept, rt.Chosen)
	}
	if c := rt.Candidates[len(rt.Candidates)-1]; c.Name != controlName || c.Kept || len(c.Env) != 0 || !strings.HasPrefix(c.Why, "control:") {
		t.Errorf("the last row is not the control: %+v", c)
	}
	if rt.Noisy != strings.Contains(rt.Note, "noisy") {
		t.Errorf("noisy %v, note %q, kept %s", rt.Noisy, rt.Note, kept)
	}
	if d := rt.Candidates[0]; d.Ratio != 1 || len(d.Env) != 0 {
		t.Errorf("defaults row %+v", d)
	}
	if e := strings.Join(rt.Candidates[2].Env, " "); e != "OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=0" {
		t.Errorf("passive's environment %q", e)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## Runtime settings measured", "| passive-short-spin | OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=3000 | 2 |", "Kept: **" + kept + "**", "in 2 processes of its own"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q", s)
		}
	}
	man, err := torchspeed.VerifyArchive(*rep.Artifact)
	if err != nil {
		t.Fatal(err)
	}
	if man.Runtime.Candidate != kept {
		t.Errorf("manifest runtime %+v, kept %s", man.Runtime, kept)
	}
	for _, x := range cands {
		if x.Name == kept && (man.Runtime.WaitPolicy != x.WaitPolicy || man.Runtime.SpinCount != x.SpinCount ||
			man.Runtime.HugePages != x.HugePages || man.Runtime.CPUCapability != x.CPUCapability) {
			t.Errorf("manifest runtime %+v, kept %+v", man.Runtime, x)
		}
	}
}

// Without measuring (runtime.measure false, or auto on a short run, or no serve command) the
// report says why and the manifest names no candidate.
func TestRuntimeNotMeasured(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	for _, c := range []struct {
		name    string
		measure config.Toggle
		serve   bool
		note    string
		warning bool
	}{
		{"off", config.Off, true, "runtime.measure is false", false},
		{"auto on a short run", config.Auto, true, "runtime.measure is auto", false},
		{"no serve command", config.On, false, "no serve command", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, f, t.TempDir())
			cfg.Runtime.Threads, cfg.Runtime.Measure = 2, c.measure
			opts := testOptions()
			if c.serve {
				opts.Serve = []string{"/nonexistent/torchspeed", "bench", "--serve"}
			}
			rep, err := Run(context.Background(), cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			if rt := rep.Runtime; rt == nil || rt.Measured || rt.Chosen != "default" || !strings.Contains(rt.Note, c.note) {
				t.Fatalf("runtime %+v", rep.Runtime)
			}
			warned := strings.Contains(strings.Join(rep.Warnings, "\n"), "runtime settings not measured")
			if warned != c.warning {
				t.Errorf("warned %v, want %v: %v", warned, c.warning, rep.Warnings)
			}
			man, err := torchspeed.VerifyArchive(*rep.Artifact)
			if err != nil {
				t.Fatal(err)
			}
			if man.Runtime.Candidate != "" || man.Runtime.WaitPolicy != "" {
				t.Errorf("manifest runtime %+v", man.Runtime)
			}
		})
	}
}

// A serve command that cannot start leaves libtorch's defaults in place, with a warning: the
// run still writes its artifact.
func TestRuntimeServeFails(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	cfg := testConfig(t, f, t.TempDir())
	cfg.Runtime.Threads, cfg.Runtime.Measure = 2, config.On
	opts := testOptions()
	opts.Serve = []string{"/nonexistent/torchspeed", "bench", "--serve"}
	rep, err := Run(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rt := rep.Runtime; rt == nil || rt.Measured || rt.Chosen != "default" || !strings.Contains(rt.Note, "/nonexistent/torchspeed") {
		t.Fatalf("runtime %+v", rep.Runtime)
	}
	if !strings.Contains(strings.Join(rep.Warnings, "\n"), "libtorch's defaults kept") {
		t.Errorf("warnings %v", rep.Warnings)
	}
	if rep.Artifact == nil {
		t.Error("no artifact")
	}
}
