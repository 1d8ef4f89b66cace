package cpu

import (
	"errors"
	"fmt"
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

// pinCurrentThread binds the calling OS thread, which the caller has locked, to one CPU. The
// returned function puts the thread's mask back.
func pinCurrentThread(cpu int) (restore func() error, err error) {
	if cpu < 0 || cpu >= 1<<16 {
		return nil, fmt.Errorf("CPU %d out of range", cpu)
	}
	var orig unix.CPUSetDynamic
	for n := 1024; n <= 1<<16; n *= 2 {
		orig = unix.NewCPUSet(n)
		if err = unix.SchedGetaffinityDynamic(0, orig); !errors.Is(err, unix.EINVAL) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read the thread's mask: %w", err)
	}
	set := unix.NewCPUSet(cpu + 1)
	set.Set(cpu)
	if err := unix.SchedSetaffinityDynamic(0, set); err != nil {
		return nil, err
	}
	return func() error { return unix.SchedSetaffinityDynamic(0, orig) }, nil
}
