//go:build !linux

package kernels

import "errors"

// pinThread is not available here: threads are locked but not bound.
func pinThread(cpu int) error {
	return errors.New("binding a thread to a CPU is only implemented on Linux")
}

func allowedCPUs() []int { return nil }
