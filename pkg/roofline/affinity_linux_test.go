//go:build linux

package roofline

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// A thread pinned to one CPU does not shrink the process's CPU set.
func TestAllowedCPUsIgnoresPinnedThread(t *testing.T) {
	all := allowedCPUs()
	if len(all) == 0 {
		t.Fatal("no CPUs found")
	}
	if len(all) < 2 {
		t.Skipf("one CPU (%v): nothing to pin away from", all)
	}
	done := make(chan []int)
	go func() {
		// The thread exits with the goroutine (never unlocked), taking its mask along.
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(all[0])
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			t.Error(err)
		}
		done <- allowedCPUs()
	}()
	if got := <-done; len(got) != len(all) {
		t.Errorf("from a thread pinned to CPU %d: %v, want %v", all[0], got, all)
	}
}
