//go:build !linux

package memlimit

// Available is unknown outside Linux (0): only overflow is checked there.
func Available() (int64, string) { return 0, "" }
