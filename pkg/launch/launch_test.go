package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// trampolineEnv makes the test binary act as the trampoline, as torchspeed's hidden
// "launch --internal-exec" does, so the tests start real processes through it.
const trampolineEnv = "LAUNCH_TEST_TRAMPOLINE"

// launcherEnv makes the test binary a launcher of two instances (through the trampoline when
// set to "trampoline"), for the tests that kill a launcher.
const launcherEnv = "LAUNCH_TEST_LAUNCHER"

func TestMain(m *testing.M) {
	if how := os.Getenv(launcherEnv); how != "" {
		os.Unsetenv(launcherEnv)
		p, err := cpu.Detect(cpu.Options{Env: []string{}})
		if err == nil {
			var ss []runenv.Settings
			if ss, err = runenv.Compute(p, runenv.Options{Instances: 2}); err == nil {
				cfg := testConfig(ss, "sh", "-c", `echo $$ > "$OUT/$TORCHSPEED_INSTANCE.tmp" && mv "$OUT/$TORCHSPEED_INSTANCE.tmp" "$OUT/$TORCHSPEED_INSTANCE"; exec sleep 600`)
				if how != "trampoline" {
					cfg.Trampoline = nil
				}
				_, err = Run(context.Background(), cfg)
			}
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if os.Getenv(trampolineEnv) == "1" {
		spec, command, err := ParseTrampolineArgs(os.Args[1:])
		if err == nil {
			err = Exec(spec, command, os.Stderr)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
	os.Exit(m.Run())
}

func liveSettings(t *testing.T, o runenv.Options) []runenv.Settings {
	t.Helper()
	p, err := cpu.Detect(cpu.Options{Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if o.Instances > p.Usable.Cores {
		t.Skipf("needs %d usable cores, this machine has %d", o.Instances, p.Usable.Cores)
	}
	ss, err := runenv.Compute(p, o)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// testConfig uses the test binary as the trampoline; direct() switches to starting
// children from a pinned thread.
func testConfig(ss []runenv.Settings, command ...string) Config {
	return Config{
		Settings:   ss,
		Command:    command,
		Trampoline: []string{os.Args[0]},
		Env:        append(os.Environ(), trampolineEnv+"=1", "OMP_NUM_THREADS=64", "KEEP_ME=yes"),
		Stdout:     os.Stderr,
		Stderr:     os.Stderr,
	}
}

// TestTwoInstances runs two instances of a shell that reports its own CPU affinity and
// environment, and checks each got its own CPUs and index.
func TestTwoInstances(t *testing.T) {
	for _, trampoline := range []bool{false, true} {
		t.Run(fmt.Sprintf("trampoline=%v", trampoline), func(t *testing.T) { testTwoInstances(t, trampoline) })
	}
}

func testTwoInstances(t *testing.T, trampoline bool) {
	ss := liveSettings(t, runenv.Options{Instances: 2, Mode: runenv.ModeLatency})
	dir := t.TempDir()
	script := `grep Cpus_allowed_list /proc/self/status > "$OUT/$TORCHSPEED_INSTANCE";` +
		`echo "$TORCHSPEED_INSTANCE $TORCHSPEED_INSTANCES $OMP_NUM_THREADS $OMP_PLACES $OMP_WAIT_POLICY $KEEP_ME" >> "$OUT/$TORCHSPEED_INSTANCE"`
	cfg := testConfig(ss, "sh", "-c", script)
	cfg.Env = append(cfg.Env, "OUT="+dir)
	if !trampoline {
		cfg.Trampoline = nil
	}
	var log strings.Builder
	cfg.Log = &log
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("launcher log:\n%s", log.String())
	if res.ExitCode != 0 || len(res.Instances) != 2 {
		t.Fatalf("result %+v", res)
	}
	var seen cpu.CPUSet
	for i, s := range ss {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			t.Fatalf("instance %d wrote nothing: %v", i, err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("instance %d: %q", i, lines)
		if len(lines) != 2 {
			t.Fatalf("instance %d output %q", i, b)
		}
		allowed, err := cpu.ParseCPUList(strings.TrimSpace(strings.TrimPrefix(lines[0], "Cpus_allowed_list:")))
		if err != nil {
			t.Fatal(err)
		}
		if !allowed.Equal(s.CPUs) {
			t.Errorf("instance %d runs on CPUs %s, want %s", i, allowed, s.CPUs)
		}
		if len(seen.Intersect(allowed)) > 0 {
			t.Errorf("instance %d CPUs %s overlap another instance's %s", i, allowed, seen)
		}
		seen = seen.Union(allowed)
		places := ""
		for _, v := range s.Vars {
			if v.Name == "OMP_PLACES" {
				places = v.Value
			}
		}
		want := fmt.Sprintf("%d 2 %d %s %s yes", i, s.Threads, places, s.WaitPolicy)
		if strings.TrimSpace(lines[1]) != strings.TrimSpace(want) {
			t.Errorf("instance %d env %q, want %q", i, lines[1], want)
		}
		if res.Instances[i].PID <= 0 || !res.Instances[i].CPUs.Equal(s.CPUs) {
			t.Errorf("instance result %+v", res.Instances[i])
		}
	}
}

func TestWorstExitCode(t *testing.T) {
	ss := liveSettings(t, runenv.Options{Instances: 2})
	res, err := Run(context.Background(), testConfig(ss, "sh", "-c", `exit $((TORCHSPEED_INSTANCE + 3))`))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 4 || res.Instances[0].ExitCode != 3 || res.Instances[1].ExitCode != 4 {
		t.Errorf("exit codes %+v, want 3 and 4, worst 4", res)
	}
}

// TestForwardsSignals sends SIGTERM to this process while two instances run; both
// must get it (their trap exits 7), and the launcher must survive it.
func TestForwardsSignals(t *testing.T) {
	ss := liveSettings(t, runenv.Options{Instances: 2})
	dir := t.TempDir()
	cfg := testConfig(ss, "sh", "-c", `trap 'exit 7' TERM; touch "$OUT/ready.$TORCHSPEED_INSTANCE"; while :; do sleep 0.05; done`)
	cfg.Env = append(cfg.Env, "OUT="+dir)
	cfg.Trampoline = nil
	type out struct {
		res *Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		r, err := Run(context.Background(), cfg)
		ch <- out{r, err}
	}()
	waitFiles(t, filepath.Join(dir, "ready.0"), filepath.Join(dir, "ready.1"))
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatal(o.err)
		}
		for _, r := range o.res.Instances {
			if r.ExitCode != 7 {
				t.Errorf("instance %d exit %d, want 7 from its TERM trap", r.Instance, r.ExitCode)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("instances did not stop after SIGTERM")
	}
}

func TestCancelKills(t *testing.T) {
	ss := liveSettings(t, runenv.Options{})
	dir := t.TempDir()
	cfg := testConfig(ss, "sh", "-c", `touch "$OUT/ready.0"; exec sleep 30`)
	cfg.Env = append(cfg.Env, "OUT="+dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan *Result, 1)
	go func() {
		r, err := Run(ctx, cfg)
		if err != nil {
			t.Error(err)
		}
		ch <- r
	}()
	waitFiles(t, filepath.Join(dir, "ready.0"))
	cancel()
	select {
	case r := <-ch:
		if r == nil || r.ExitCode != 128+int(syscall.SIGTERM) || r.Instances[0].Signal == "" {
			t.Errorf("result %+v, want killed by SIGTERM (143)", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cancel did not stop the instance")
	}
}

func TestRunErrors(t *testing.T) {
	ss := liveSettings(t, runenv.Options{})
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no command", testConfig(ss), "no command"},
		{"unknown command", testConfig(ss, "no-such-command-torchspeed"), `command "no-such-command-torchspeed"`},
		{"no settings", testConfig(nil, "true"), "no instance settings"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || res != nil {
				t.Errorf("Run = %+v, %v; want error %q", res, err, tc.want)
			}
		})
	}
}

func TestTrampolineArgs(t *testing.T) {
	spec := Spec{CPUs: cpu.MustParseCPUList("0-3,8"), MemNode: 1, Parent: 42}
	args := TrampolineArgs(spec, []string{"python", "--", "x"})
	got, cmd, err := ParseTrampolineArgs(args)
	if err != nil || !got.CPUs.Equal(spec.CPUs) || got.MemNode != 1 || got.Parent != 42 || !slices.Equal(cmd, []string{"python", "--", "x"}) {
		t.Errorf("round trip: %+v %q %v", got, cmd, err)
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{FlagCPUs, "0-3"}, "no -- before"},
		{[]string{FlagCPUs, "x", "--", "sh"}, "--internal-cpus"},
		{[]string{FlagMemBind}, "needs a value"},
		{[]string{"--"}, "no command"},
		{[]string{"--bogus", "--", "sh"}, "unexpected argument"},
		{[]string{FlagParent, "0", "--", "sh"}, "not a process id"},
	}
	for _, b := range bad {
		if _, _, err := ParseTrampolineArgs(b.args); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("ParseTrampolineArgs(%q) err = %v, want %q", b.args, err, b.want)
		}
	}
}

func waitFiles(t *testing.T, paths ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range paths {
		for {
			if _, err := os.Stat(p); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never appeared", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// A launcher killed with SIGKILL cannot forward anything: its instances end by their
// parent-death signal instead of running on, orphaned, on their pinned CPUs.
func TestHostile10KilledLauncherEndsInstances(t *testing.T) {
	liveSettings(t, runenv.Options{Instances: 2}) // skips without two cores
	for _, how := range []string{"pinned-thread", "trampoline"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			c := exec.Command(os.Args[0], "-test.run=^$")
			c.Env = append(os.Environ(), launcherEnv+"="+how, "OUT="+dir)
			c.Stderr = os.Stderr
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			waitFiles(t, filepath.Join(dir, "0"), filepath.Join(dir, "1"))
			c.Process.Kill()
			c.Wait()
			for _, n := range []string{"0", "1"} {
				b, _ := os.ReadFile(filepath.Join(dir, n))
				pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil {
					t.Fatalf("instance %s pid %q: %v", n, b, err)
				}
				deadline := time.Now().Add(10 * time.Second)
				for running(pid) {
					if time.Now().After(deadline) {
						syscall.Kill(pid, syscall.SIGKILL)
						t.Errorf("instance %s (pid %d) outlived its launcher", n, pid)
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
}

// running: pid exists and is not a zombie waiting for init to reap it.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}
