package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// placeThread pins the calling (locked) OS thread to spec's CPUs and binds its memory to
// spec's node, the state a child started or exec'd from this thread inherits. A memory
// binding the kernel refuses (a container's seccomp profile) is reported on warn and
// skipped, not fatal.
func placeThread(spec Spec, warn io.Writer) error {
	if len(spec.CPUs) > 0 {
		if err := runenv.PinThread(0, spec.CPUs); err != nil {
			return fmt.Errorf("pin to CPUs %s: %w", spec.CPUs, err)
		}
	}
	if spec.MemNode >= 0 {
		if err := runenv.BindThreadMemory(spec.MemNode); err != nil {
			if !errors.Is(err, runenv.ErrMemBindNotAllowed) {
				return err
			}
			fmt.Fprintf(warn, "torchspeed launch: warning: %v; running without memory binding\n", err)
		}
	}
	return nil
}

// instanceAttr: each instance leads its own process group, and gets SIGKILL when the thread
// that started it ends (see Run).
func instanceAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// dieWithParent sets SIGKILL as the calling thread's parent-death signal, and fails when the
// parent (pid) is already gone, since the signal would then never come.
func dieWithParent(pid int) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	if os.Getppid() != pid {
		return fmt.Errorf("the launcher (pid %d) is gone", pid)
	}
	return nil
}
