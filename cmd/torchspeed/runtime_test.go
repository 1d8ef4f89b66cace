package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// measuredArtifact saves the digits model as an artifact whose manifest says optimize measured
// the candidate c fastest.
func measuredArtifact(t *testing.T, c runenv.Candidate) string {
	t.Helper()
	mod, err := torch.Load(digits(t))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	path := filepath.Join(t.TempDir(), "digits.torchspeed.pt")
	man := &torchspeed.Manifest{
		Format: version.ManifestFormat, Torchspeed: version.Version, Libtorch: torch.Version(), SourceName: "digits.pt",
		Inputs: []torchspeed.InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}}, LoadPasses: []string{}, Steps: []string{},
		Precision: "fp32",
		Runtime: torchspeed.Runtime{Threads: 1, InteropThreads: 1, Candidate: c.Name, WaitPolicy: c.WaitPolicy, SpinCount: c.SpinCount, Allocator: c.Allocator,
			HugePages: c.HugePages, CPUCapability: c.CPUCapability, BLASCore: c.BLASCore},
	}
	if err := torchspeed.SaveArtifact(mod, path, man); err != nil {
		t.Fatal(err)
	}
	return path
}

// launch --artifact and bench apply the wait policy optimize measured fastest for an artifact;
// the flags win over it.
func TestCLIArtifactRuntime(t *testing.T) {
	bin := torchspeedBin(t)
	spin := measuredArtifact(t, runenv.Candidate{Name: "passive-short-spin", WaitPolicy: "PASSIVE", SpinCount: 3000})
	def := measuredArtifact(t, runenv.Candidate{Name: "default"})
	envOf := func(args ...string) map[string]string {
		t.Helper()
		out, stderr, code := runBin(t, bin, append([]string{"launch", "--print-env", "--json", "--threads", "2"}, args...)...)
		if code != 0 {
			t.Fatalf("launch %v: exit %d\n%s", args, code, stderr)
		}
		var s []runenv.Settings
		if err := json.Unmarshal([]byte(out), &s); err != nil || len(s) != 1 {
			t.Fatalf("launch %v: %v\n%s", args, err, out)
		}
		m := map[string]string{}
		for _, v := range s[0].Vars {
			m[v.Name] = v.Value
		}
		return m
	}
	for _, c := range []struct {
		name       string
		args       []string
		wait, spin string
	}{
		{"measured policy", []string{"--artifact", spin}, "PASSIVE", "3000"},
		{"--wait-policy wins", []string{"--artifact", spin, "--wait-policy", "active"}, "ACTIVE", ""},
		{"defaults measured fastest", []string{"--artifact", def}, "", ""},
		{"no artifact", nil, "", ""},
	} {
		t.Run("launch "+c.name, func(t *testing.T) {
			m := envOf(c.args...)
			if m["OMP_WAIT_POLICY"] != c.wait || m["GOMP_SPINCOUNT"] != c.spin {
				t.Errorf("OMP_WAIT_POLICY=%q GOMP_SPINCOUNT=%q, want %q %q", m["OMP_WAIT_POLICY"], m["GOMP_SPINCOUNT"], c.wait, c.spin)
			}
		})
	}
	t.Run("launch a plain model", func(t *testing.T) {
		_, stderr, code := runBin(t, bin, "launch", "--print-env", "--artifact", digits(t))
		if code != 2 || !strings.Contains(stderr, "not a torchspeed artifact") {
			t.Errorf("exit %d: %s", code, stderr)
		}
	})
	t.Run("bench", func(t *testing.T) {
		out, stderr, code := runBenchCLI(t, "-m", spin, "--runtime", "torchspeed", "--threads", "2", "--runs", "3", "--warmup", "1", "--json")
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		cand, env := benchRuntimeSettings(t, out)
		if cand != "passive-short-spin" || env["OMP_WAIT_POLICY"] != "PASSIVE" || env["GOMP_SPINCOUNT"] != "3000" {
			t.Errorf("candidate %q, env %v", cand, env)
		}
	})
}

// An artifact measured fastest with huge pages and ATen's AVX-512 kernels: launch --artifact
// exports both, and bench re-executes with them merged into the user's own GLIBC_TUNABLES (a
// re-exec that compared the list whole would find it still different and fail).
func TestCLIArtifactRuntimeHugePages(t *testing.T) {
	bin := torchspeedBin(t)
	art := measuredArtifact(t, runenv.Candidate{Name: "thp+avx512", Allocator: "default", HugePages: true, CPUCapability: "avx512"})
	probe, err := cpu.Detect(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// What this machine can run of it: the rest is left out with a warning (Fit), on a CPU
	// without AVX-512 and where the kernel or glibc cannot give huge pages.
	m := runenv.MachineOf(probe)
	avx512, thp := m.AVX512, m.HugePagesOK()
	out, stderr, code := runBin(t, bin, "launch", "--print-env", "--threads", "2", "--artifact", art)
	if code != 0 {
		t.Fatalf("launch: exit %d\n%s", code, stderr)
	}
	for want, on := range map[string]bool{`export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}"glibc.malloc.hugetlb=1`: thp, "export ATEN_CPU_CAPABILITY=avx512": avx512} {
		if strings.Contains(out, want) != on {
			t.Errorf("launch --print-env has %q: %v, want %v:\n%s", want, !on, on, out)
		}
	}
	if strings.Contains(stderr, "ATEN_CPU_CAPABILITY=avx512 left out") == avx512 {
		t.Errorf("AVX-512 %v: warning %q", avx512, stderr)
	}
	out, stderr, code = cli(t, "", []string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2"},
		"bench", "-m", art, "--runtime", "torchspeed", "--threads", "2", "--runs", "3", "--warmup", "1", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, stderr)
	}
	cand, env := benchRuntimeSettings(t, out)
	if cand != "thp+avx512" || (env["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1") != thp || (env["ATEN_CPU_CAPABILITY"] == "avx512") != avx512 {
		t.Errorf("huge pages %v, AVX-512 %v: candidate %q, env %v", thp, avx512, cand, env)
	}
}

// An artifact measured fastest with OpenBLAS's AVX-512 kernels: on a CPU with AVX-512, launch
// exports OPENBLAS_CORETYPE and bench re-executes with it, so OpenBLAS reports those kernels;
// on one without, both leave it out with a warning instead of dying on an illegal instruction.
func TestCLIArtifactRuntimeOpenBLAS(t *testing.T) {
	bin := torchspeedBin(t)
	art := measuredArtifact(t, runenv.Candidate{Name: "openblas-avx512", BLASCore: "SkylakeX"})
	probe, err := cpu.Detect(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	avx512 := runenv.MachineOf(probe).AVX512
	out, stderr, code := runBin(t, bin, "launch", "--print-env", "--threads", "1", "--artifact", art)
	if code != 0 {
		t.Fatalf("launch: exit %d\n%s", code, stderr)
	}
	if got := strings.Contains(out, "export OPENBLAS_CORETYPE=SkylakeX"); got != avx512 {
		t.Errorf("AVX-512 %v: launch exports OPENBLAS_CORETYPE %v:\n%s", avx512, got, out)
	}
	if warned := strings.Contains(stderr, "OPENBLAS_CORETYPE=SkylakeX left out"); warned == avx512 {
		t.Errorf("AVX-512 %v: warned %v: %s", avx512, warned, stderr)
	}
	out, stderr, code = runBenchCLI(t, "-m", art, "--runtime", "torchspeed", "--threads", "1", "--runs", "3", "--warmup", "1", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, stderr)
	}
	cand, env := benchRuntimeSettings(t, out)
	if cand != "openblas-avx512" || (env["OPENBLAS_CORETYPE"] == "SkylakeX") != avx512 {
		t.Errorf("AVX-512 %v: candidate %q, env %v", avx512, cand, env)
	}
	var rep struct {
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if blas, _ := rep.Settings["blas"].(string); avx512 && strings.Contains(blas, "DYNAMIC_ARCH") && !strings.Contains(blas, "SkylakeX") {
		t.Errorf("bench ran OpenBLAS %q, not its SkylakeX kernels", blas)
	}
}

// benchRuntimeSettings reads the runtime candidate and the environment a `bench --json` run
// applied from its settings.
func benchRuntimeSettings(t *testing.T, out string) (candidate string, env map[string]string) {
	t.Helper()
	var rep struct {
		Settings struct {
			Candidate string `json:"runtime_candidate"`
			Env       []struct{ Name, Value string }
		} `json:"settings"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	env = map[string]string{}
	for _, v := range rep.Settings.Env {
		env[v.Name] = v.Value
	}
	return rep.Settings.Candidate, env
}
