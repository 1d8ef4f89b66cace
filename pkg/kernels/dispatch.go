package kernels

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/klauspost/cpuid/v2"
)

// Path names an instruction-set level a kernel can be implemented for.
// Paths are ordered: a kernel uses the highest path it implements that is at
// most the current limit (see SetPath) and that the CPU supports.
type Path string

// The paths, lowest first.
const (
	Generic    Path = "generic"    // pure Go, every platform
	AVX2       Path = "avx2"       // AVX2 + FMA3
	AVXVNNI    Path = "avxvnni"    // AVX2 + FMA3 + VEX-encoded VNNI (vpdpbusd on ymm)
	AVX512     Path = "avx512"     // AVX-512 F, BW, VL (+ AVX2, FMA3)
	AVX512VNNI Path = "avx512vnni" // AVX-512 F, BW, VL, VNNI
)

var pathOrder = []Path{Generic, AVX2, AVXVNNI, AVX512, AVX512VNNI}

func (p Path) rank() int {
	for i, q := range pathOrder {
		if q == p {
			return i
		}
	}
	return -1
}

// Features lists the CPU features the kernels care about, as cpuid reports
// them (cpuid also checks that the OS saves the wide registers).
type Features struct {
	AVX2       bool `json:"avx2"`
	FMA        bool `json:"fma"`
	AVX512F    bool `json:"avx512f"`
	AVX512BW   bool `json:"avx512bw"`
	AVX512VL   bool `json:"avx512vl"`
	AVX512VNNI bool `json:"avx512vnni"`
	AVXVNNI    bool `json:"avxvnni"`
}

// Detected returns the features of the CPU this process runs on.
func Detected() Features { return detected }

var detected = Features{
	AVX2:       cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2),
	FMA:        cpuid.CPU.Supports(cpuid.FMA3),
	AVX512F:    cpuid.CPU.Supports(cpuid.AVX512F),
	AVX512BW:   cpuid.CPU.Supports(cpuid.AVX512BW),
	AVX512VL:   cpuid.CPU.Supports(cpuid.AVX512VL),
	AVX512VNNI: cpuid.CPU.Supports(cpuid.AVX512VNNI),
	AVXVNNI:    cpuid.CPU.Supports(cpuid.AVXVNNI),
}

// supports reports whether path p can run here: the CPU has the features and
// this build contains the assembly (amd64, gc, not purego).
func (f Features) supports(p Path) bool {
	if p == Generic {
		return true
	}
	if !asmBuilt {
		return false
	}
	avx2 := f.AVX2 && f.FMA
	avx512 := avx2 && f.AVX512F && f.AVX512BW && f.AVX512VL
	switch p {
	case AVX2:
		return avx2
	case AVXVNNI:
		return avx2 && f.AVXVNNI
	case AVX512:
		return avx512
	case AVX512VNNI:
		return avx512 && f.AVX512VNNI
	}
	return false
}

// Paths returns the paths usable in this process, lowest first; Generic is
// always among them.
func Paths() []Path {
	var ps []Path
	for _, p := range pathOrder {
		if detected.supports(p) {
			ps = append(ps, p)
		}
	}
	return ps
}

// Best returns the highest usable path: the one chosen at start.
func Best() Path {
	ps := Paths()
	return ps[len(ps)-1]
}

// SetPath limits every kernel to paths at or below p (for tests and A/B
// measurements). It returns an error, and changes nothing, when p is unknown
// or not usable on this CPU/build. SetPath(Best()) restores the default. It
// is safe to call concurrently with kernels: a call in flight finishes on the
// table it started with.
func SetPath(p Path) error {
	if p.rank() < 0 {
		return fmt.Errorf("kernels: unknown path %q; use one of %s", p, joinPaths(pathOrder))
	}
	if !detected.supports(p) {
		return fmt.Errorf("kernels: path %q is not usable here (CPU features %+v, assembly built: %v); use one of %s",
			p, detected, asmBuilt, joinPaths(Paths()))
	}
	active.Store(buildTable(p))
	return nil
}

// Limit returns the current path limit.
func Limit() Path { return active.Load().limit }

// Choice says which implementation a kernel uses.
type Choice struct {
	Kernel string `json:"kernel"`
	Path   Path   `json:"path"`
	// Shape is the register block of a GEMM micro-kernel ("6x16"), empty
	// for other kernels.
	Shape string `json:"shape,omitempty"`
}

// Chosen lists the implementation each kernel uses under the current limit.
func Chosen() []Choice {
	t := active.Load()
	return []Choice{
		{Kernel: "DotF32", Path: t.dotF32.path},
		{Kernel: "GemmF32", Path: t.gemmF32.path, Shape: fmt.Sprintf("%dx%d", t.gemmF32.mr, t.gemmF32.nr)},
		{Kernel: "DotU8S8", Path: t.dotU8S8.path},
		{Kernel: "GemmU8S8", Path: t.gemmU8S8.path, Shape: fmt.Sprintf("%dx%d", t.gemmU8S8.mr, t.gemmU8S8.nr)},
		{Kernel: "Quantize", Path: t.quant.path},
		{Kernel: "Dequantize", Path: t.quant.path},
		{Kernel: "Requantize", Path: t.quant.path},
	}
}

func joinPaths(ps []Path) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// table is one consistent set of kernel implementations.
type table struct {
	limit    Path
	dotF32   dotF32Impl
	gemmF32  gemmF32Impl
	dotU8S8  dotU8S8Impl
	gemmU8S8 gemmU8S8Impl
	quant    quantImpl
}

var active atomic.Pointer[table]

func init() { active.Store(buildTable(Best())) }

// pick returns the highest candidate whose path is <= limit and usable.
// Candidates must include a Generic entry.
func pick[T any](limit Path, cands []T, path func(T) Path) T {
	var best T
	bestRank := -1
	for _, c := range cands {
		p := path(c)
		if p.rank() <= limit.rank() && detected.supports(p) && p.rank() > bestRank {
			best, bestRank = c, p.rank()
		}
	}
	return best
}

func buildTable(limit Path) *table {
	return &table{
		limit:    limit,
		dotF32:   pick(limit, dotF32Impls(), func(i dotF32Impl) Path { return i.path }),
		gemmF32:  pick(limit, gemmF32Impls(), func(i gemmF32Impl) Path { return i.path }),
		dotU8S8:  pick(limit, dotU8S8Impls(), func(i dotU8S8Impl) Path { return i.path }),
		gemmU8S8: pick(limit, gemmU8S8Impls(), func(i gemmU8S8Impl) Path { return i.path }),
		quant:    pick(limit, quantImpls(), func(i quantImpl) Path { return i.path }),
	}
}
