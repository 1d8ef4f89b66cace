package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"strings"
	"unsafe"
)

// Version is the libtorch version the shim was built against, e.g. "1.13.1".
func Version() string { return C.GoString(C.ts_libtorch_version()) }

// ShimAPIVersion is the API version of the loaded shim library.
func ShimAPIVersion() int { return int(C.ts_api_version()) }

// ShowConfig is at::show_config(): how libtorch was built (compiler, BLAS, oneDNN, OpenMP...).
func ShowConfig() string {
	var p *C.char
	if err := statusErr(C.ts_show_config(&p)); err != nil {
		return ""
	}
	return takeString(p)
}

// ParallelInfo is at::get_parallel_info(): thread counts and the parallel backend.
func ParallelInfo() string {
	var p *C.char
	if err := statusErr(C.ts_parallel_info(&p)); err != nil {
		return ""
	}
	return takeString(p)
}

// SetNumThreads sets libtorch's intra-op thread count, on the calling thread and on every
// inference worker thread (each OS thread has its own OpenMP pool and reads the count once).
// Where libtorch calls OpenBLAS (Debian's build), OpenBLAS's process-wide count is set to n
// as well: at::set_num_threads leaves it at every CPU, and a one-thread model then still
// ran its matmuls on an OpenBLAS pool spinning on the other cores (a transformer 1.3-1.7x
// slower at p50 on 2 CPUs).
func SetNumThreads(n int) error {
	if n < 1 {
		return fmt.Errorf("set threads: %d is not a thread count: use 1 or more", n)
	}
	var err error
	getExecutor().broadcast(func() {
		if e := statusErr(C.ts_set_num_threads(C.int32_t(n))); e != nil {
			err = e
		}
	})
	if err != nil {
		return err
	}
	return statusErr(C.ts_set_num_threads(C.int32_t(n)))
}

// SetNumThreadsOnThisThread sets the intra-op thread count for the calling OS thread only (and
// for threads that have not run libtorch yet); OpenBLAS's count, being process-wide, follows
// the last call. Use it inside Do, where SetNumThreads would wait for the very worker it runs
// on.
func SetNumThreadsOnThisThread(n int) error {
	if n < 1 {
		return fmt.Errorf("set threads: %d is not a thread count: use 1 or more", n)
	}
	return statusErr(C.ts_set_num_threads(C.int32_t(n)))
}

// BLASInfo describes the BLAS library libtorch calls for float matmul, when it is one
// with a query API (OpenBLAS). MKL linked into libtorch shows in ShowConfig instead.
type BLASInfo struct {
	Library   string `json:"library"`             // "openblas", or "" when none was found
	Config    string `json:"config,omitempty"`    // openblas_get_config(): version, kernels, MAX_THREADS
	Threading string `json:"threading,omitempty"` // "pthreads", "openmp", "sequential"
	Threads   int    `json:"threads,omitempty"`   // its current thread count
}

// BLAS reports the BLAS library in the process (see BLASInfo).
func BLAS() (BLASInfo, error) {
	var info BLASInfo
	if err := checkShim(); err != nil {
		return info, err
	}
	var p *C.char
	if err := statusErr(C.ts_blas_info(&p)); err != nil {
		return info, err
	}
	if err := json.Unmarshal([]byte(takeString(p)), &info); err != nil {
		return info, fmt.Errorf("blas info: %w", err)
	}
	return info, nil
}

// NumThreads is the intra-op thread count of the inference worker threads. (Each OS thread
// has its own OpenMP setting; a thread that never ran libtorch reports OMP_NUM_THREADS.)
func NumThreads() int {
	var n int
	getExecutor().do(func() { n = int(C.ts_get_num_threads()) })
	return n
}

// SetNumInteropThreads sets the inter-op pool size. libtorch allows it once, before any
// inter-op work; later calls with another value fail.
func SetNumInteropThreads(n int) error {
	if n < 1 {
		return fmt.Errorf("set inter-op threads: %d is not a thread count: use 1 or more", n)
	}
	return statusErr(C.ts_set_num_interop_threads(C.int32_t(n)))
}

// NumInteropThreads is the inter-op pool size.
func NumInteropThreads() int { return int(C.ts_get_num_interop_threads()) }

// SupportedQEngines lists the quantized engines of this build, e.g. [onednn qnnpack]; "none"
// is left out.
func SupportedQEngines() []string {
	var p *C.char
	if err := statusErr(C.ts_supported_qengines(&p)); err != nil {
		return nil
	}
	var out []string
	for _, e := range strings.Split(takeString(p), ",") {
		if e != "" && e != "none" {
			out = append(out, e)
		}
	}
	return out
}

// QEngine is the current quantized engine.
func QEngine() string {
	var p *C.char
	if err := statusErr(C.ts_get_qengine(&p)); err != nil {
		return ""
	}
	return takeString(p)
}

// SetQEngine selects the quantized engine (x86, fbgemm, onednn, qnnpack). It must be set
// before converting or loading an INT8 model.
func SetQEngine(name string) error {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return statusErr(C.ts_set_qengine(cs))
}

// ManualSeed seeds libtorch's random generator.
func ManualSeed(seed uint64) { C.ts_manual_seed(C.uint64_t(seed)) }
