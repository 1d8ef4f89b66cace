//go:build !linux

package launch

import (
	"errors"
	"io"
	"syscall"
)

// placeThread fails off Linux: thread affinity and memory policy inherited through fork
// and exec are Linux features, and starting instances unpinned would be a silent lie.
func placeThread(spec Spec, _ io.Writer) error {
	if len(spec.CPUs) == 0 && spec.MemNode < 0 {
		return nil
	}
	return errors.New("pinning instances to CPUs and memory nodes needs Linux; run torchspeed launch on Linux")
}

// instanceAttr: each instance leads its own process group (there is no parent-death signal
// off Linux).
func instanceAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// dieWithParent does nothing off Linux: there is no parent-death signal.
func dieWithParent(int) error { return nil }
