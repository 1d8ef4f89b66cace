//go:build !linux

package cpu

// liveAffinity has no portable source off Linux: nil makes Detect note that the mask is
// unknown and assume every online CPU.
func liveAffinity() CPUSet { return nil }
