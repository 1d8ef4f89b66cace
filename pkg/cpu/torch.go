package cpu

import (
	"regexp"
	"strings"
)

// TorchInfo is libtorch's build and thread configuration. The caller that has loaded
// libtorch fills the raw fields (from torch.Version, torch.ShowConfig,
// torch.ParallelInfo, torch.SupportedQEngines, torch.QEngine, torch.NumThreads and
// torch.NumInteropThreads); Detect parses the rest from the text, so this package
// needs no cgo.
type TorchInfo struct {
	Version           string   `json:"version"`
	ShowConfig        string   `json:"show_config,omitempty"`
	ParallelInfo      string   `json:"parallel_info,omitempty"`
	QEngines          []string `json:"quantized_engines"`
	QEngine           string   `json:"quantized_engine"`
	NumThreads        int      `json:"num_threads"`
	NumInteropThreads int      `json:"num_interop_threads"`
	// BLAS is the BLAS library libtorch calls for float matmul, when it has a query API
	// (OpenBLAS); the caller fills it from torch.BLAS. Nil when not known.
	BLAS *BLASInfo `json:"blas,omitempty"`
	// OneDNNCheck is how libtorch's oneDNN kernels fared when run once in a child process
	// (the caller runs it: torchspeed's mkldnncheck): OneDNNPassed, or why they cannot be
	// trusted here (a crash, wrong results). "" when not run.
	OneDNNCheck string `json:"onednn_check,omitempty"`

	// Parsed from ShowConfig and ParallelInfo.
	OneDNN          string `json:"onednn"`           // "v2.6.3", "" when not built in
	MKL             string `json:"mkl"`              // MKL version line, "" when not built in
	OpenMP          string `json:"openmp"`           // "201511 (a.k.a. OpenMP 4.5)", "" when not built in
	CPUCapability   string `json:"cpu_capability"`   // ATen's dispatch level: "AVX2", "AVX512", "DEFAULT"
	ParallelBackend string `json:"parallel_backend"` // "OpenMP", "native thread pool", "TBB"
	// Build holds the "Build settings" key=value pairs (USE_MKLDNN, BLAS_INFO, ...).
	Build map[string]string `json:"build_settings,omitempty"`
}

// OneDNNPassed is TorchInfo.OneDNNCheck for kernels that ran and gave the right results.
const OneDNNPassed = "passed"

var (
	reOneDNN = regexp.MustCompile(`(?:MKL-DNN|oneDNN)\s+(v[0-9][0-9A-Za-z.\-]*)`)
	reMKL    = regexp.MustCompile(`(Intel\(R\) (?:oneAPI )?Math Kernel Library[^\n]*)`)
	reOpenMP = regexp.MustCompile(`OpenMP ([0-9]+(?: \(a\.k\.a\. OpenMP [0-9.]+\))?)`)
	reCapab  = regexp.MustCompile(`CPU capability usage:\s*(\S+)`)
	reBack   = regexp.MustCompile(`ATen parallel backend:\s*([^\n]+)`)
)

// parse fills the parsed fields from the texts. at::show_config (1.13) prints, e.g.:
//
//	PyTorch built with:
//	  - GCC 12.2
//	  - Intel(R) MKL-DNN v2.6.3 (Git Hash N/A)
//	  - OpenMP 201511 (a.k.a. OpenMP 4.5)
//	  - CPU capability usage: AVX2
//	  - Build settings: BLAS_INFO=generic, ..., USE_MKLDNN=ON, USE_OPENMP=ON, ...
//
// and an MKL build adds "Intel(R) Math Kernel Library Version 2020.0.0 Product Build ..."
// (or "oneAPI Math Kernel Library"). at::get_parallel_info ends with "ATen parallel
// backend: OpenMP".
func (t *TorchInfo) parse() {
	text := t.ShowConfig + "\n" + t.ParallelInfo
	if m := reOneDNN.FindStringSubmatch(text); m != nil {
		t.OneDNN = m[1]
	}
	if m := reMKL.FindStringSubmatch(text); m != nil {
		t.MKL = strings.TrimSpace(m[1])
	}
	if m := reOpenMP.FindStringSubmatch(text); m != nil {
		t.OpenMP = m[1]
	}
	if m := reCapab.FindStringSubmatch(text); m != nil {
		t.CPUCapability = m[1]
	}
	if m := reBack.FindStringSubmatch(text); m != nil {
		t.ParallelBackend = strings.TrimSpace(m[1])
	}
	if _, settings, ok := strings.Cut(t.ShowConfig, "Build settings:"); ok {
		settings, _, _ = strings.Cut(settings, "\n")
		t.Build = map[string]string{}
		// CXX_FLAGS holds commas inside its value only rarely; split on ", " and keep
		// anything without "=" with the previous value.
		var last string
		for _, kv := range strings.Split(settings, ", ") {
			kv = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kv), ","))
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.ContainsAny(k, " -") {
				if last != "" {
					t.Build[last] += ", " + kv
				}
				continue
			}
			t.Build[k] = v
			last = k
		}
	}
}

// CPUCapabilityOf returns the level ATen dispatches its vectorized kernels to ("AVX2") as
// at::show_config reports it, "" when it does not.
func CPUCapabilityOf(showConfig string) string {
	if m := reCapab.FindStringSubmatch(showConfig); m != nil {
		return m[1]
	}
	return ""
}

// BLASInfo is a BLAS library found in the process (torch.BLASInfo without the cgo).
type BLASInfo struct {
	Library   string `json:"library"`             // "openblas"; "" when none was found
	Config    string `json:"config,omitempty"`    // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
	Threading string `json:"threading,omitempty"` // "pthreads", "openmp", "sequential"
	Threads   int    `json:"threads,omitempty"`
}

// HasEngine reports whether libtorch has the quantized engine name.
func (t *TorchInfo) HasEngine(name string) bool {
	for _, e := range t.QEngines {
		if e == name {
			return true
		}
	}
	return false
}
