package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// Version is the libtorch version the shim was built against, e.g. "1.13.1".
func Version() string { return C.GoString(C.ts_libtorch_version()) }

// ShimAPIVersion is the API version of the loaded shim library.
func ShimAPIVersion() int { return int(C.ts_api_version()) }

// ShowConfig is at::show_config(): how libtorch was built (compiler, BLAS, oneDNN, OpenMP...).
func ShowConfig() (string, error) {
	var p *C.char
	if err := statusErr(C.ts_show_config(&p)); err != nil {
		return "", err
	}
	return takeString(p), nil
}

// ParallelInfo is at::get_parallel_info(): thread counts and the parallel backend.
func ParallelInfo() (string, error) {
	var p *C.char
	if err := statusErr(C.ts_parallel_info(&p)); err != nil {
		return "", err
	}
	return takeString(p), nil
}

// SetNumThreads sets libtorch's intra-op thread count on the shared inference thread, on every
// live Thread from NewThread (each OS thread has its own OpenMP pool and reads the count once),
// on the calling thread, and for Threads started later. Where libtorch calls OpenBLAS
// (Debian's build), OpenBLAS's process-wide count is set to n as well: at::set_num_threads
// leaves it at every CPU, and a one-thread model then still ran its matmuls on an OpenBLAS
// pool spinning on the other cores (a transformer 1.3-1.7x slower at p50 on 2 CPUs).
// n must be within 1..AvailableCPUs(). Do not call it inside Do or Thread.Do (it would wait
// for the thread it runs on): use SetNumThreadsOnThisThread there.
func SetNumThreads(n int) error {
	if err := checkThreadCount("set threads", n); err != nil {
		return err
	}
	worker() // the shared thread exists before the count is broadcast
	// Forward stops running on its callers' threads before the count changes, and starts
	// again only once every thread runs at one.
	sharedSingle.Store(false)
	threadsMu.Lock()
	lastThreads = n
	targets := make([]*Thread, 0, len(liveThreads))
	for t := range liveThreads {
		targets = append(targets, t)
	}
	threadsMu.Unlock()
	// One slot per thread: the threads run one after another, but each writes only its own.
	errs := make([]error, len(targets)+1)
	for i, t := range targets {
		if err := t.Do(func() { errs[i] = setThreadsHere(n) }); err != nil && !errors.Is(err, ErrThreadClosed) {
			errs[i] = err
		}
	}
	errs[len(targets)] = setThreadsHere(n)
	err := errors.Join(errs...)
	sharedSingle.Store(n == 1 && err == nil)
	return err
}

// SetNumThreadsOnThisThread sets the intra-op thread count for the calling OS thread only;
// OpenBLAS's count, being process-wide, follows the last call. Use it inside Do, where
// SetNumThreads would wait for the very worker it runs on, and to switch counts often (a
// thread-count measurement): it leaves libtorch's process-wide count, and the pool of threads
// that changing it restarts, alone. n must be within 1..AvailableCPUs().
func SetNumThreadsOnThisThread(n int) error {
	if err := checkThreadCount("set threads", n); err != nil {
		return err
	}
	// This may be the shared thread: Forward goes back to it until SetNumThreads sets one count
	// for all threads again.
	sharedSingle.Store(false)
	return setOnlyHere(n)
}

// sharedSingle: every inference thread runs at one intra-op thread (the last SetNumThreads set
// 1, and no thread's count was changed on its own since), so Forward runs on its callers'
// threads (see Forward); singleMu keeps those calls one at a time, as the shared thread runs
// its forwards.
var (
	sharedSingle atomic.Bool
	singleMu     sync.Mutex
)

// setThreadsHere sets the calling thread's count, and libtorch's process-wide one when it
// differs (see ts_set_num_threads).
func setThreadsHere(n int) error { return statusErr(C.ts_set_num_threads(C.int32_t(n))) }

// setOnlyHere sets the calling thread's count alone: switching counts block by block with
// at::set_num_threads started a new pthreadpool of threads spinning ~20 ms each time.
func setOnlyHere(n int) error { return statusErr(C.ts_set_num_threads_here(C.int32_t(n))) }

// checkThreadCount refuses counts libtorch would truncate (C int) or that would start more
// threads than the process can run at once (a count of 2000 grew a host process to 4,068
// threads).
func checkThreadCount(op string, n int) error {
	if avail := AvailableCPUs(); n < 1 || n > avail {
		return &Error{Op: op, Code: InvalidArgument, Msg: fmt.Sprintf("%d is not a usable thread count: use 1..%d (the CPUs available to this process)", n, avail)}
	}
	return nil
}

var (
	availOnce sync.Once
	availCPUs int
)

// AvailableCPUs is how many CPUs this process may run on at once: its affinity mask and
// cpuset, lowered to its cgroup CPU quota (pkg/cpu's Usable.Count), read once.
func AvailableCPUs() int {
	availOnce.Do(func() {
		availCPUs = runtime.NumCPU()
		if p, err := cpu.Detect(cpu.Options{}); err == nil && p.Usable.Count > 0 {
			availCPUs = p.Usable.Count
		}
	})
	return availCPUs
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
	Do(func() { n = int(C.ts_get_num_threads()) })
	return n
}

// NumThreadsOnThisThread is the intra-op thread count of the calling OS thread (inside Do or
// Thread.Do: the count that thread's calls run with).
func NumThreadsOnThisThread() int { return int(C.ts_get_num_threads()) }

// SetNumInteropThreads sets the inter-op pool size. libtorch allows it once, before any
// inter-op work; later calls with another value fail.
// n must be within 1..AvailableCPUs().
func SetNumInteropThreads(n int) error {
	if err := checkThreadCount("set inter-op threads", n); err != nil {
		return err
	}
	return statusErr(C.ts_set_num_interop_threads(C.int32_t(n)))
}

// NumInteropThreads is the inter-op pool size.
func NumInteropThreads() int { return int(C.ts_get_num_interop_threads()) }

// SupportedQEngines lists the quantized engines of this build, e.g. [onednn qnnpack]; "none"
// is left out.
func SupportedQEngines() ([]string, error) {
	var p *C.char
	if err := statusErr(C.ts_supported_qengines(&p)); err != nil {
		return nil, err
	}
	var out []string
	for _, e := range strings.Split(takeString(p), ",") {
		if e != "" && e != "none" {
			out = append(out, e)
		}
	}
	return out, nil
}

// QEngine is the current quantized engine.
func QEngine() (string, error) {
	var p *C.char
	if err := statusErr(C.ts_get_qengine(&p)); err != nil {
		return "", err
	}
	return takeString(p), nil
}

// engineMu serializes the process-wide quantized engine with the work that depends on it: a
// load packs INT8 weights for the engine set at that moment, and a conversion packs them for
// its own; a switch in between would pack them for another engine (outputs differed by 0.127).
var engineMu sync.Mutex

// SetQEngine selects the quantized engine (x86, fbgemm, onednn, qnnpack). It must be set
// before converting or loading an INT8 model: LoadWithEngine does both under one lock.
func SetQEngine(name string) error {
	engineMu.Lock()
	defer engineMu.Unlock()
	return setQEngineLocked(name)
}

func setQEngineLocked(name string) error {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return statusErr(C.ts_set_qengine(cs))
}

// Info is libtorch's build and thread configuration as pkg/cpu's probe takes it
// (cpu.Options.Torch): version, show_config, parallel info, quantized engines (supported and
// current), thread counts and the BLAS library found; Detect parses the rest.
func Info() (*cpu.TorchInfo, error) {
	showConfig, err := ShowConfig()
	if err != nil {
		return nil, err
	}
	parallelInfo, err := ParallelInfo()
	if err != nil {
		return nil, err
	}
	qengines, err := SupportedQEngines()
	if err != nil {
		return nil, err
	}
	qengine, err := QEngine()
	if err != nil {
		return nil, err
	}
	info := &cpu.TorchInfo{
		Version: Version(), ShowConfig: showConfig, ParallelInfo: parallelInfo,
		QEngines: qengines, QEngine: qengine, NumThreads: NumThreads(), NumInteropThreads: NumInteropThreads(),
	}
	if b, err := BLAS(); err == nil && b.Library != "" {
		info.BLAS = &cpu.BLASInfo{Library: b.Library, Config: b.Config, Threading: b.Threading, Threads: b.Threads}
	}
	return info, nil
}
