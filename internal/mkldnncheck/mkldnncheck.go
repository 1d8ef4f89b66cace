// Package mkldnncheck tells whether libtorch's oneDNN (MKLDNN) kernels work on this machine
// before torchspeed relies on them. Some oneDNN builds die with SIGFPE on some CPUs (Debian
// 13's libdnnl 3.7.2 on an AMD EPYC VM: any add of MKLDNN tensors), and a signal cannot be
// caught in-process: the check runs the kernels in a child process and reads how it ended.
// Others return wrong numbers: the same libtorch 2.6 computes an FP32 convolution of a batch
// of 2 or more with 17-47 input channels (not a multiple of 16) wrongly, by up to 4 on values
// of about 15, through oneDNN's AVX2 and AVX-512 kernels alike, so the check also compares
// one such convolution with a direct one. optimize_for_inference rewrites convolutions and
// adds to exactly those kernels.
package mkldnncheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/refconv"
)

// ChildEnv, set to "1" in a process's environment, makes ChildMain run the probe. Test
// binaries re-exec themselves with it (see SelfCheck).
const ChildEnv = "TORCHSPEED_MKLDNN_CHECK_CHILD"

// Timeout bounds one check: the probe takes well under a second; a child that hangs counts
// as broken.
const Timeout = 60 * time.Second

// probeSource holds the check's TorchScript methods: a plain FP32 convolution of a batch of 2
// with 17 input channels (which libtorch hands to oneDNN), then an MKLDNN-tensor add (what
// optimize_for_inference leaves between fused convolutions) and a oneDNN convolution.
const probeSource = `
def ts_conv_check(self, xb: Tensor, wb: Tensor) -> Tensor:
    return torch.conv2d(xb, wb)

def ts_mkldnn_check(self, x: Tensor, w: Tensor) -> Tuple[Tensor, Tensor]:
    y = x.to_mkldnn()
    z = (y + y).to_dense()
    c = torch.mkldnn_convolution(x, w, None, [1, 1], [1, 1], [1, 1], 1)
    return z, c
`

// The batched convolution's shape: [convN, convIC, convHW, convHW] by [convOC, convIC, 3, 3].
const (
	convN, convIC, convHW, convOC = 2, 17, 6, 16
)

var convShape = refconv.Shape{N: convN, C: convIC, H: convHW, W: convHW, OC: convOC, KH: 3, KW: 3,
	Stride: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 1}

// Probe runs the oneDNN kernels in this process and checks the convolution's and the add's
// results, the convolution first: a libtorch that does both wrong (Debian's 2.6 here) is named
// for the wrong numbers, which touch every model with such convolutions, not only torchspeed's
// passes. A broken oneDNN may kill the process by a signal instead of returning: call it only
// in a child process.
func Probe() error {
	// Any module can host the methods; an observer is the one the bindings make without a file.
	m, err := torch.NewObserver(torch.ObserverConfig{Observer: "minmax"}, false)
	if err != nil {
		return fmt.Errorf("mkldnn check: %w", err)
	}
	defer m.Close()
	if err := m.Define(probeSource); err != nil {
		return fmt.Errorf("mkldnn check: %w", err)
	}
	xbs, wbs := pattern(convN*convIC*convHW*convHW, 7, 1, 3), pattern(convOC*convIC*3*3, 5, 10, 0.2)
	cb, err := run(m, "ts_conv_check", 1, []input{{xbs, []int64{convN, convIC, convHW, convHW}}, {wbs, []int64{convOC, convIC, 3, 3}}})
	if err != nil {
		return err
	}
	if err := CheckConv(cb[0], xbs, wbs); err != nil {
		return err
	}
	xs, ws := pattern(1*8*4*4, 7, 1, 3), pattern(8*8*3*3, 5, 10, 0.2)
	outs, err := run(m, "ts_mkldnn_check", 2, []input{{xs, []int64{1, 8, 4, 4}}, {ws, []int64{8, 8, 3, 3}}})
	if err != nil {
		return err
	}
	for i, v := range outs[0] {
		if v != 2*xs[i] {
			return fmt.Errorf("mkldnn check: MKLDNN add gave %g at %d, want %g", v, i, 2*xs[i])
		}
	}
	return nil
}

// input is a tensor to make: its values and shape.
type input struct {
	v     []float32
	shape []int64
}

// run calls method on m with the inputs and returns its n tensor outputs' values.
func run(m *torch.Module, method string, n int, inputs []input) ([][]float32, error) {
	ins := make([]*torch.Tensor, 0, len(inputs))
	defer func() {
		for _, t := range ins {
			t.Close()
		}
	}()
	for _, in := range inputs {
		t, err := torch.NewTensor(in.v, in.shape)
		if err != nil {
			return nil, err
		}
		ins = append(ins, t)
	}
	outs, err := m.RunMethod(method, ins...)
	if err != nil {
		return nil, fmt.Errorf("mkldnn check: %w", err)
	}
	defer torch.CloseOutputs(outs)
	if len(outs) != n {
		return nil, fmt.Errorf("mkldnn check: %s gave %d outputs, want %d", method, len(outs), n)
	}
	vals := make([][]float32, n)
	for i, o := range outs {
		if o.Tensor == nil {
			return nil, fmt.Errorf("mkldnn check: %s's output %d is not a tensor", method, i)
		}
		if vals[i], err = o.Tensor.Float32s(); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

// pattern is n values (i mod k)/div - off: small, exact in float32, and varied enough that a
// convolution reading the wrong elements gives other sums.
func pattern(n, k int, div, off float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%k)/div - off
	}
	return v
}

// CheckConv compares got, libtorch's convolution of x [convN, convIC, convHW, convHW] by
// w [convOC, convIC, 3, 3] (no padding, stride 1), with a direct one in float64. Its sums are
// of 153 products of values under 3 in magnitude: float32 rounding stays far below 1e-3.
func CheckConv(got, x, w []float32) error {
	oh, ow := convShape.Out()
	want := refconv.Conv2d(x, w, nil, convShape, false)
	if len(got) != len(want) {
		return fmt.Errorf("mkldnn check: the convolution gave %d values, want %d", len(got), len(want))
	}
	for i, s := range want {
		if d := math.Abs(float64(got[i]) - s); !(d <= 1e-3) {
			return fmt.Errorf("mkldnn check: libtorch's FP32 convolution of a batch of %d with %d input channels gives wrong results here: %g at element %d of [%d, %d, %d, %d], want %.6g",
				convN, convIC, got[i], i, convN, convOC, oh, ow, s)
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
