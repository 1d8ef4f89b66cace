package cpu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

type fixtureWant struct {
	vendor, level                string
	features                     []string // must be present
	absent                       []string // must be missing
	sockets, cores, logical, tpc int
	online, offline              string
	nodes                        map[int]string // id -> cpus
	nodeMemGiB                   float64        // per node
	cgroupVersion                int
	quota                        float64
	cpuset                       string // "" = none found
	affinity                     string
	usable                       string
	usableCount, usableCores     int
	usableNodes                  []int
	openmp, allocator            string
	caches                       int
	l3Instances, l3CPUs          int
	findings, noFindings         []string
	hypervisor                   bool
	thp                          string
	hugepages                    int64
}

var fixtureTable = []struct {
	name string
	env  []string
	want fixtureWant
}{
	{
		name: "vm-avx2",
		want: fixtureWant{
			vendor: "GenuineIntel", level: "avx2", hypervisor: true,
			features: []string{"sse4_2", "avx", "avx2", "fma", "f16c"}, absent: []string{"avx512f", "avx512_vnni", "avx_vnni", "amx_tile"},
			sockets: 1, cores: 4, logical: 4, tpc: 1, online: "0-3",
			nodes: map[int]string{0: "0-3"}, nodeMemGiB: 16,
			cgroupVersion: 2, affinity: "0-3", usable: "0-3", usableCount: 4, usableCores: 4, usableNodes: []int{0},
			openmp: "gnu", caches: 4, l3Instances: 1, l3CPUs: 4, thp: "always",
			findings:   []string{"isa-no-vnni", "omp-wait-default"},
			noFindings: []string{"cross-numa", "smt-siblings", "cgroup-quota", "offline-cpus"},
		},
	},
	{
		name: "xeon-2s",
		want: fixtureWant{
			vendor: "GenuineIntel", level: "avx512_core_vnni",
			features: []string{"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}, absent: []string{"avx512_bf16", "amx_tile", "avx_vnni"},
			sockets: 2, cores: 20, logical: 40, tpc: 2, online: "0-39",
			nodes: map[int]string{0: "0-9,20-29", 1: "10-19,30-39"}, nodeMemGiB: 96,
			cgroupVersion: 2, cpuset: "0-39", affinity: "0-39", usable: "0-39", usableCount: 40, usableCores: 20, usableNodes: []int{0, 1},
			openmp: "intel", caches: 4, l3Instances: 2, l3CPUs: 20, thp: "madvise", hugepages: 1024,
			findings:   []string{"cross-numa", "smt-siblings"},
			noFindings: []string{"isa-no-vnni", "cgroup-quota", "omp-wait-default"},
		},
	},
	{
		// 4 CPUs of quota on a 64-CPU host, with a cpuset of 8 cores.
		name: "container-v2",
		want: fixtureWant{
			vendor: "GenuineIntel", level: "avx512_core_amx", hypervisor: true,
			features: []string{"avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"},
			sockets:  1, cores: 32, logical: 64, tpc: 2, online: "0-63",
			nodes: map[int]string{0: "0-63"}, nodeMemGiB: 256,
			cgroupVersion: 2, quota: 4, cpuset: "8-15,40-47", affinity: "8-15,40-47", usable: "8-15,40-47",
			usableCount: 4, usableCores: 4, usableNodes: []int{0},
			openmp: "gnu", allocator: "jemalloc", caches: 0, thp: "madvise",
			findings:   []string{"cgroup-quota", "smt-siblings", "omp-wait-default"},
			noFindings: []string{"isa-no-vnni", "cross-numa"},
		},
	},
	{
		name: "container-v1",
		want: fixtureWant{
			vendor: "AuthenticAMD", level: "avx2",
			features: []string{"avx2", "fma"}, absent: []string{"avx512f", "avx512_vnni"},
			sockets: 1, cores: 16, logical: 32, tpc: 2, online: "0-31",
			nodes: map[int]string{0: "0-31"}, nodeMemGiB: 64,
			cgroupVersion: 1, quota: 2, cpuset: "2-5,18-21", affinity: "2-5,18-21", usable: "2-5,18-21",
			usableCount: 2, usableCores: 2, usableNodes: []int{0},
			caches: 4, l3Instances: 4, l3CPUs: 8, thp: "never",
			findings:   []string{"cgroup-quota", "isa-no-vnni", "smt-siblings"},
			noFindings: []string{"cross-numa", "kmp-with-gomp"},
		},
	},
	{
		name: "offline-cpus",
		want: fixtureWant{
			vendor: "AuthenticAMD", level: "avx2",
			sockets: 1, cores: 6, logical: 6, tpc: 1, online: "0-1,4-7", offline: "2-3",
			nodes: map[int]string{0: "0-1,4-7"}, nodeMemGiB: 32,
			cgroupVersion: 2, affinity: "0-7", usable: "0-1,4-7", usableCount: 6, usableCores: 6, usableNodes: []int{0},
			openmp: "gnu", allocator: "tcmalloc", caches: 4, l3Instances: 1, l3CPUs: 6, thp: "madvise",
			findings:   []string{"offline-cpus", "isa-no-vnni"},
			noFindings: []string{"smt-siblings", "omp-wait-default"},
		},
	},
}

func TestDetectFixtures(t *testing.T) {
	for _, tc := range fixtureTable {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env
			if env == nil {
				env = []string{}
			}
			p, err := Detect(Options{Root: filepath.Join("testdata", tc.name), Env: env})
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if p.Source != "files:"+filepath.Join("testdata", tc.name) || p.ISA.Source != "cpuinfo" {
				t.Errorf("source %q isa source %q", p.Source, p.ISA.Source)
			}
			if p.CPU.Vendor != w.vendor || p.CPU.Model == "" || p.CPU.Hypervisor != w.hypervisor {
				t.Errorf("cpu = %+v, want vendor %s hypervisor %v", p.CPU, w.vendor, w.hypervisor)
			}
			if got := p.ISA.Level(); got != w.level {
				t.Errorf("ISA level = %s, want %s (features %v)", got, w.level, p.ISA.Features())
			}
			feats := p.ISA.Features()
			for _, f := range w.features {
				if !slices.Contains(feats, f) {
					t.Errorf("feature %s missing from %v", f, feats)
				}
			}
			for _, f := range w.absent {
				if slices.Contains(feats, f) {
					t.Errorf("feature %s present in %v, want absent", f, feats)
				}
			}
			tp := p.Topology
			if tp.Sockets != w.sockets || tp.PhysicalCores != w.cores || tp.LogicalCPUs != w.logical || tp.ThreadsPerCore != w.tpc {
				t.Errorf("topology sockets=%d cores=%d logical=%d tpc=%d, want %d %d %d %d",
					tp.Sockets, tp.PhysicalCores, tp.LogicalCPUs, tp.ThreadsPerCore, w.sockets, w.cores, w.logical, w.tpc)
			}
			if tp.Online.String() != w.online || tp.Offline.String() != w.offline {
				t.Errorf("online %s offline %s, want %s %s", tp.Online, tp.Offline, w.online, w.offline)
			}
			for _, c := range tp.Cores {
				if c.CPUs.Len() != w.tpc || c.Node < 0 {
					t.Errorf("core %+v: want %d threads and a node", c, w.tpc)
				}
			}
			if len(p.NUMA) != len(w.nodes) {
				t.Fatalf("%d NUMA nodes, want %d", len(p.NUMA), len(w.nodes))
			}
			for _, n := range p.NUMA {
				if n.CPUs.String() != w.nodes[n.ID] {
					t.Errorf("node %d CPUs %s, want %s", n.ID, n.CPUs, w.nodes[n.ID])
				}
				if got := float64(n.MemTotalBytes) / (1 << 30); got != w.nodeMemGiB {
					t.Errorf("node %d memory %.2f GiB, want %.2f", n.ID, got, w.nodeMemGiB)
				}
			}
			cg := p.Cgroup
			if cg.Version != w.cgroupVersion || cg.QuotaCPUs != w.quota || cg.Cpuset.String() != w.cpuset {
				t.Errorf("cgroup %+v, want v%d quota %v cpuset %q", cg, w.cgroupVersion, w.quota, w.cpuset)
			}
			if p.Affinity.String() != w.affinity {
				t.Errorf("affinity %s, want %s", p.Affinity, w.affinity)
			}
			u := p.Usable
			if u.CPUs.String() != w.usable || u.Count != w.usableCount || u.Cores != w.usableCores || !slices.Equal(u.Nodes, w.usableNodes) {
				t.Errorf("usable %+v, want cpus %s count %d cores %d nodes %v", u, w.usable, w.usableCount, w.usableCores, w.usableNodes)
			}
			if got := p.OpenMPRuntime(); got != w.openmp {
				t.Errorf("OpenMP runtime %q, want %q", got, w.openmp)
			}
			alloc := ""
			if len(p.Allocators) > 0 {
				alloc = p.Allocators[0].Name
			}
			if alloc != w.allocator {
				t.Errorf("allocator %q, want %q", alloc, w.allocator)
			}
			if len(p.Caches) != w.caches {
				t.Errorf("%d caches, want %d: %+v", len(p.Caches), w.caches, p.Caches)
			}
			for _, c := range p.Caches {
				if c.Level == 3 && (c.Instances != w.l3Instances || c.CPUsPerInstance != w.l3CPUs) {
					t.Errorf("L3 %+v, want %d instances of %d CPUs", c, w.l3Instances, w.l3CPUs)
				}
				if c.SizeBytes <= 0 {
					t.Errorf("cache %+v has no size", c)
				}
			}
			if p.Memory.THPEnabled != w.thp || p.Memory.HugePagesTotal != w.hugepages || p.Memory.HugePageSizeBytes != 2<<20 {
				t.Errorf("memory %+v, want THP %s hugepages %d", p.Memory, w.thp, w.hugepages)
			}
			codes := findingCodes(p)
			for _, c := range w.findings {
				if !slices.Contains(codes, c) {
					t.Errorf("finding %s missing; got %v", c, codes)
				}
			}
			for _, c := range w.noFindings {
				if slices.Contains(codes, c) {
					t.Errorf("finding %s present; got %v", c, codes)
				}
			}
			for _, f := range p.Findings {
				if f.Message == "" || f.Fix == "" || (f.Severity != Warning && f.Severity != Info) {
					t.Errorf("finding %+v lacks a message, a fix or a severity", f)
				}
			}
			var buf strings.Builder
			if err := p.WriteText(&buf); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), p.CPU.Model) || !strings.Contains(buf.String(), "Usable      CPUs "+w.usable) {
				t.Errorf("text output lacks the model or the usable CPUs:\n%s", buf.String())
			}
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			var back Probe
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("JSON does not read back: %v", err)
			}
			if !back.Usable.CPUs.Equal(p.Usable.CPUs) || !slices.Equal(back.ISA.Features(), p.ISA.Features()) || len(back.Topology.Cores) != len(p.Topology.Cores) {
				t.Errorf("JSON round trip changed the probe")
			}
		})
	}
}

func findingCodes(p *Probe) []string {
	var out []string
	for _, f := range p.Findings {
		out = append(out, f.Code)
	}
	return out
}

// TestFindingsEnv checks the environment findings against fixtures whose OpenMP
// runtime differs: GNU (vm-avx2, 4 CPUs) and Intel (xeon-2s, 40 CPUs).
func TestFindingsEnv(t *testing.T) {
	tests := []struct {
		fixture string
		env     []string
		torch   *TorchInfo
		want    []string
		notWant []string
	}{
		{"vm-avx2", []string{"OMP_NUM_THREADS=8"}, nil, []string{"omp-num-threads-over"}, nil},
		{"vm-avx2", []string{"OMP_NUM_THREADS=4"}, nil, nil, []string{"omp-num-threads-over", "omp-num-threads-invalid"}},
		{"vm-avx2", []string{"OMP_NUM_THREADS=four"}, nil, []string{"omp-num-threads-invalid"}, nil},
		{"vm-avx2", []string{"KMP_AFFINITY=granularity=fine,compact,1,0", "KMP_BLOCKTIME=1"}, nil, []string{"kmp-with-gomp"}, nil},
		{"xeon-2s", []string{"KMP_AFFINITY=granularity=fine,compact,1,0"}, nil, nil, []string{"kmp-with-gomp"}},
		{"xeon-2s", []string{"GOMP_SPINCOUNT=0"}, nil, []string{"gomp-without-libgomp"}, nil},
		{"vm-avx2", []string{"OMP_WAIT_POLICY=ACTIVE"}, nil, []string{"omp-wait-active"}, []string{"omp-wait-default"}},
		{"vm-avx2", []string{"GOMP_SPINCOUNT=infinite"}, nil, []string{"omp-wait-active"}, nil},
		{"vm-avx2", []string{"OMP_WAIT_POLICY=PASSIVE"}, nil, nil, []string{"omp-wait-active", "omp-wait-default"}},
		{"xeon-2s", []string{"OMP_WAIT_POLICY=ACTIVE"}, nil, nil, []string{"omp-wait-active"}},
		{"vm-avx2", []string{"OMP_WAIT_POLICY=sometimes"}, nil, []string{"omp-wait-invalid"}, nil},
		{"vm-avx2", []string{"OMP_NUM_THREADS=4", "MKL_NUM_THREADS=2"}, nil, []string{"mkl-num-threads-mismatch"}, nil},
		{"vm-avx2", []string{"MKL_NUM_THREADS=16"}, nil, []string{"mkl-num-threads-over"}, nil},
		{"vm-avx2", []string{"OMP_NUM_THREADS=2", "MKL_NUM_THREADS=2"}, nil, nil, []string{"mkl-num-threads-mismatch"}},
		{"container-v2", nil, &TorchInfo{Version: "1.13.1", NumThreads: 64, QEngines: []string{"qnnpack", "onednn"}, QEngine: "qnnpack"},
			[]string{"torch-threads-over", "torch-qengine-qnnpack"}, nil},
		{"container-v2", nil, &TorchInfo{Version: "1.13.1", NumThreads: 4, QEngines: []string{"qnnpack", "onednn"}, QEngine: "onednn"},
			nil, []string{"torch-threads-over", "torch-qengine-qnnpack"}},
		{"container-v2", nil, &TorchInfo{Version: "1.13.1", ShowConfig: "PyTorch built with:\n  - GCC 12.2\n"}, []string{"torch-no-onednn"}, nil},
		{"vm-avx2", nil, &TorchInfo{Version: "1.13.1", NumThreads: 1, BLAS: &BLASInfo{Library: "openblas", Threading: "pthreads", Threads: 4}},
			[]string{"openblas-threads"}, nil},
		{"vm-avx2", nil, &TorchInfo{Version: "1.13.1", NumThreads: 2, BLAS: &BLASInfo{Library: "openblas", Threading: "pthreads", Threads: 2}},
			nil, []string{"openblas-threads"}},
		{"vm-avx2", nil, &TorchInfo{Version: "1.13.1", NumThreads: 1, BLAS: &BLASInfo{Library: "openblas", Threading: "sequential", Threads: 1}},
			nil, []string{"openblas-threads"}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture+"/"+strings.Join(tc.env, ","), func(t *testing.T) {
			env := append([]string{"PATH=/bin"}, tc.env...)
			p, err := Detect(Options{Root: filepath.Join("testdata", tc.fixture), Env: env, Torch: tc.torch})
			if err != nil {
				t.Fatal(err)
			}
			codes := findingCodes(p)
			for _, c := range tc.want {
				if !slices.Contains(codes, c) {
					t.Errorf("want finding %s, got %v", c, codes)
				}
			}
			for _, c := range tc.notWant {
				if slices.Contains(codes, c) {
					t.Errorf("finding %s should not be there: %v", c, p.Findings)
				}
			}
			if _, ok := p.Env["PATH"]; ok {
				t.Errorf("PATH recorded as a relevant variable")
			}
		})
	}
}

func TestDetectErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Detect(Options{Root: filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "not a readable directory") {
		t.Errorf("missing root: err = %v", err)
	}
	if _, err := Detect(Options{Root: dir}); err == nil || !strings.Contains(err.Error(), "cpuinfo") {
		t.Errorf("empty root: err = %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "proc/cpuinfo"), []byte("processor : 0\nflags : sse avx2 fma\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Detect(Options{Root: dir}); err == nil || !strings.Contains(err.Error(), "CPU list") {
		t.Errorf("no sys tree: err = %v", err)
	}
}

// TestDetectLive probes this machine and checks the answer against what the kernel
// reports through other doors.
func TestDetectLive(t *testing.T) {
	p, err := Detect(Options{Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	if err := p.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	t.Logf("live probe:\n%s", buf.String())
	if p.Source != "live" || p.ISA.Source != "cpuid" {
		t.Errorf("source %q/%q, want live/cpuid", p.Source, p.ISA.Source)
	}
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Skipf("no /sys here: %v", err)
	}
	if got := p.Topology.Online.String(); got != strings.TrimSpace(string(online)) {
		t.Errorf("online %s, kernel says %s", got, online)
	}
	// Go's NumCPU is the size of the affinity mask at start.
	if p.Affinity.Len() != runtime.NumCPU() {
		t.Errorf("affinity %s has %d CPUs, runtime.NumCPU() = %d", p.Affinity, p.Affinity.Len(), runtime.NumCPU())
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != p.Affinity.String() {
			t.Errorf("affinity %s, /proc/self/status says %s", p.Affinity, strings.TrimSpace(v))
		}
	}
	if p.Usable.Count < 1 || p.Usable.Count > p.Affinity.Len() || p.Usable.Cores < 1 || p.Usable.Cores > p.Topology.PhysicalCores {
		t.Errorf("usable %+v out of range for affinity %s and %d cores", p.Usable, p.Affinity, p.Topology.PhysicalCores)
	}
	if len(p.NUMA) < 1 || p.NUMA[0].MemTotalBytes <= 0 {
		t.Errorf("NUMA nodes %+v: want at least one with memory", p.NUMA)
	}
	var nodeCPUs CPUSet
	for _, n := range p.NUMA {
		nodeCPUs = nodeCPUs.Union(n.CPUs)
	}
	if !nodeCPUs.Equal(p.Topology.Online) {
		t.Errorf("NUMA nodes cover %s, online is %s", nodeCPUs, p.Topology.Online)
	}
	// The kernel hides /proc/cpuinfo flags it has not enabled, so CPUID (checked against
	// XCR0) and cpuinfo must agree on every feature torchspeed cares about.
	files, err := Detect(Options{FromFiles: true, Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(files.ISA.Features(), p.ISA.Features()) {
		t.Errorf("cpuid features %v, /proc/cpuinfo features %v", p.ISA.Features(), files.ISA.Features())
	}
	if p.ISA.AVX && p.ISA.XCR0 == "" {
		t.Errorf("AVX reported but XCR0 not read")
	}
	if files.CPU.Vendor != p.CPU.Vendor || files.CPU.Family != p.CPU.Family || files.CPU.ModelNumber != p.CPU.ModelNumber {
		t.Errorf("cpuid %+v vs cpuinfo %+v", p.CPU, files.CPU)
	}
}
