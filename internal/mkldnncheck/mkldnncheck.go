// Package mkldnncheck tells whether libtorch's oneDNN (MKLDNN) kernels work on this machine
// before torchspeed relies on them. Some oneDNN builds die with SIGFPE on some CPUs (Debian
// 13's libdnnl 3.7.2 on an AMD EPYC VM: any add of MKLDNN tensors), and a signal cannot be
// caught in-process: the check runs the kernels in a child process and reads how it ended.
// optimize_for_inference rewrites convolutions and adds to exactly those kernels.
package mkldnncheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
)

// ChildEnv, set to "1" in a process's environment, makes ChildMain run the probe. Test
// binaries re-exec themselves with it (see SelfCheck).
const ChildEnv = "TORCHSPEED_MKLDNN_CHECK_CHILD"

// Timeout bounds one check: the probe takes well under a second; a child that hangs counts
// as broken.
const Timeout = 60 * time.Second

// probeSource is a TorchScript method that runs an MKLDNN-tensor add (what optimize_for_inference
// leaves between fused convolutions) and a oneDNN convolution.
const probeSource = `
def ts_mkldnn_check(self, x: Tensor, w: Tensor) -> Tuple[Tensor, Tensor]:
    y = x.to_mkldnn()
    z = (y + y).to_dense()
    c = torch.mkldnn_convolution(x, w, None, [1, 1], [1, 1], [1, 1], 1)
    return z, c
`

// Probe runs the oneDNN kernels in this process and checks the add's result. A broken oneDNN
// may kill the process by a signal instead of returning: call it only in a child process.
func Probe() error {
	// Any module can host the method; an observer is the one the bindings make without a file.
	m, err := torch.NewObserver(torch.ObserverConfig{Observer: "minmax"}, false)
	if err != nil {
		return fmt.Errorf("mkldnn check: %w", err)
	}
	defer m.Close()
	if err := m.Define(probeSource); err != nil {
		return fmt.Errorf("mkldnn check: %w", err)
	}
	xs := make([]float32, 1*8*4*4)
	for i := range xs {
		xs[i] = float32(i%7) - 3
	}
	ws := make([]float32, 8*8*3*3)
	for i := range ws {
		ws[i] = float32(i%5)/10 - 0.2
	}
	x, err := torch.NewTensor(xs, []int64{1, 8, 4, 4})
	if err != nil {
		return err
	}
	defer x.Close()
	w, err := torch.NewTensor(ws, []int64{8, 8, 3, 3})
	if err != nil {
		return err
	}
	defer w.Close()
	outs, err := m.RunMethod("ts_mkldnn_check", x, w)
	if err != nil {
		return fmt.Errorf("mkldnn check: %w", err)
	}
	defer torch.CloseOutputs(outs)
	if len(outs) != 2 {
		return fmt.Errorf("mkldnn check: %d outputs, want 2", len(outs))
	}
	z, err := outs[0].Tensor.Float32s()
	if err != nil {
		return err
	}
	for i, v := range z {
		if v != 2*xs[i] {
			return fmt.Errorf("mkldnn check: MKLDNN add gave %g at %d, want %g", v, i, 2*xs[i])
		}
	}
	return nil
}

// ChildMain is the child side: when ChildEnv is set it runs Probe and exits (0: oneDNN works,
// 1: it failed with an error, printed to stderr). Otherwise it returns at once. Call it first
// in a TestMain, or from a hidden subcommand.
func ChildMain() {
	if os.Getenv(ChildEnv) != "1" {
		return
	}
	if err := Probe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Check runs cmd, a child process that runs Probe, and says why oneDNN cannot be used here:
// "" when the child exited 0. A child killed by a signal, one that failed, and one that ran
// past Timeout all give a reason. err is only for a child that could not be started: then
// nothing is known, and the caller decides.
func Check(ctx context.Context, cmd *exec.Cmd) (reason string, err error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd.Stdout = nil
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("mkldnn check: starting %s: %w", cmd.Path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return fmt.Sprintf("a oneDNN (MKLDNN) check in a child process did not finish in %s", Timeout), nil
	}
	if werr == nil {
		return "", nil
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) {
		return "", fmt.Errorf("mkldnn check: %w", werr)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("libtorch's oneDNN (MKLDNN) kernels crash on this machine (a check in a child process died by %s: %v)",
			signalName(ws.Signal()), ws.Signal()), nil
	}
	// Go's runtime reports a fatal signal it caught in C code and exits 2 instead of dying
	// by it: its report names the signal.
	if m := goCrash.FindStringSubmatch(stderr.String()); m != nil {
		return fmt.Sprintf("libtorch's oneDNN (MKLDNN) kernels crash on this machine (a check in a child process died by %s)", m[1]+m[2]), nil
	}
	msg := strings.TrimSpace(stderr.String())
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	if msg == "" {
		msg = werr.Error()
	}
	return "libtorch's oneDNN (MKLDNN) kernels failed a check on this machine: " + msg, nil
}

// SelfCheck runs Check with this executable re-exec'd with ChildEnv set and args (for a test
// binary, e.g. "-test.run=^$" so that no test runs before TestMain's ChildMain exits).
func SelfCheck(ctx context.Context, args ...string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("mkldnn check: finding this executable: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), ChildEnv+"=1")
	return Check(ctx, cmd)
}

// goCrash finds the signal in a Go crash report: "SIGFPE: floating-point exception" or
// "[signal SIGSEGV: segmentation violation ...]".
var goCrash = regexp.MustCompile(`(?m)^(?:\[signal )?(SIG[A-Z]+)(: [a-z -]+)`)

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGFPE:
		return "SIGFPE"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGILL:
		return "SIGILL"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return fmt.Sprintf("signal %d", int(s))
}
