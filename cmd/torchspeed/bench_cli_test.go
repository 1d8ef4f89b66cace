package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// scrubbedEnv is this process's environment without the variables that change how
// libtorch's threads run or carry torchspeed's settings (runenv.ScrubEnv).
func scrubbedEnv() []string { return runenv.ScrubEnv(os.Environ()) }

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
			var rep bench.RunReport
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

// startBenchServers starts `torchspeed bench --serve` processes that take turns, one per
// argument list, each with its environment.
func startBenchServers(tb testing.TB, envs [][]string, args ...[]string) *benchrun.Servers {
	tb.Helper()
	var specs []benchrun.ServerSpec
	for i, a := range args {
		specs = append(specs, benchrun.ServerSpec{Name: fmt.Sprintf("server %d", i), Argv: append([]string{torchspeedBin(tb), "bench", "--serve"}, a...), Env: envs[i]})
	}
	s, err := benchrun.StartServers(context.Background(), specs, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestCLIBenchServe(t *testing.T) {
	s := startBenchServers(t, [][]string{scrubbedEnv()}, []string{"-m", digits(t), "--input-shape", "1x1x8x8", "--warmup", "2", "--threads", "1"})
	ctx := context.Background()
	if st := s.Ready[0]; st["runtime"] != runtimeTorchspeed || st["threads"] != "1" || st["input-shape"] != "1x1x8x8" {
		t.Errorf("ready settings %v", st)
	}
	for _, k := range []int{5, 1} {
		lat, err := s.Turn(ctx, 0, 0, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(lat) != k {
			t.Errorf("run %d gave %d latencies", k, len(lat))
		}
		for _, d := range lat {
			if d <= 0 || d > time.Minute {
				t.Errorf("latency %v", d)
			}
		}
	}
	for _, bad := range []string{"run 0", "run x", "go"} {
		line, err := s.Ask(ctx, 0, bad)
		if err != nil || !strings.HasPrefix(line, "error ") || !strings.Contains(line, "run K") {
			t.Errorf("%q answered %q, %v", bad, line, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("quit: %v", err)
	}
}
