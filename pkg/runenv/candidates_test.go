package runenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func varMap(s Settings) map[string]string {
	m := map[string]string{}
	for _, v := range s.Vars {
		m[v.Name] = v.Value
	}
	return m
}

func TestCandidates(t *testing.T) {
	p := probeFixture(t, "vm-avx2")
	got, err := Compute(p, Options{Threads: 2, OpenMP: "gnu"})
	if err != nil {
		t.Fatal(err)
	}
	s := got[0]
	// A folder holding a jemalloc library (an empty file is enough to be found).
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libjemalloc.so.2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cands := Candidates(s, Machine{}, []string{dir})
	names := []string{}
	for _, c := range cands {
		names = append(names, c.Name)
	}
	want := []string{"default", "passive-short-spin", "passive", "active", "jemalloc"}
	if len(names) != len(want) {
		t.Fatalf("candidates %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("candidates %v, want %v", names, want)
		}
	}
	cases := map[string]map[string]string{
		"default":            {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "", "OMP_NUM_THREADS": "2"},
		"passive-short-spin": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "3000", "OMP_NUM_THREADS": "2"},
		"passive":            {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"},
		"active":             {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": ""},
		"jemalloc":           {"OMP_WAIT_POLICY": ""},
	}
	// Apply on settings that already carry another policy: the candidate's replaces it.
	start, err := Candidate{Name: "x", WaitPolicy: "ACTIVE"}.Apply(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cands {
		a, err := c.Apply(start)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		m := varMap(a)
		for k, v := range cases[c.Name] {
			if m[k] != v {
				t.Errorf("%s: %s=%q, want %q (vars %v)", c.Name, k, m[k], v, a.Vars)
			}
		}
		if a.Threads != s.Threads || a.CPUs.String() != s.CPUs.String() {
			t.Errorf("%s: changed threads or CPUs: %d %s", c.Name, a.Threads, a.CPUs)
		}
		if last := a.Vars[len(a.Vars)-1].Name; last != "TORCHSPEED_INTEROP_THREADS" {
			t.Errorf("%s: wait variables not placed before TORCHSPEED_*: %v", c.Name, a.Vars)
		}
		wantAlloc := ""
		if c.Name == "jemalloc" {
			wantAlloc = filepath.Join(dir, "libjemalloc.so.2")
		}
		if a.AllocatorPath != wantAlloc {
			t.Errorf("%s: allocator %q, want %q", c.Name, a.AllocatorPath, wantAlloc)
		}
	}
	// One thread: nothing waits, so only the defaults (and allocators) are candidates.
	one := s
	one.Threads = 1
	if c := Candidates(one, Machine{}, []string{t.TempDir()}); len(c) != 1 || c[0].Name != DefaultCandidate {
		t.Fatalf("one thread: %v", c)
	}
	// Intel OpenMP: passive sleeps at once through KMP_BLOCKTIME.
	intel := s
	intel.OpenMP = "intel"
	for _, c := range Candidates(intel, Machine{}, []string{t.TempDir()}) {
		if c.Name == "passive" {
			a, err := c.Apply(intel)
			if err != nil {
				t.Fatal(err)
			}
			if m := varMap(a); m["KMP_BLOCKTIME"] != "0" || m["GOMP_SPINCOUNT"] != "" {
				t.Fatalf("intel passive vars %v", a.Vars)
			}
		}
	}
	if _, err := (Candidate{Name: "bad", WaitPolicy: "spin"}).Apply(s); err == nil {
		t.Fatal("bad wait policy accepted")
	}
	if _, err := (Candidate{Name: "bad", Allocator: "jemalloc"}).Apply(s); err == nil {
		t.Fatal("allocator without a path accepted")
	}
}

// A candidate's process gets libtorch's defaults plus the candidate's own variables alone.
func TestCandidateEnvAndScrub(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libjemalloc.so.2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, c := range Candidates(Settings{Threads: 2, OpenMP: "gnu"}, Machine{}, []string{dir}) {
		e, err := c.Env("gnu")
		if err != nil {
			t.Fatal(err)
		}
		env[c.Name] = strings.Join(e, " ")
	}
	want := map[string]string{
		"default": "", "passive-short-spin": "OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=3000",
		"passive": "OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=0", "active": "OMP_WAIT_POLICY=ACTIVE",
		"jemalloc": "LD_PRELOAD=" + filepath.Join(dir, "libjemalloc.so.2"),
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s: env %q, want %q", k, env[k], v)
		}
	}
	if e, _ := (Candidate{Name: "passive", WaitPolicy: "PASSIVE"}).Env("intel"); strings.Join(e, " ") != "OMP_WAIT_POLICY=PASSIVE KMP_BLOCKTIME=0" {
		t.Errorf("intel passive: %v", e)
	}
	got := ScrubEnv([]string{"PATH=/bin", "OMP_NUM_THREADS=4", "GOMP_SPINCOUNT=1", "LD_PRELOAD=/x.so", "TORCHSPEED_BENCH_RUNS=9", "HOME=/h", "OPENBLAS_NUM_THREADS=2"})
	if strings.Join(got, " ") != "PATH=/bin HOME=/h" {
		t.Errorf("scrubbed %v", got)
	}
	// A manifest names the allocator; Resolve finds its library here, or says what to install.
	c, err := Candidate{Name: "jemalloc", Allocator: "jemalloc"}.Resolve([]string{dir})
	if err != nil || c.AllocatorPath != filepath.Join(dir, "libjemalloc.so.2") {
		t.Errorf("resolve: %+v %v", c, err)
	}
	if _, err := (Candidate{Name: "tcmalloc", Allocator: "tcmalloc"}).Resolve([]string{dir}); err == nil || !strings.Contains(err.Error(), "apt-get install") {
		t.Errorf("resolve a missing allocator: %v", err)
	}
}
