package main

import (
	"github.com/torchspeed/torchspeed/internal/exitcode"

	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// needCores skips a test that needs n usable physical cores.
func needCores(t *testing.T, n int) {
	t.Helper()
	p, err := cpu.Detect(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Usable.Count < n || p.Topology.PhysicalCores < n {
		t.Skipf("needs %d usable physical cores; this machine has %d usable CPUs, %d physical cores", n, p.Usable.Count, p.Topology.PhysicalCores)
	}
}

// serveProcesses lists the running `bench --serve` processes whose arguments hold marker
// (zombies, which have ended, are left out).
func serveProcesses(t *testing.T, marker string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.ReplaceAll(string(raw), "\x00", " ")
		if !strings.Contains(args, "bench --serve") || !strings.Contains(args, marker) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join(d, "stat")); err == nil {
			if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "Z" {
				continue
			}
		}
		out = append(out, filepath.Base(d)+": "+args)
	}
	return out
}

// checkNoInstances fails if a serve process with marker still runs after a short grace (a
// SIGKILL is delivered asynchronously).
func checkNoInstances(t *testing.T, marker string) {
	t.Helper()
	var left []string
	for range 50 {
		if left = serveProcesses(t, marker); len(left) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("instances left running:\n%s", strings.Join(left, "\n"))
}

func TestCLIBenchInstances(t *testing.T) {
	needCores(t, 2)
	model := digits(t)
	out, stderr, code := runBenchCLI(t, "-m", model, "--input-shape", "1x1x8x8", "--instances", "2", "--runs", "20", "--warmup", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	var rep bench.RunReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, out)
	}
	tr := rep.Throughput
	if tr == nil || len(tr.PerStream) != 2 || tr.Streams != 2 {
		t.Fatalf("throughput %+v", tr)
	}
	for i, s := range tr.PerStream {
		if s.Stream != i || s.Runs != 20 || len(s.Samples) != 20 || s.Stats.P50 <= 0 {
			t.Errorf("instance %d: %d runs, %d samples, p50 %v", i, s.Runs, len(s.Samples), s.Stats.P50)
		}
	}
	if tr.Inferences != 40 || tr.PerSecond <= 0 || tr.Batch != 1 || tr.Threads < 1 || tr.Latency.N != 40 {
		t.Errorf("inferences %d, %.1f/s, batch %d, threads %d, pooled n %d", tr.Inferences, tr.PerSecond, tr.Batch, tr.Threads, tr.Latency.N)
	}
	s := rep.Settings
	if s["instances"] != "2" || s["runtime"] != runtimeTorchspeed || s["mode"] != "throughput" || s["threads"] != strconv.Itoa(tr.Threads) {
		t.Errorf("settings %v", s)
	}
	a, errA := cpu.ParseCPUList(s["instance 0 cpus"])
	b, errB := cpu.ParseCPUList(s["instance 1 cpus"])
	if errA != nil || errB != nil || len(a) == 0 || len(b) == 0 || len(a.Intersect(b)) > 0 {
		t.Errorf("instance CPU sets %q and %q: want two disjoint sets", s["instance 0 cpus"], s["instance 1 cpus"])
	}
	if rep.Environment.Threads != tr.Threads || rep.Environment.OpenMPEnv["OMP_NUM_THREADS"] != strconv.Itoa(tr.Threads) {
		t.Errorf("environment threads %d, OpenMP %v", rep.Environment.Threads, rep.Environment.OpenMPEnv)
	}
	for _, want := range []string{"instance 0/2 pid ", "instance 1/2 pid ", "ready;"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// Bad --instances choices fail with exit code 2 before anything starts.
func TestCLIBenchInstancesBadInput(t *testing.T) {
	model := digits(t)
	p, err := cpu.Detect(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tooMany := strconv.Itoa(p.Topology.PhysicalCores + 1)
	base := []string{"-m", model, "--input-shape", "1x1x8x8", "--runs", "3"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"more than the cores", []string{"--instances", tooMany}, "--instances " + tooMany + ": needs at least"},
		{"negative", []string{"--instances", "-1"}, "--instances -1: must be 1 or more"},
		{"with streams", []string{"--instances", "2", "--streams", "2"}, "--instances 2 and --streams 2"},
		{"with vs", []string{"--instances", "2", "--vs", model}, "--instances measures one model"},
		{"two models", []string{"--instances", "2", "-m", model}, "--instances measures one model"},
		{"with a sweep", []string{"--instances", "2", "--sweep-threads", "1"}, "--instances cannot be combined with --sweep"},
		{"with serve", []string{"--instances", "2", "--serve"}, "--instances starts --serve processes itself"},
		{"with duration", []string{"-m", model, "--input-shape", "1x1x8x8", "--instances", "2", "--duration", "1s"}, "give --runs instead of --duration"},
		{"with default runtime", []string{"--instances", "2", "--runtime", "default"}, "--instances pins each instance"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{}, base...), c.args...)
			if c.name == "with duration" {
				args = c.args
			}
			_, stderr, code := runBenchCLI(t, args...)
			if code != exitcode.Usage || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d (want %d), stderr lacks %q:\n%s", code, exitcode.Usage, c.want, stderr)
			}
			if strings.Contains(stderr, "pid ") {
				t.Errorf("an instance was started:\n%s", stderr)
			}
		})
	}
}

// An instance that fails after the start (here at its first inference, on an input the model
// rejects) fails the run, and no instance is left running.
func TestCLIBenchInstancesChildFails(t *testing.T) {
	needCores(t, 2)
	marker := "--seed 734000" // instance i gets seed 7340001+i
	_, stderr, code := runBenchCLI(t, "-m", digits(t), "--input-shape", "1x3x5", "--instances", "2", "--runs", "5", "--seed", "7340001")
	if code != exitcode.Failure {
		t.Errorf("exit %d, want %d:\n%s", code, exitcode.Failure, stderr)
	}
	for _, want := range []string{"before it was ready", `first inference of "digits.pt" failed`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	checkNoInstances(t, marker)
}

// Stopping the driver stops the instances: SIGINT or SIGTERM kill them and exit 130; a
// driver killed outright takes them along (the kernel's parent-death signal).
func TestCLIBenchInstancesInterrupt(t *testing.T) {
	needCores(t, 2)
	model := digits(t)
	for i, c := range []struct {
		name string
		sig  syscall.Signal
		code int
	}{
		{"SIGINT", syscall.SIGINT, exitcode.Interrupt},
		{"SIGTERM", syscall.SIGTERM, exitcode.Interrupt},
		{"SIGKILL", syscall.SIGKILL, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			seed := strconv.Itoa(7350001 + 10*i)
			marker := "--seed " + seed[:len(seed)-1] // instance j gets seed+j
			// Far more runs than the test waits for.
			cmd := exec.Command(torchspeedBin(t), "bench", "-m", model, "--input-shape", "1x1x8x8", "--instances", "2",
				"--runs", "10000000", "--warmup", "1", "--seed", seed)
			cmd.Env = scrubbedEnv()
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			var log bytes.Buffer
			ready := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					log.WriteString(sc.Text() + "\n")
					if strings.Contains(sc.Text(), "ready;") {
						ready <- true
					}
				}
				close(ready)
			}()
			select {
			case ok := <-ready:
				if !ok {
					cmd.Wait()
					t.Fatalf("the instances did not get ready:\n%s", log.String())
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("the instances did not get ready within 2 minutes")
			}
			if n := len(serveProcesses(t, marker)); n != 2 {
				t.Errorf("%d instances running, want 2", n)
			}
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				for range ready { // drain stderr to its end before Wait
				}
				done <- cmd.Wait()
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("bench did not end within a minute of the signal")
			}
			if got := cmd.ProcessState.ExitCode(); got != c.code {
				t.Errorf("exit %d, want %d", got, c.code)
			}
			checkNoInstances(t, marker)
		})
	}
}
