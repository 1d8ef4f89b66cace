package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
)

// scrubbedEnv is this process's environment without the variables that
// change how libtorch's threads run (OpenMP, MKL, a preloaded allocator) or
// that carry torchspeed's settings into a re-executed process: a child
// started with it runs with libtorch's defaults unless it applies settings.
func scrubbedEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "LD_PRELOAD" || slices.ContainsFunc([]string{"OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "GOTO_", "TORCHSPEED_"},
			func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// runBenchCLI runs the built CLI's bench with a scrubbed environment (see cli) and returns
// stdout, stderr and the exit code.
func runBenchCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return cli(t, "", nil, append([]string{"bench"}, args...)...)
}

// TestCLIBenchRuntimeSettings checks that bench applies torchspeed's runtime
// settings (in the process that measures, after its re-exec) and records
// them, and that --runtime default leaves the environment alone.
func TestCLIBenchRuntimeSettings(t *testing.T) {
	model := digits(t)
	base := []string{"-m", model, "--input-shape", "1x1x8x8", "--runs", "10", "--warmup", "1", "--json"}
	for _, c := range []struct {
		name    string
		args    []string
		applied bool
	}{
		{"torchspeed", nil, true},
		{"torchspeed one thread", []string{"--threads", "1", "--mode", "latency"}, true},
		{"default", []string{"--runtime", "default"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, code := runBenchCLI(t, append(base, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			var rep bench.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("stdout is not the JSON report: %v\n%s", err, out)
			}
			s, env := rep.Settings, rep.Environment
			if s["threads"] != strconv.Itoa(env.Threads) {
				t.Errorf("settings threads %q, environment threads %d", s["threads"], env.Threads)
			}
			if !c.applied {
				if s["runtime"] != runtimeDefault || len(env.OpenMPEnv) != 0 || s["env OMP_NUM_THREADS"] != "" {
					t.Errorf("default runtime changed something: settings %v, OpenMP env %v", s, env.OpenMPEnv)
				}
				return
			}
			if s["runtime"] != runtimeTorchspeed || s["cpus"] == "" || s["openmp"] == "" || s["mode"] == "" || s["allocator"] == "" {
				t.Errorf("settings lack the runtime: %v", s)
			}
			if !strings.HasPrefix(s["applied 1"], "affinity ") {
				t.Errorf("applied actions: %v", s)
			}
			// The measuring process has the variables it reports: they were
			// set before its OpenMP runtime started, by the re-exec.
			// OMP_NUM_THREADS sizes the pool; the count in use may be lower when bench
			// measured fewer threads faster.
			threads, _ := strconv.Atoi(s["threads"])
			if want := s["env OMP_NUM_THREADS"]; want == "" || env.OpenMPEnv["OMP_NUM_THREADS"] != want || threads < 1 || strconv.Itoa(max(threads, atoiOr(want))) != want {
				t.Errorf("OMP_NUM_THREADS: settings %q, process %q, threads %q", want, env.OpenMPEnv["OMP_NUM_THREADS"], s["threads"])
			}
			for k, v := range s {
				if name, ok := strings.CutPrefix(k, "env "); ok && (strings.HasPrefix(name, "OMP_") || strings.HasPrefix(name, "GOMP_")) && env.OpenMPEnv[name] != v {
					t.Errorf("%s: settings %q, process %q", name, v, env.OpenMPEnv[name])
				}
			}
			if c.args != nil && s["threads"] != "1" {
				t.Errorf("--threads 1 gave %s threads", s["threads"])
			}
		})
	}
}

// Bad runtime choices fail before anything is loaded, with exit code 2.
func TestCLIBenchRuntimeBadInput(t *testing.T) {
	model := digits(t)
	base := []string{"-m", model, "--input-shape", "1x1x8x8", "--runs", "3"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown runtime", []string{"--runtime", "fast"}, `--runtime "fast"`},
		{"unknown mode", []string{"--mode", "fastest"}, `bench: --mode (runtime.mode): fastest is not allowed`},
		{"missing NUMA node", []string{"--numa-node", "63"}, "63"},
		{"bad NUMA node", []string{"--numa-node", "-2"}, "bench: --numa-node (runtime.numa_node): -2 is not allowed"},
		{"unknown allocator", []string{"--allocator", "hoard"}, "hoard"},
		{"settings with default runtime", []string{"--runtime", "default", "--allocator", "jemalloc"}, "--allocator"},
		{"serve two models", []string{"--serve", "--vs", model}, "--serve"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runBenchCLI(t, append(base, c.args...)...)
			if code != exitcode.Usage || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d (want %d), stderr lacks %q:\n%s", code, exitcode.Usage, c.want, stderr)
			}
		})
	}
}

// benchServer is a long-lived `torchspeed bench --serve` process.
type benchServer struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	out      *bufio.Reader
	stderr   bytes.Buffer
	settings map[string]string
}

func startBenchServer(tb testing.TB, env []string, args ...string) *benchServer {
	tb.Helper()
	s := &benchServer{cmd: exec.Command(torchspeedBin(tb), append([]string{"bench", "--serve"}, args...)...)}
	s.cmd.Env = env
	s.cmd.Stderr = &s.stderr
	var err error
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	s.out = bufio.NewReaderSize(stdout, 1<<20)
	if err := s.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.close() })
	line, err := s.out.ReadString('\n')
	raw, ok := strings.CutPrefix(line, "ready ")
	if err != nil || !ok {
		tb.Fatalf("bench --serve %v did not start: %q %v\n%s", args, line, err, s.stderr.String())
	}
	if err := json.Unmarshal([]byte(raw), &s.settings); err != nil {
		tb.Fatalf("bench --serve: settings %q: %v", raw, err)
	}
	return s
}

// round asks for k timed inferences and returns their latencies.
func (s *benchServer) round(k int) ([]time.Duration, error) {
	if _, err := fmt.Fprintf(s.in, "run %d\n", k); err != nil {
		return nil, err
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("%v\n%s", err, s.stderr.String())
	}
	return benchrun.ParseAnswer(strings.TrimSpace(line), k)
}

// pause stops the whole process (every thread) with SIGSTOP; resume continues it. A
// paused process cannot run anything, not even the OpenMP or BLAS workers that keep
// spinning for a while after an inference.
func (s *benchServer) pause() error  { return s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *benchServer) resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

func (s *benchServer) close() error {
	if s.cmd.ProcessState != nil {
		return nil
	}
	s.resume()
	fmt.Fprintln(s.in, "quit")
	s.in.Close()
	return s.cmd.Wait()
}

func TestCLIBenchServe(t *testing.T) {
	s := startBenchServer(t, scrubbedEnv(), "-m", digits(t), "--input-shape", "1x1x8x8", "--warmup", "2", "--threads", "1")
	if s.settings["runtime"] != runtimeTorchspeed || s.settings["threads"] != "1" || s.settings["input-shape"] != "1x1x8x8" {
		t.Errorf("ready settings %v", s.settings)
	}
	for _, k := range []int{5, 1} {
		lat, err := s.round(k)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range lat {
			if d <= 0 || d > time.Minute {
				t.Errorf("latency %v", d)
			}
		}
	}
	for _, bad := range []string{"run 0", "run x", "go"} {
		fmt.Fprintln(s.in, bad)
		line, err := s.out.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "error ") || !strings.Contains(line, "run K") {
			t.Errorf("%q answered %q, %v", bad, line, err)
		}
	}
	if err := s.close(); err != nil {
		t.Errorf("quit: %v\n%s", err, s.stderr.String())
	}
}
