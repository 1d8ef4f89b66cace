package mkldnncheck_test

import (
	"context"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/mkldnncheck"
	"github.com/torchspeed/torchspeed/internal/refconv"
)

// fakeEnv makes the re-exec'd test binary play a child that ends a given way.
const fakeEnv = "MKLDNNCHECK_TEST_FAKE"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeEnv) {
	case "sigfpe":
		// What a broken oneDNN does under Go: the runtime catches the SIGFPE, prints its
		// crash report and exits 2.
		signal.Reset(syscall.SIGFPE)
		_ = syscall.Kill(os.Getpid(), syscall.SIGFPE)
		time.Sleep(10 * time.Second)
		os.Exit(0)
	case "fail":
		os.Stderr.WriteString("some log line\nmkldnn check: no kernel\n")
		os.Exit(1)
	case "hang":
		time.Sleep(time.Hour)
	case "ok":
		os.Exit(0)
	}
	mkldnncheck.ChildMain()
	os.Exit(m.Run())
}

func fakeChild(t *testing.T, mode string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	if mode == "killed" {
		// A child that dies by the signal itself (a C handler that re-raises it, as UCX does).
		cmd = exec.Command("/bin/sh", "-c", "kill -FPE $$")
	}
	cmd.Env = append(os.Environ(), fakeEnv+"="+mode)
	return cmd
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		mode, want string
		timeout    time.Duration
	}{
		{"ok", "", 0},
		{"sigfpe", "crash on this machine (a check in a child process died by SIGFPE: floating-point exception)", 0},
		{"killed", "crash on this machine (a check in a child process died by SIGFPE: floating point exception)", 0},
		{"fail", "failed a check on this machine: mkldnn check: no kernel", 0},
		{"hang", "did not finish", 300 * time.Millisecond},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			reason, err := mkldnncheck.Check(ctx, fakeChild(t, tc.mode))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && reason != "" || tc.want != "" && !strings.Contains(reason, tc.want) {
				t.Errorf("reason %q, want one containing %q", reason, tc.want)
			}
		})
	}
	t.Run("cannot start", func(t *testing.T) {
		_, err := mkldnncheck.Check(context.Background(), exec.Command("/nonexistent/torchspeed"))
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/torchspeed") {
			t.Errorf("err %v, want one naming the executable", err)
		}
	})
}

// TestSelfCheck runs the real probe in a child: on a machine whose oneDNN works (libtorch 1.13
// on Debian 12 here) the reason is empty; where it is not, the reason must say why.
func TestSelfCheck(t *testing.T) {
	t0 := time.Now()
	reason, err := mkldnncheck.SelfCheck(context.Background(), "-test.run=^$")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("self check in %v: %q", time.Since(t0).Round(time.Millisecond), reason)
	if reason != "" && !strings.Contains(reason, "oneDNN") {
		t.Errorf("reason %q does not name oneDNN", reason)
	}
}

// TestProbe runs the probe in this process only where the child said it is safe.
func TestProbe(t *testing.T) {
	reason, err := mkldnncheck.SelfCheck(context.Background(), "-test.run=^$")
	if err != nil {
		t.Fatal(err)
	}
	if reason != "" {
		t.Skipf("oneDNN is broken here: %s", reason)
	}
	if err := mkldnncheck.Probe(); err != nil {
		t.Fatal(err)
	}
}

// TestCheckConv: the check accepts a right convolution (the reference rounded to float32) and
// names the first wrong element of one that read a wrong input, as Debian's libtorch 2.6 does
// for this shape; a short or NaN result fails too.
func TestCheckConv(t *testing.T) {
	x, w := mkldnncheck.Pattern(2*17*6*6, 7, 1, 3), mkldnncheck.Pattern(16*17*3*3, 5, 10, 0.2)
	right := refconv.Conv2d(x, w, nil, mkldnncheck.ConvShape, false)
	got := make([]float32, len(right))
	for i, v := range right {
		got[i] = float32(v)
	}
	if err := mkldnncheck.CheckConv(got, x, w); err != nil {
		t.Fatalf("a right convolution: %v", err)
	}
	// A convolution that reads the second image's channel 16 from the first image.
	bad := slices.Clone(x)
	copy(bad[(17+16)*36:(17+17)*36], bad[16*36:17*36])
	wrong := refconv.Conv2d(bad, w, nil, mkldnncheck.ConvShape, false)
	for i, v := range wrong {
		got[i] = float32(v)
	}
	err := mkldnncheck.CheckConv(got, x, w)
	if err == nil || !strings.Contains(err.Error(), "wrong results") || !strings.Contains(err.Error(), "element 256 of [2, 16, 4, 4]") {
		t.Fatalf("a wrong convolution: %v, want wrong results from element 256 (the second image's first)", err)
	}
	if err := mkldnncheck.CheckConv(got[:10], x, w); err == nil || !strings.Contains(err.Error(), "10 values") {
		t.Errorf("a short result: %v", err)
	}
	got[0] = float32(math.NaN())
	if err := mkldnncheck.CheckConv(got, x, w); err == nil || !strings.Contains(err.Error(), "element 0") {
		t.Errorf("NaN: %v", err)
	}
}
