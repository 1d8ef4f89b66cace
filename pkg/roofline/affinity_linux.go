//go:build linux

package roofline

import "golang.org/x/sys/unix"

// allowedCPUs lists the CPUs this process may run on, in order (nil when unknown: the peak
// then runs on every CPU).
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for i := 0; i < len(set)*64 && len(cpus) < set.Count(); i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus
}
