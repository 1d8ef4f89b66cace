package runenv

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// ReexecMarker is set in the environment of a process EnsureEnv re-executed, so a
// second pass that still finds differences stops instead of looping.
const ReexecMarker = "TORCHSPEED_REEXEC"

// ErrMemBindNotAllowed wraps the kernel's refusal to set a memory policy: EPERM where a
// container's seccomp profile blocks set_mempolicy (Docker's does without
// CAP_SYS_NICE), ENOSYS on kernels without NUMA.
var ErrMemBindNotAllowed = errors.New("memory binding not allowed here")

func cpuMask(cpus cpu.CPUSet) unix.CPUSetDynamic {
	n := 1024
	if len(cpus) > 0 && cpus[len(cpus)-1] >= n {
		n = cpus[len(cpus)-1] + 1
	}
	set := unix.NewCPUSet(n)
	for _, c := range cpus {
		set.Set(c)
	}
	return set
}

// PinThread sets the CPU affinity of one thread (tid 0: the calling thread). A thread
// started later inherits the mask of the thread that starts it, and execve keeps it.
func PinThread(tid int, cpus cpu.CPUSet) error {
	if len(cpus) == 0 {
		return errors.New("pin thread: empty CPU list")
	}
	if err := unix.SchedSetaffinityDynamic(tid, cpuMask(cpus)); err != nil {
		return fmt.Errorf("sched_setaffinity(%d, %s): %w", tid, cpus, err)
	}
	return nil
}

// PinProcess sets the CPU affinity of every thread of this process.
func PinProcess(cpus cpu.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("pin process: list threads: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := PinThread(tid, cpus); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue // the thread ended meanwhile
			}
			return err
		}
	}
	return nil
}

// BindThreadMemory sets the calling OS thread's memory policy to MPOL_BIND on node:
// its future allocations come from that node only. The policy is per thread, inherited
// by threads it starts and kept across execve; lock the goroutine to its thread
// (runtime.LockOSThread) around the call and what depends on it.
func BindThreadMemory(node int) error {
	if node < 0 {
		return fmt.Errorf("bind memory: bad node %d", node)
	}
	mask := make([]uint64, node/64+1)
	mask[node/64] |= 1 << (node % 64)
	// maxnode counts bits; the kernel reads maxnode-1 of them.
	_, _, e := unix.Syscall(unix.SYS_SET_MEMPOLICY, uintptr(unix.MPOL_BIND),
		uintptr(unsafe.Pointer(&mask[0])), uintptr(len(mask)*64+1))
	runtime.KeepAlive(mask)
	if e != 0 {
		if e == unix.EPERM || e == unix.ENOSYS {
			return fmt.Errorf("set_mempolicy(MPOL_BIND, node %d): %w: %w", node, ErrMemBindNotAllowed, e)
		}
		return fmt.Errorf("set_mempolicy(MPOL_BIND, node %d): %w", node, e)
	}
	return nil
}

// threadMemBind returns the calling thread's memory policy mode and its first node.
func threadMemBind() (mode int, node int, err error) {
	var m int32
	mask := make([]uint64, 16)
	_, _, e := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&m)),
		uintptr(unsafe.Pointer(&mask[0])), uintptr(len(mask)*64), 0, 0, 0)
	runtime.KeepAlive(mask)
	if e != 0 {
		return 0, -1, e
	}
	for i, w := range mask {
		for b := 0; b < 64; b++ {
			if w&(1<<b) != 0 {
				return int(m), i*64 + b, nil
			}
		}
	}
	return int(m), -1, nil
}

// ApplyInProcess applies what can be applied to a running process: the CPU affinity of
// all its threads, the memory policy of the calling thread (see BindThreadMemory), and
// the environment (for child processes and libraries not loaded yet). It returns what
// it applied and warnings; a refused memory binding is a warning, not an error.
//
// OpenMP runtimes read their variables once, when they start; for libtorch linked into
// this binary that is before main. Thread counts are set through libtorch
// (torch.SetNumThreads(s.Threads), torch.SetNumInteropThreads(s.InteropThreads)); the
// wait policy and the allocator need EnsureEnv's re-exec.
func ApplyInProcess(s Settings) (applied []string, warnings []string, err error) {
	if err := PinProcess(s.CPUs); err != nil {
		return nil, nil, err
	}
	applied = append(applied, "affinity "+s.CPUs.String())
	if s.MemBind {
		if err := BindThreadMemory(s.NUMANode); err != nil {
			if !errors.Is(err, ErrMemBindNotAllowed) {
				return applied, warnings, err
			}
			warnings = append(warnings, fmt.Sprintf("%v; memory stays where first touched (normally the node of the CPU that touches it)", err))
		} else {
			applied = append(applied, fmt.Sprintf("memory bound to node %d (calling thread)", s.NUMANode))
		}
	}
	loaded := openMPLoaded()
	for _, v := range s.Vars {
		old, had := os.LookupEnv(v.Name)
		if had && hasVar(v, old) {
			continue
		}
		value := mergeList(v.Name, old, v.Value)
		if err := os.Setenv(v.Name, value); err != nil {
			return applied, warnings, fmt.Errorf("set %s: %w", v.Name, err)
		}
		applied = append(applied, v.Name+"="+value)
		isOMP := strings.HasPrefix(v.Name, "OMP_") || strings.HasPrefix(v.Name, "KMP_") || strings.HasPrefix(v.Name, "GOMP_")
		switch {
		case loaded != "" && isOMP:
			warnings = append(warnings, fmt.Sprintf("%s set after %s started; it takes effect after a re-exec (EnsureEnv)", v.Name, loaded))
		case v.Name == "GLIBC_TUNABLES" || v.Name == "MALLOC_CONF":
			warnings = append(warnings, fmt.Sprintf("%s set after the allocator started; it takes effect after a re-exec (EnsureEnv)", v.Name))
		}
	}
	if s.AllocatorPath != "" && !strings.Contains(os.Getenv("LD_PRELOAD"), s.AllocatorPath) {
		warnings = append(warnings, fmt.Sprintf("allocator %s is not preloaded; it takes effect after a re-exec (EnsureEnv)", s.Allocator))
	}
	return applied, warnings, nil
}

// hasVar says an environment value got already carries v: the same value, or for a list
// (GLIBC_TUNABLES, MALLOC_CONF) one that sets v's entries.
func hasVar(v Var, got string) bool {
	if _, ok := listVars[v.Name]; ok {
		return listHas(v.Name, got, v.Value)
	}
	return got == v.Value
}

// openMPLoaded returns the file name of an OpenMP runtime mapped into this process, or
// "" when none is.
func openMPLoaded() string {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		base := f[len(f)-1]
		if i := strings.LastIndexByte(base, '/'); i >= 0 {
			base = base[i+1:]
		}
		for _, p := range []string{"libgomp", "libiomp5", "libomp."} {
			if strings.HasPrefix(base, p) {
				return base
			}
		}
	}
	return ""
}

// Differences lists what of s this process does not have yet: variables with another
// value, the allocator missing from LD_PRELOAD, an affinity or memory policy that is
// not the instance's.
func Differences(s Settings) []string {
	var diff []string
	for _, v := range s.Vars {
		if got, ok := os.LookupEnv(v.Name); !ok || !hasVar(v, got) {
			diff = append(diff, fmt.Sprintf("%s=%q (want %q)", v.Name, got, v.Value))
		}
	}
	if s.AllocatorPath != "" && !strings.Contains(os.Getenv("LD_PRELOAD"), s.AllocatorPath) {
		diff = append(diff, "LD_PRELOAD lacks "+s.AllocatorPath)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	set := unix.NewCPUSet(1024)
	if err := unix.SchedGetaffinityDynamic(0, set); err == nil {
		var have []int
		for c := 0; c < 1024; c++ {
			if set.IsSet(c) {
				have = append(have, c)
			}
		}
		if !cpu.CPUSet(have).Equal(s.CPUs) {
			diff = append(diff, fmt.Sprintf("affinity %s (want %s)", cpu.CPUSet(have), s.CPUs))
		}
	}
	if s.MemBind {
		if mode, node, err := threadMemBind(); err == nil && (mode != unix.MPOL_BIND || node != s.NUMANode) {
			diff = append(diff, fmt.Sprintf("memory policy mode %d node %d (want bind to %d)", mode, node, s.NUMANode))
		}
	}
	return diff
}

// EnsureEnv makes this process run with s, re-executing it when the OpenMP variables,
// the allocator or the memory policy need a fresh start: it pins the calling thread,
// binds its memory, and execs os.Args with the new environment (affinity and memory
// policy survive execve). It returns (false, nil) when nothing had to change, and
// (true, nil) in the re-executed process once everything is in place; on a successful
// exec it does not return. A second re-exec that still differs is an error, never a
// loop; a memory binding the kernel refuses does not count as a difference.
func EnsureEnv(s Settings) (reexeced bool, err error) {
	reexeced = os.Getenv(ReexecMarker) != ""
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	memBindOK := true
	if s.MemBind {
		if err := BindThreadMemory(s.NUMANode); err != nil {
			if !errors.Is(err, ErrMemBindNotAllowed) {
				return reexeced, err
			}
			memBindOK = false
			s.MemBind = false
		}
	}
	if err := PinProcess(s.CPUs); err != nil {
		return reexeced, err
	}
	diff := Differences(s)
	// Affinity is fixed in place above; a policy set only now on this thread does not
	// cover the threads already running, so a first bind needs the exec too.
	needExec := len(diff) > 0 || (s.MemBind && memBindOK && !reexeced)
	if !needExec {
		return reexeced, nil
	}
	if reexeced {
		return true, fmt.Errorf("re-executed with torchspeed's settings, but still: %s; something in the program or its environment overrides them", strings.Join(diff, "; "))
	}
	exe, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("re-exec: find own executable: %w", err)
	}
	env := append(s.Environ(os.Environ()), ReexecMarker+"=1")
	if err := syscall.Exec(exe, os.Args, env); err != nil {
		return false, fmt.Errorf("re-exec %s: %w", exe, err)
	}
	return false, nil
}
