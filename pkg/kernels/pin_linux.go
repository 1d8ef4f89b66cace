//go:build linux

package kernels

import "golang.org/x/sys/unix"

// pinThread binds the calling OS thread (locked by the caller) to one CPU.
func pinThread(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}

// allowedCPUs lists the CPUs this process may run on.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for i := 0; i < 8192 && len(cpus) < set.Count(); i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus
}
