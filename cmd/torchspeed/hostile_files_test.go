package main

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/torchspeed/torchspeed/internal/exitcode"
)

// umaskCLI starts the built binary under umask 027 (through sh, which execs it: the pid is
// torchspeed's) in dir, with stdout and stderr collected in the returned buffers.
func umaskCLI(t *testing.T, dir string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `umask 027; exec "$0" "$@"`, torchspeedBin(t)}, args...)...)
	cmd.Dir = dir
	cmd.Env = scrubbedEnv()
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errOut, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &errOut
}

// exitOf waits for cmd and returns its exit code (-1 when killed by a signal).
func exitOf(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// snapshot is a folder's entries with their modes and contents, for before/after comparisons.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range listDir(t, dir) {
		st, err := os.Lstat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, n))
		out[n] = st.Mode().String() + " " + string(b)
	}
	return out
}

func sameSnapshot(t *testing.T, a, b map[string]string) {
	t.Helper()
	if len(a) != len(b) {
		t.Errorf("files %v, before %v", keys(b), keys(a))
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s changed or went", k)
		}
	}
}

func keys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// Items 6 to 10: no planted link followed, no output of another run or of the previous run
// replaced by a failing one, no half-written or stale output, one file mode rule, no orphaned
// instance. The cases build on each other in one output folder, as repeated runs would.
func TestHostileFiles(t *testing.T) {
	t.Parallel()
	fx := fixtureDir(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	body := "model:\n  path: " + fx + "/digits.pt\n  inputs:\n    - {name: x, shape: [1, 1, 8, 8]}\noutput:\n  dir: " + out +
		"\nbench:\n  runs: 5\n  stage_runs: 3\noptimize:\n  channels_last: \"false\"\nruntime:\n  threads: 1\n"
	cfg := writeConfig(t, body)
	outputs := []string{"digits.torchspeed.pt", "latency.png", "latency.svg", "report.json", "report.md"}
	const mode = os.FileMode(0o640) // 0666 under umask 027

	t.Run("06 planted links at config init's temp name and output", func(t *testing.T) {
		victim := filepath.Join(dir, "victim")
		if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, "c.yaml")
		for _, l := range []string{conf + ".tmp", conf} {
			if err := os.Symlink(victim, l); err != nil {
				t.Fatal(err)
			}
		}
		_, stderr, code := cli(t, dir, nil, "config", "init", "-m", filepath.Join(fx, "digits.pt"), "-o", conf, "--force", "--input-shape", "1x1x8x8")
		expectExit(t, stderr, code, 0)
		if b, _ := os.ReadFile(victim); string(b) != "keep" {
			t.Errorf("a planted link was followed: the victim holds %q", b)
		}
		if st, err := os.Lstat(conf); err != nil || !st.Mode().IsRegular() {
			t.Errorf("config: %v, %v (want a file in place of the link)", st, err)
		}
	})

	t.Run("07 two optimize runs into one folder without overwrite", func(t *testing.T) {
		a, aErr := umaskCLI(t, dir, "optimize", "-c", cfg, "--quiet")
		b, bErr := umaskCLI(t, dir, "optimize", "-c", cfg, "--quiet")
		codes := []int{exitOf(t, a), exitOf(t, b)}
		stderrs := []string{aErr.String(), bErr.String()}
		if codes[0] == codes[1] || codes[0]+codes[1] != exitcode.Usage {
			t.Fatalf("exits %v, want one 0 and one %d:\n%s\n%s", codes, exitcode.Usage, stderrs[0], stderrs[1])
		}
		loser := stderrs[min(1, codes[1])]
		t.Logf("the second run: %s", strings.TrimSpace(loser))
		if !strings.Contains(loser, "digits.torchspeed.pt") || !strings.Contains(loser, "exists") && !strings.Contains(loser, "appeared while this run worked") {
			t.Errorf("the second run's message:\n%s", loser)
		}
		if got := listDir(t, out); strings.Join(got, " ") != strings.Join(outputs, " ") {
			t.Errorf("files %v, want %v", got, outputs)
		}
	})

	t.Run("09 every file follows the umask", func(t *testing.T) {
		benchOut := filepath.Join(dir, "bench")
		c, errOut := umaskCLI(t, dir, "bench", "-m", filepath.Join(out, "digits.torchspeed.pt"), "--runs", "5", "-o", benchOut, "--quiet")
		code := exitOf(t, c) // before reading errOut, which c writes until it ends
		expectExit(t, errOut.String(), code, 0)
		for _, d := range []string{out, benchOut} {
			names := listDir(t, d)
			if len(names) == 0 {
				t.Errorf("nothing in %s", d)
			}
			for _, n := range names {
				if st, err := os.Stat(filepath.Join(d, n)); err != nil || st.Mode().Perm() != mode {
					t.Errorf("%s: mode %v (%v), want %v", filepath.Join(d, n), st.Mode().Perm(), err, mode)
				}
			}
		}
	})

	t.Run("08 a folder named report.md replaces nothing", func(t *testing.T) {
		md := filepath.Join(out, "report.md")
		keep, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(md)
		if err := os.Mkdir(md, 0o755); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, out)
		_, stderr, code := cli(t, dir, nil, "optimize", "-c", cfg, "--overwrite")
		expectExit(t, stderr, code, exitcode.Usage, "report.md", "is a folder")
		sameSnapshot(t, before, snapshot(t, out))
		os.Remove(md)
		if err := os.WriteFile(md, keep, mode); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("08 SIGKILL in the write phase, the next run cleans up", func(t *testing.T) {
		var stage string
		const tries = 5
		for try := 0; try < tries && stage == ""; try++ {
			c, _ := umaskCLI(t, dir, "optimize", "-c", cfg, "--overwrite", "--quiet")
			stage = killWhenStaging(t, c, out)
			exitOf(t, c)
			if stage == "" {
				t.Logf("run %d ended before it could be killed while staging", try+1)
			}
		}
		if stage == "" {
			t.Fatalf("%d runs ended before they could be killed while staging", tries)
		}
		if _, err := os.Stat(stage); err != nil {
			t.Fatalf("the killed run's staging folder: %v", err)
		}
		// The next run into the folder, even one that fails at once (a wrong input shape: the
		// model refuses it, a usage error),
		// removes dead runs' staging folders, and puts back what the killed run had moved
		// aside.
		bad := writeConfig(t, strings.Replace(body, "[1, 1, 8, 8]", "[1, 3, 8, 8]", 1))
		_, stderr, code := cli(t, dir, nil, "optimize", "-c", bad, "--overwrite", "--quiet")
		expectExit(t, stderr, code, exitcode.Usage, "rejects the configured inputs")
		if got := listDir(t, out); strings.Join(got, " ") != strings.Join(outputs, " ") {
			t.Errorf("files %v, want %v", got, outputs)
		}
		stdout, stderr, code := cli(t, dir, nil, "run", "-m", filepath.Join(out, "digits.torchspeed.pt"))
		expectExit(t, stderr, code, 0)
		if !strings.Contains(stdout, "1 output(s)") {
			t.Errorf("the artifact after the kill does not run:\n%s", stdout)
		}
	})

	t.Run("08 a failing validation keeps the previous artifact and reports", func(t *testing.T) {
		before := snapshot(t, out)
		// INT8, required, held to a cosine it cannot reach, with one layer of fallback, from 2
		// samples.
		failing := writeConfig(t, body+"quantize:\n  mode: static\n  force: true\n  observer: minmax\n  max_fallback_layers: 1\ncalibration:\n  path: "+fx+
			"/digits_calib.npy\n  limit: 2\nvalidation:\n  min_cosine: 0.9999999\n")
		_, stderr, code := cli(t, dir, nil, "optimize", "-c", failing, "--overwrite", "--quiet")
		expectExit(t, stderr, code, 3, "validation")
		after := snapshot(t, out)
		for _, n := range outputs {
			if after[n] != before[n] {
				t.Errorf("%s changed by the failing run", n)
			}
		}
		for _, n := range []string{"report.failed.json", "report.failed.md"} {
			if _, ok := after[n]; !ok {
				t.Errorf("no %s: %v", n, keys(after))
			}
		}
		md := after["report.failed.md"]
		t.Run("11 two calibration samples are warned about", func(t *testing.T) {
			if !strings.Contains(md, "holds 2 samples, fewer than 8") {
				t.Errorf("no warning about 2 samples in report.failed.md")
			}
		})
		t.Run("13 the fallback advice names a key that exists", func(t *testing.T) {
			// The config above set quantize.max_fallback_layers, so the key exists.
			if !strings.Contains(md, "raise quantize.max_fallback_layers") || strings.Contains(md, "max_fp32_layers") {
				t.Errorf("report.failed.md does not advise quantize.max_fallback_layers")
			}
		})
	})

	t.Run("08 a failed run leaves no folder it created", func(t *testing.T) {
		bad := writeConfig(t, strings.NewReplacer("[1, 1, 8, 8]", "[1, 3, 8, 8]", "dir: "+out, "dir: "+filepath.Join(dir, "new", "sub")).Replace(body))
		_, stderr, code := cli(t, dir, nil, "optimize", "-c", bad, "--quiet")
		expectExit(t, stderr, code, exitcode.Usage, "rejects the configured inputs")
		if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", filepath.Join(dir, "new"), err)
		}
	})

	t.Run("10 SIGKILL of launch ends its instances", func(t *testing.T) {
		pids := t.TempDir()
		c := exec.Command(torchspeedBin(t), "launch", "--instances", "2", "--", "/bin/sh", "-c", `echo $$ > "$0/$TORCHSPEED_INSTANCE.tmp" && mv "$0/$TORCHSPEED_INSTANCE.tmp" "$0/$TORCHSPEED_INSTANCE"; exec sleep 600`, pids)
		c.Env = scrubbedEnv()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		var ids []int
		for deadline := time.Now().Add(60 * time.Second); len(ids) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ids = ids[:0]
			for _, n := range []string{"0", "1"} {
				if b, err := os.ReadFile(filepath.Join(pids, n)); err == nil {
					if id, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
						ids = append(ids, id)
					}
				}
			}
		}
		c.Process.Kill()
		c.Wait()
		if len(ids) < 2 {
			t.Fatalf("the instances did not start: pids %v", ids)
		}
		for _, id := range ids {
			for deadline := time.Now().Add(10 * time.Second); alive(id); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					syscall.Kill(id, syscall.SIGKILL)
					t.Errorf("instance pid %d outlived its launcher", id)
					break
				}
			}
		}
	})
}

// killWhenStaging SIGKILLs c as soon as a staging folder appears in out (its write phase) and
// returns that folder, or "" when c ended first.
func killWhenStaging(t *testing.T, c *exec.Cmd, out string) string {
	t.Helper()
	fail := func(format string, args ...any) {
		c.Process.Kill() // not left running past the test
		t.Fatalf(format, args...)
	}
	// inotify queues the folder's creation the moment it happens, however late this goroutine
	// gets a CPU; polling the folder every 200 us missed the write phase on a busy machine.
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		fail("inotify: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, out, unix.IN_CREATE); err != nil {
		fail("inotify on %s: %v", out, err)
	}
	prefix := ".torchspeed-staging-" + strconv.Itoa(c.Process.Pid) + "-"
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for alive(c.Process.Pid) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, 20); err != nil && err != unix.EINTR {
			fail("poll: %v", err)
		} else if n <= 0 {
			continue
		}
		n, err := unix.Read(fd, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		} else if err != nil {
			fail("inotify read: %v", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if strings.HasPrefix(name, prefix) {
				c.Process.Kill()
				return filepath.Join(out, name)
			}
		}
	}
	return ""
}

// alive: pid runs (a zombie left for init to reap counts as ended).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}
