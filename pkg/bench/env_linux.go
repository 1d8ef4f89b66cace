package bench

import "golang.org/x/sys/unix"

// affinityCPUs lists the CPUs in this process's affinity mask (what
// taskset or numactl allowed), nil if it cannot be read.
func affinityCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus
}

// PeakRSS is the most resident memory this process has held so far (getrusage's ru_maxrss, in
// kilobytes on Linux), in bytes; nil when it cannot be read.
func PeakRSS() *int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return nil
	}
	b := ru.Maxrss * 1024
	return &b
}
