package torch

// SetYield turns the caller's periodic yield to Go's scheduler (yieldIfDue) on or off, for
// benchmarks that measure what it changes.
func SetYield(on bool) { yieldOff.Store(!on) }
