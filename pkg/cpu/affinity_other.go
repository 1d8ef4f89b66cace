//go:build !linux

package cpu

import "fmt"

// liveAffinity has no portable source off Linux: nil makes Detect note that the mask is
// unknown and assume every online CPU.
func liveAffinity() CPUSet { return nil }

// pinCurrentThread cannot pin off Linux.
func pinCurrentThread(cpu int) (func() error, error) {
	return nil, fmt.Errorf("pinning a thread to CPU %d needs Linux", cpu)
}
