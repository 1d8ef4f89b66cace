//go:build !linux

package bench

// affinityCPUs is unknown off Linux.
func affinityCPUs() []int { return nil }

// PeakRSS is not read off Linux (ru_maxrss has another unit elsewhere): nil, "not measured".
func PeakRSS() *int64 { return nil }
