package cpu

import (
	"errors"
	"runtime"

	"golang.org/x/sys/unix"
)

// liveAffinity returns the calling thread's affinity mask, nil when the kernel refuses it.
func liveAffinity() CPUSet {
	// The mask of the calling thread is the process's unless someone changed one thread;
	// lock so the answer is for one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for n := 1024; n <= 1<<16; n *= 2 {
		set := unix.NewCPUSet(n)
		if err := unix.SchedGetaffinityDynamic(0, set); err != nil {
			if errors.Is(err, unix.EINVAL) {
				continue // the kernel's mask is larger than ours
			}
			return nil
		}
		var cpus []int
		for c := 0; c < n; c++ {
			if set.IsSet(c) {
				cpus = append(cpus, c)
			}
		}
		return CPUSet(cpus)
	}
	return nil
}
