package bench

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/internal/safefile"
)

// Environment is what a result was measured on. CaptureEnvironment fills
// what pure Go can see; callers fill the rest (pkg/cpu for the CPU and
// cgroups, the bindings for libtorch and the quantized engine, pkg/runenv
// for the OpenMP runtime actually loaded and the allocator).
type Environment struct {
	CPUModel string   `json:"cpu_model"`
	ISA      []string `json:"isa,omitempty"`
	// PhysicalCores and LogicalCPUs describe the machine; CPUsUsed lists
	// the CPUs this process may run on (its affinity mask).
	PhysicalCores int    `json:"physical_cores,omitempty"`
	LogicalCPUs   int    `json:"logical_cpus"`
	CPUsUsed      []int  `json:"cpus_used,omitempty"`
	NUMANode      string `json:"numa_node,omitempty"`
	// CgroupCPULimit is e.g. "2 CPUs (cpu.max 200000 100000)";
	// CgroupMemoryLimit e.g. "8 GiB"; empty when unlimited or unknown.
	CgroupCPULimit    string `json:"cgroup_cpu_limit,omitempty"`
	CgroupMemoryLimit string `json:"cgroup_memory_limit,omitempty"`
	// Threads and InteropThreads are libtorch's settings during the run.
	Threads        int `json:"threads,omitempty"`
	InteropThreads int `json:"interop_threads,omitempty"`
	// OpenMPRuntime is "libgomp", "libiomp5", ...; OpenMPEnv holds the
	// OpenMP variables set in the environment (OMP_*, GOMP_*, KMP_*).
	OpenMPRuntime string            `json:"openmp_runtime,omitempty"`
	OpenMPEnv     map[string]string `json:"openmp_env,omitempty"`
	// Allocator is the malloc in use ("glibc", "jemalloc", "tcmalloc", ...).
	Allocator string `json:"allocator,omitempty"`
	// BLAS is the BLAS libtorch calls for float matmul when it reports itself
	// (OpenBLAS: its config string and threading; torchspeed keeps its thread
	// count equal to Threads).
	BLAS            string `json:"blas,omitempty"`
	LibtorchVersion string `json:"libtorch_version,omitempty"`
	QuantizedEngine string `json:"quantized_engine,omitempty"`
	// ModelHashes maps each model's name to the sha256 of its file.
	ModelHashes       map[string]string `json:"model_hashes,omitempty"`
	TorchspeedVersion string            `json:"torchspeed_version"`
	Date              time.Time         `json:"date"`
	GoVersion         string            `json:"go_version"`
	GOOS              string            `json:"goos"`
	GOARCH            string            `json:"goarch"`
	GOMAXPROCS        int               `json:"gomaxprocs"`
	Hostname          string            `json:"hostname,omitempty"`
}

// openMPEnvPrefixes are the variables of GNU (GOMP_, OMP_), Intel/LLVM
// (KMP_) OpenMP, MKL and OpenBLAS that change how inference threads behave.
var openMPEnvPrefixes = []string{"OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "DNNL_", "ONEDNN_"}

// CaptureEnvironment fills the fields pure Go can see: the date, Go's
// runtime, hostname, logical CPUs and affinity, OpenMP variables, an
// allocator guess from LD_PRELOAD, and torchspeed's build version.
func CaptureEnvironment() Environment {
	e := Environment{
		Date:              time.Now().UTC().Truncate(time.Second),
		GoVersion:         runtime.Version(),
		GOOS:              runtime.GOOS,
		GOARCH:            runtime.GOARCH,
		GOMAXPROCS:        runtime.GOMAXPROCS(0),
		LogicalCPUs:       runtime.NumCPU(),
		CPUsUsed:          affinityCPUs(),
		OpenMPEnv:         openMPEnv(os.Environ()),
		Allocator:         allocatorFromPreload(os.Getenv("LD_PRELOAD")),
		TorchspeedVersion: buildVersion(),
	}
	e.Hostname, _ = os.Hostname()
	return e
}

func openMPEnv(environ []string) map[string]string {
	m := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		for _, p := range openMPEnvPrefixes {
			if strings.HasPrefix(k, p) {
				m[k] = v
				break
			}
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// allocatorFromPreload guesses the allocator from LD_PRELOAD, which is how
// jemalloc and tcmalloc are usually put in front of libtorch; an empty
// guess means glibc malloc unless the binary links another one.
func allocatorFromPreload(preload string) string {
	fields := strings.FieldsFunc(preload, func(r rune) bool { return r == ':' || r == ' ' })
	for _, f := range fields {
		base := f[strings.LastIndex(f, "/")+1:]
		for _, name := range []string{"jemalloc", "tcmalloc", "mimalloc"} {
			if strings.Contains(base, name) {
				return name
			}
		}
	}
	return "glibc"
}

// buildVersion returns the main module's version and VCS revision as
// recorded by the Go toolchain.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		return strings.TrimSpace(fmt.Sprintf("%s %s%s", v, rev, dirty))
	}
	if v == "" {
		return "unknown"
	}
	return v
}

// HashFile returns the hex SHA-256 of the file at path (safefile.SHA256).
func HashFile(path string) (string, error) {
	sum, _, err := safefile.SHA256(path)
	if err != nil {
		return "", fmt.Errorf("hash model: %w", err)
	}
	return sum, nil
}

// sortedKeys returns m's keys in order (stable output).
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
