package runenv

import (
	"slices"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// Machine holds the facts beyond the thread count that decide which runtime candidates can
// change anything here (see Candidates).
type Machine struct {
	// THP is the kernel's transparent huge page mode ("always", "madvise", "never"), "" when
	// unknown.
	THP string
	// Glibc is the C library's version ("2.36"), "" when it is not glibc or unknown.
	Glibc string
	// AVX512 says the CPU has the AVX-512 subsets ATen's AVX-512 kernels need (F, BW, VL, DQ).
	AVX512 bool
	// AVX2 says the CPU has AVX2 and FMA, which ATen's and OpenBLAS's AVX2 kernels need.
	AVX2 bool
	// BF16 says the CPU has AVX512_BF16 (OpenBLAS's Cooperlake and Sapphire Rapids kernels use it).
	BF16 bool
	// Name is the CPU's model name, for messages that say where a setting cannot run.
	Name string
	// CPUCapability is the level ATen dispatches to by default ("AVX2", "AVX512"), "" when
	// unknown.
	CPUCapability string
	// Libtorch is libtorch's version ("1.13.1"), "" when unknown.
	Libtorch string
	// OpenBLAS is the configuration of the OpenBLAS libtorch calls for float matmul
	// (openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell
	// MAX_THREADS=64"), "" when libtorch uses another BLAS or it is unknown.
	OpenBLAS string
}

// MachineOf reads the machine facts from a probe (with libtorch's information when the probe
// has it).
func MachineOf(p *cpu.Probe) Machine {
	if p == nil {
		return Machine{}
	}
	m := Machine{THP: p.Memory.THPEnabled, AVX512: p.ISA.AVX512F && p.ISA.AVX512BW && p.ISA.AVX512VL && p.ISA.AVX512DQ,
		AVX2: p.ISA.AVX2 && p.ISA.FMA, BF16: p.ISA.AVX512BF16, Name: p.CPU.Model}
	if p.Libc.Name == "glibc" {
		m.Glibc = p.Libc.Version
	}
	if p.Torch != nil {
		m.CPUCapability, m.Libtorch = p.Torch.CPUCapability, p.Torch.Version
		if b := p.Torch.BLAS; b != nil && b.Library == "openblas" {
			m.OpenBLAS = b.Config
		}
	}
	return m
}

// thpOn says the kernel gives transparent huge pages to memory that asks for them.
func (m Machine) thpOn() bool { return m.THP == "always" || m.THP == "madvise" }

// HugePagesOK says glibc malloc can be asked for transparent huge pages: glibc 2.35 or newer
// (the glibc.malloc.hugetlb tunable, which madvises MADV_HUGEPAGE on the memory it maps)
// and a kernel mode that honours it.
func (m Machine) HugePagesOK() bool { return m.thpOn() && versionAtLeast(m.Glibc, 2, 35) }

// AVX512Available says ATen's AVX-512 kernels are worth a candidate: the CPU has them and
// libtorch does not already use them. libtorch 1.13 and 2.x keep them opt-in
// (ATEN_CPU_CAPABILITY=avx512) on most CPUs; a libtorch that says it dispatches to AVX512
// already needs no candidate.
func (m Machine) AVX512Available() bool {
	return m.AVX512 && !strings.EqualFold(m.CPUCapability, "AVX512")
}

// OpenBLASAVX512Available says OpenBLAS's AVX-512 kernels are worth a candidate: the CPU has
// AVX-512 F/BW/VL/DQ, and libtorch's OpenBLAS is a DYNAMIC_ARCH build that chose a core
// without them (OpenBLAS 0.3.21, Debian 12's, gives AMD Zen 4 and 5 its Haswell kernels).
// OPENBLAS_CORETYPE forces a core without asking the CPU, so this check is what keeps a
// forced core from stopping on an illegal instruction.
func (m Machine) OpenBLASAVX512Available() bool {
	core := m.openBLASCore()
	return m.AVX512 && strings.Contains(m.OpenBLAS, "DYNAMIC_ARCH") && core != "" &&
		!slices.ContainsFunc(openBLASAVX512Cores, func(c string) bool { return strings.EqualFold(c, core) })
}

// openBLASCore is the kernel set OpenBLAS chose ("Haswell"): the first word of its
// configuration after the version that is not an upper-case build option.
func (m Machine) openBLASCore() string {
	f := strings.Fields(m.OpenBLAS)
	for i := 2; i < len(f); i++ {
		if strings.ToUpper(f[i]) != f[i] {
			return f[i]
		}
	}
	return ""
}

// libtorchName is "libtorch" with its version when known.
func (m Machine) libtorchName() string {
	if m.Libtorch == "" {
		return "libtorch"
	}
	return "libtorch " + m.Libtorch
}

// versionAtLeast says a "major.minor[...]" version is at least major.minor; "" is not.
func versionAtLeast(v string, major, minor int) bool {
	a, b, _ := strings.Cut(v, ".")
	b, _, _ = strings.Cut(b, ".")
	ma, err1 := strconv.Atoi(a)
	mi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// The variables of the memory and ISA candidates.
const (
	glibcHugeTunableName = "glibc.malloc.hugetlb"
	glibcHugeTunable     = glibcHugeTunableName + "=1"
	jemallocTHPConf      = "thp:always,metadata_thp:auto"
)

// cpuCapabilities are the values ATEN_CPU_CAPABILITY takes.
var cpuCapabilities = []string{"default", "avx2", "avx512"}

// openBLASAVX512Core is the OPENBLAS_CORETYPE of the BLAS candidate: Skylake-X's kernels need
// AVX-512 F/BW/VL/DQ and nothing newer (Cooperlake's add BF16), and carry OpenBLAS's
// small-matrix paths for sgemm.
const openBLASAVX512Core = "SkylakeX"

// openBLASAVX512Cores are the OpenBLAS x86-64 cores with AVX-512 kernels; openBLASCores are
// the values a manifest's blas_core may take.
var (
	openBLASAVX512Cores = []string{"SkylakeX", "Cooperlake", "SapphireRapids"}
	openBLASCores       = append([]string{"Haswell", "Zen"}, openBLASAVX512Cores...)
)

// candidateVarNames are the variables runtimeVars may set.
var candidateVarNames = append(slices.Clone(waitVarNames), "GLIBC_TUNABLES", "MALLOC_CONF", "ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE")

// runtimeVars are the variables of the instance's wait policy, huge pages, ATen ISA and
// OpenBLAS kernels.
func runtimeVars(s Settings) []Var {
	v := waitVars(s)
	if s.HugePages {
		switch s.Allocator {
		case "", "default":
			v = append(v, Var{"GLIBC_TUNABLES", glibcHugeTunable})
		case "jemalloc":
			v = append(v, Var{"MALLOC_CONF", jemallocTHPConf})
		}
	}
	if s.CPUCapability != "" {
		v = append(v, Var{"ATEN_CPU_CAPABILITY", s.CPUCapability})
	}
	if s.BLASCore != "" {
		v = append(v, Var{"OPENBLAS_CORETYPE", s.BLASCore})
	}
	return v
}

// listVars are variables that hold a list of settings a user may already have: ours are
// merged into theirs (ours last, so they win where both set one), never replace them. sep
// separates the entries, kv a name from its value.
var listVars = map[string]struct{ sep, kv string }{
	"GLIBC_TUNABLES": {":", "="},
	"MALLOC_CONF":    {",", ":"},
}

// ListVar says the instance's entries of variable name are merged into the value already in
// the environment (Settings.Environ), not put in its place.
func ListVar(name string) bool {
	_, ok := listVars[name]
	return ok
}

// mergeList returns existing with ours' entries added last, dropping existing entries that
// set the same names.
func mergeList(name, existing, ours string) string {
	lv, ok := listVars[name]
	if !ok || existing == "" {
		return ours
	}
	out := existing
	for _, e := range strings.Split(ours, lv.sep) {
		key, _, _ := strings.Cut(e, lv.kv)
		out = dropListEntry(name, out, key)
	}
	if out == "" {
		return ours
	}
	return out + lv.sep + ours
}

// dropListEntry returns the list value without its entries named key.
func dropListEntry(name, value, key string) string {
	lv := listVars[name]
	parts := strings.Split(value, lv.sep)
	parts = slices.DeleteFunc(parts, func(e string) bool {
		k, _, _ := strings.Cut(e, lv.kv)
		return e == "" || k == key
	})
	return strings.Join(parts, lv.sep)
}

// listHas says the list value sets every entry of ours to ours' value (the last entry of a
// name is the one that counts).
func listHas(name, value, ours string) bool {
	lv := listVars[name]
	last := map[string]string{}
	for _, e := range strings.Split(value, lv.sep) {
		k, v, _ := strings.Cut(e, lv.kv)
		last[k] = v
	}
	for _, e := range strings.Split(ours, lv.sep) {
		k, v, _ := strings.Cut(e, lv.kv)
		if got, ok := last[k]; !ok || got != v {
			return false
		}
	}
	return true
}
