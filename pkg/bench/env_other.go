//go:build !linux

package bench

// affinityCPUs is unknown off Linux.
func affinityCPUs() []int { return nil }
