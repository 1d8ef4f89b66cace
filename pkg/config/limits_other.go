//go:build !linux

package config

// availableMemory is unknown outside Linux: only overflow is checked there.
func availableMemory() (int64, string) { return 0, "" }
