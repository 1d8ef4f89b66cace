//go:build !amd64 || !gc || purego

package cpu

// readXCR0 has nothing to read off amd64 (or without Go assembly).
func readXCR0(bool) (uint64, bool) { return 0, false }
