//go:build linux

package roofline

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// allowedCPUs lists the CPUs this process may run on, in order (nil when unknown: the peak
// then runs on every CPU). sched_getaffinity answers for the calling thread only, and the
// runtime settings pin inference threads to single CPUs, so the process's set is the union of
// its threads' masks (Cpus_allowed_list of each /proc/self/task/*/status).
func allowedCPUs() []int {
	seen := map[int]bool{}
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, st := range tasks {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				if set, err := cpu.ParseCPUList(strings.TrimSpace(v)); err == nil {
					for _, c := range set {
						seen[c] = true
					}
				}
			}
		}
	}
	if len(seen) == 0 {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return nil
		}
		for i := 0; i < len(set)*64; i++ {
			if set.IsSet(i) {
				seen[i] = true
			}
		}
	}
	cpus := make([]int, 0, len(seen))
	for c := range seen {
		cpus = append(cpus, c)
	}
	sort.Ints(cpus)
	return cpus
}
