package runenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

func probeFixture(t *testing.T, name string) *cpu.Probe {
	t.Helper()
	p, err := cpu.Detect(cpu.Options{Root: filepath.Join("..", "cpu", "testdata", name), Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type instWant struct {
	cpus    string
	threads int
	node    int
	membind bool
	wait    string
}

func TestCompute(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		opts    Options
		want    []instWant
		vars    map[string]string // checked on instance 0; "" means must be absent
	}{
		{
			// The runtime's own wait policy: a preset was measured slower than it at equal threads.
			name: "vm default", fixture: "vm-avx2",
			want: []instWant{{"0-3", 4, 0, false, ""}},
			vars: map[string]string{"OMP_NUM_THREADS": "4", "OMP_PROC_BIND": "close", "OMP_PLACES": "{0},{1},{2},{3}",
				"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "", "KMP_AFFINITY": "", "KMP_BLOCKTIME": "", "TORCHSPEED_INSTANCES": "1"},
		},
		{
			name: "vm go host: no thread binding", fixture: "vm-avx2", opts: Options{NoThreadBind: true, Mode: ModeLatency},
			want: []instWant{{"0-3", 4, 0, false, ""}},
			vars: map[string]string{"OMP_NUM_THREADS": "4", "OMP_PROC_BIND": "", "OMP_PLACES": "", "KMP_AFFINITY": "", "OMP_WAIT_POLICY": ""},
		},
		{
			name: "xeon intel go host: no KMP_AFFINITY", fixture: "xeon-2s", opts: Options{NoThreadBind: true, Mode: ModeThroughput},
			want: []instWant{{"0-9", 10, 0, true, "ACTIVE"}, {"10-19", 10, 1, true, "ACTIVE"}},
			vars: map[string]string{"KMP_AFFINITY": "", "OMP_PROC_BIND": "", "KMP_BLOCKTIME": "infinite"},
		},
		{
			name: "vm two instances", fixture: "vm-avx2", opts: Options{Instances: 2},
			want: []instWant{{"0-1", 2, 0, false, ""}, {"2-3", 2, 0, false, ""}},
		},
		{
			name: "vm reserve a core", fixture: "vm-avx2", opts: Options{ReserveCores: 1},
			want: []instWant{{"1-3", 3, 0, false, ""}},
		},
		{
			name: "vm explicit cpus and threads", fixture: "vm-avx2", opts: Options{CPUs: "1,3", Threads: 1, InteropThreads: 2},
			want: []instWant{{"1,3", 1, 0, false, ""}},
			vars: map[string]string{"OMP_NUM_THREADS": "1", "TORCHSPEED_INTEROP_THREADS": "2", "OMP_WAIT_POLICY": ""},
		},
		{
			name: "vm explicit passive sleeps at once", fixture: "vm-avx2", opts: Options{WaitPolicy: "passive"},
			want: []instWant{{"0-3", 4, 0, false, "PASSIVE"}},
			vars: map[string]string{"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"},
		},
		{
			name: "xeon intel explicit passive", fixture: "xeon-2s", opts: Options{OpenMP: "intel", CoresPerInstance: 2, Instances: 1, WaitPolicy: "passive"},
			want: []instWant{{"0-1", 2, 0, true, "PASSIVE"}},
			vars: map[string]string{"KMP_BLOCKTIME": "0", "GOMP_SPINCOUNT": ""},
		},
		{
			name: "vm wait policy override", fixture: "vm-avx2", opts: Options{WaitPolicy: "active"},
			want: []instWant{{"0-3", 4, 0, false, "ACTIVE"}},
			vars: map[string]string{"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": ""},
		},
		{
			// One thread per physical core; one instance per node in throughput mode,
			// each bound to its node's memory; Intel runtime variables.
			name: "xeon throughput", fixture: "xeon-2s", opts: Options{Mode: ModeThroughput},
			want: []instWant{{"0-9", 10, 0, true, "ACTIVE"}, {"10-19", 10, 1, true, "ACTIVE"}},
			vars: map[string]string{"KMP_AFFINITY": "granularity=fine,compact,1,0", "KMP_BLOCKTIME": "infinite", "OMP_PROC_BIND": "", "OMP_PLACES": ""},
		},
		{
			name: "xeon latency stays on one node", fixture: "xeon-2s", opts: Options{Mode: ModeLatency},
			want: []instWant{{"0-9", 10, 0, true, ""}},
		},
		{
			name: "xeon default spans both nodes", fixture: "xeon-2s",
			want: []instWant{{"0-19", 20, -1, false, ""}},
		},
		{
			name: "xeon four instances", fixture: "xeon-2s", opts: Options{Instances: 4},
			want: []instWant{{"0-4", 5, 0, true, ""}, {"5-9", 5, 0, true, ""}, {"10-14", 5, 1, true, ""}, {"15-19", 5, 1, true, ""}},
		},
		{
			// 3 instances of 6 cores: 18 of 20, third one cannot fit in one node.
			name: "xeon instances straddle when they must", fixture: "xeon-2s", opts: Options{Instances: 3, CoresPerInstance: 6},
			want: []instWant{{"0-5", 6, 0, true, ""}, {"10-15", 6, 1, true, ""}, {"6-9,16-17", 6, -1, false, ""}},
		},
		{
			name: "xeon node 1 with SMT", fixture: "xeon-2s", opts: Options{NUMANodes: []int{1}, UseSMT: true, OpenMP: "gnu"},
			want: []instWant{{"10-19,30-39", 20, 1, true, ""}},
			vars: map[string]string{"OMP_PLACES": "{10,30},{11,31},{12,32},{13,33},{14,34},{15,35},{16,36},{17,37},{18,38},{19,39}"},
		},
		{
			name: "xeon llvm passive", fixture: "xeon-2s", opts: Options{OpenMP: "llvm", CoresPerInstance: 2, Instances: 1, WaitPolicy: "passive"},
			want: []instWant{{"0-1", 2, 0, true, "PASSIVE"}},
			vars: map[string]string{"KMP_BLOCKTIME": "0", "OMP_PROC_BIND": "close", "GOMP_SPINCOUNT": ""},
		},
		{
			// 4 CPUs of quota out of a 16-CPU cpuset on a 64-CPU host.
			name: "container v2 follows the quota", fixture: "container-v2",
			want: []instWant{{"8-11", 4, 0, false, ""}},
		},
		{
			name: "container v1 follows the quota", fixture: "container-v1", opts: Options{Instances: 2},
			want: []instWant{{"2", 1, 0, false, ""}, {"3", 1, 0, false, ""}},
		},
		{
			name: "offline CPUs are skipped", fixture: "offline-cpus", opts: Options{Instances: 2},
			want: []instWant{{"0-1,4", 3, 0, false, ""}, {"5-7", 3, 0, false, ""}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := probeFixture(t, tc.fixture)
			got, err := Compute(p, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d instances, want %d", len(got), len(tc.want))
			}
			var all cpu.CPUSet
			for i, s := range got {
				w := tc.want[i]
				if s.CPUs.String() != w.cpus || s.Threads != w.threads || s.NUMANode != w.node || s.MemBind != w.membind || s.WaitPolicy != w.wait {
					t.Errorf("instance %d: cpus %s threads %d node %d membind %v wait %q; want %+v", i, s.CPUs, s.Threads, s.NUMANode, s.MemBind, s.WaitPolicy, w)
				}
				if s.Instance != i || s.Instances != len(got) {
					t.Errorf("instance %d numbered %d/%d", i, s.Instance, s.Instances)
				}
				if len(all.Intersect(s.CPUs)) > 0 {
					t.Errorf("instance %d CPUs %s overlap earlier ones %s", i, s.CPUs, all)
				}
				all = all.Union(s.CPUs)
				if !s.CPUs.IsSubsetOf(p.Usable.CPUs) {
					t.Errorf("instance %d uses unusable CPUs %s", i, s.CPUs.Minus(p.Usable.CPUs))
				}
				env := map[string]string{}
				for _, v := range s.Vars {
					env[v.Name] = v.Value
				}
				if env["TORCHSPEED_CPUS"] != s.CPUs.String() || env["OMP_NUM_THREADS"] != env["MKL_NUM_THREADS"] || env["OMP_NUM_THREADS"] != env["OPENBLAS_NUM_THREADS"] {
					t.Errorf("instance %d env %v inconsistent", i, env)
				}
			}
			env := map[string]string{}
			for _, v := range got[0].Vars {
				env[v.Name] = v.Value
			}
			for k, want := range tc.vars {
				if v, ok := env[k]; want == "" && ok {
					t.Errorf("%s=%s set, want it absent", k, v)
				} else if want != "" && v != want {
					t.Errorf("%s=%q, want %q", k, v, want)
				}
			}
		})
	}
}

func TestComputeErrors(t *testing.T) {
	emptyDir := t.TempDir()
	tests := []struct {
		name    string
		fixture string
		opts    Options
		want    string
	}{
		{"cpus not available", "vm-avx2", Options{CPUs: "2-7"}, `CPU(s) 4-7 are not available to this process (usable: 0-3`},
		{"cpus offline", "offline-cpus", Options{CPUs: "1-3"}, `CPU(s) 2-3 are not available`},
		{"cpus outside cpuset", "container-v1", Options{CPUs: "0-3"}, `CPU(s) 0-1 are not available`},
		{"cpus malformed", "vm-avx2", Options{CPUs: "0-x"}, `--cpus: cpu list "0-x"`},
		{"too many instances", "vm-avx2", Options{Instances: 5}, "--instances 5: needs at least 5 physical cores, but only 4 are usable"},
		{"too many instances under quota", "container-v2", Options{Instances: 5}, "only 4 are usable"},
		{"cores do not fit", "vm-avx2", Options{Instances: 2, CoresPerInstance: 3}, "= 6 physical cores, but only 4 are usable"},
		{"no such node", "vm-avx2", Options{NUMANodes: []int{1}}, "--numa-node 1: no such NUMA node (this machine has node(s) 0)"},
		{"node outside cpus", "xeon-2s", Options{NUMANodes: []int{1}, CPUs: "0-3"}, "--numa-node 1: none of its CPUs"},
		{"reserve everything", "vm-avx2", Options{ReserveCores: 4}, "--reserve-cores 4 leaves no core"},
		{"allocator missing", "vm-avx2", Options{Allocator: "jemalloc", LibDirs: []string{emptyDir}}, "allocator jemalloc not installed (no libjemalloc.so.2 or libjemalloc.so in " + emptyDir + "): apt-get install libjemalloc2"},
		{"tcmalloc missing", "vm-avx2", Options{Allocator: "tcmalloc", LibDirs: []string{emptyDir}}, "apt-get install libgoogle-perftools4"},
		{"allocator unknown", "vm-avx2", Options{Allocator: "mimalloc"}, `--allocator "mimalloc": want jemalloc, tcmalloc or default`},
		{"negative", "vm-avx2", Options{Threads: -1}, "--threads -1: must be 0"},
		{"bad wait policy", "vm-avx2", Options{WaitPolicy: "spin"}, `--wait-policy "spin"`},
		{"bad runtime", "vm-avx2", Options{OpenMP: "tbb"}, `--openmp "tbb"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compute(probeFixture(t, tc.fixture), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if got != nil {
				t.Errorf("settings returned with an error: %+v", got)
			}
		})
	}
}

func TestFindAllocator(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libtcmalloc_minimal.so.4"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := FindAllocator("tcmalloc", []string{filepath.Join(dir, "none"), dir})
	if err != nil || got != filepath.Join(dir, "libtcmalloc_minimal.so.4") {
		t.Errorf("FindAllocator = %q, %v", got, err)
	}
	// The system's own, where Debian's packages are installed (as on this machine).
	for _, name := range []string{"jemalloc", "tcmalloc"} {
		p, err := FindAllocator(name, nil)
		if err != nil {
			t.Logf("%s: %v", name, err)
			continue
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s found at %s, which does not exist", name, p)
		}
	}
}

func TestEnvironAndExports(t *testing.T) {
	s := Settings{
		Instance: 1, Instances: 2, CPUs: cpu.MustParseCPUList("2-3"), Cores: 2, Threads: 2, InteropThreads: 1,
		AllocatorPath: "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", Allocator: "jemalloc",
		Vars: []Var{{"OMP_NUM_THREADS", "2"}, {"OMP_PLACES", "{2},{3}"}, {"ODD", "it's $HOME"}},
	}
	base := []string{"PATH=/bin", "OMP_NUM_THREADS=64", "LD_PRELOAD=/x/libfoo.so /usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}
	env := s.Environ(base)
	want := []string{"PATH=/bin", "OMP_NUM_THREADS=2", "OMP_PLACES={2},{3}", "ODD=it's $HOME",
		"LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2:/x/libfoo.so"}
	if !slices.Equal(env, want) {
		t.Errorf("Environ = %q\nwant      %q", env, want)
	}
	if e := s.Env(); e[len(e)-1] != "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2" || len(e) != 4 {
		t.Errorf("Env = %q", e)
	}
	// The exports must survive a real shell unchanged.
	script := s.ShellExports() + `printf '%s\n' "$OMP_NUM_THREADS" "$OMP_PLACES" "$ODD" "$LD_PRELOAD"`
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LD_PRELOAD="}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, script)
	}
	wantOut := "2\n{2},{3}\nit's $HOME\n/usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n"
	if string(out) != wantOut {
		t.Errorf("shell saw %q, want %q\nscript:\n%s", out, wantOut, script)
	}
	if !strings.Contains(s.ShellExports(), "# pin with: torchspeed launch") {
		t.Errorf("exports lack the pinning hint")
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeDefault, "Latency": ModeLatency, "throughput": ModeThroughput, "default": ModeDefault} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("fast"); err == nil {
		t.Error("ParseMode(fast) accepted")
	}
}
