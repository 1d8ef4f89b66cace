package runenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// helperEnv makes the test binary act as a program that calls EnsureEnv (see
// TestMain), so the re-exec really happens in a separate process.
const helperEnv = "RUNENV_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(ensureEnvHelper(mode))
	}
	os.Exit(m.Run())
}

type helperReport struct {
	Reexeced bool
	Err      string
	Env      map[string]string
	Allowed  string
}

func ensureEnvHelper(mode string) int {
	var s Settings
	if err := json.Unmarshal([]byte(os.Getenv("RUNENV_TEST_SETTINGS")), &s); err != nil {
		fmt.Println("bad settings:", err)
		return 2
	}
	if mode == "override" && os.Getenv(ReexecMarker) != "" {
		// Something in the program undoes a setting after the re-exec.
		os.Setenv("OMP_NUM_THREADS", "99")
	}
	re, err := EnsureEnv(s)
	r := helperReport{Reexeced: re, Env: map[string]string{}}
	if err != nil {
		r.Err = err.Error()
	}
	for _, k := range []string{"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "LD_PRELOAD", ReexecMarker} {
		r.Env[k] = os.Getenv(k)
	}
	r.Allowed = allowedList(os.Getpid())
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return 0
}

func allowedList(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func liveSettings(t *testing.T) Settings {
	t.Helper()
	p, err := cpu.Detect(cpu.Options{Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := Compute(p, Options{CPUs: fmt.Sprint(p.Usable.CPUs[len(p.Usable.CPUs)-1]), Allocator: "default"})
	if err != nil {
		t.Fatal(err)
	}
	return ss[0]
}

func originalAffinity(t *testing.T) cpu.CPUSet {
	t.Helper()
	set, err := cpu.ParseCPUList(allowedList(os.Getpid()))
	if err != nil || len(set) == 0 {
		t.Fatalf("read own affinity: %v", err)
	}
	return set
}

func runHelper(t *testing.T, mode string, s Settings) helperReport {
	t.Helper()
	b, _ := json.Marshal(s)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "RUNENV_TEST_SETTINGS="+string(b), "OMP_NUM_THREADS=64")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var r helperReport
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &r); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	return r
}

func TestEnsureEnvReexecs(t *testing.T) {
	s := liveSettings(t)
	s.WaitPolicy = "PASSIVE"
	s.Vars = append(s.Vars, Var{"OMP_WAIT_POLICY", "PASSIVE"})
	if p, err := FindAllocator("jemalloc", nil); err == nil {
		s.Allocator, s.AllocatorPath = "jemalloc", p
	}
	r := runHelper(t, "plain", s)
	if r.Err != "" || !r.Reexeced || r.Env[ReexecMarker] != "1" {
		t.Fatalf("helper did not re-exec cleanly: %+v", r)
	}
	if r.Env["OMP_NUM_THREADS"] != "1" || r.Env["OMP_WAIT_POLICY"] != "PASSIVE" {
		t.Errorf("after re-exec env %v", r.Env)
	}
	if s.AllocatorPath != "" && !strings.HasPrefix(r.Env["LD_PRELOAD"], s.AllocatorPath) {
		t.Errorf("LD_PRELOAD %q lacks %s", r.Env["LD_PRELOAD"], s.AllocatorPath)
	}
	if r.Allowed != s.CPUs.String() {
		t.Errorf("re-executed process may run on %s, want %s", r.Allowed, s.CPUs)
	}
}

func TestEnsureEnvStopsLoop(t *testing.T) {
	r := runHelper(t, "override", liveSettings(t))
	if !r.Reexeced || !strings.Contains(r.Err, "still") || !strings.Contains(r.Err, "OMP_NUM_THREADS") {
		t.Errorf("want a loop error naming OMP_NUM_THREADS, got %+v", r)
	}
}

func TestEnsureEnvNothingToDo(t *testing.T) {
	s := liveSettings(t)
	s.Vars = nil
	// The settings' only demand is the affinity, which is applied in place.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	restore := originalAffinity(t)
	t.Cleanup(func() { _ = PinProcess(restore) })
	re, err := EnsureEnv(s)
	if err != nil || re {
		t.Fatalf("EnsureEnv = %v, %v; want false, nil", re, err)
	}
	if got := allowedList(os.Getpid()); got != s.CPUs.String() {
		t.Errorf("affinity %s, want %s", got, s.CPUs)
	}
}

func TestApplyInProcess(t *testing.T) {
	s := liveSettings(t)
	all := originalAffinity(t)
	t.Cleanup(func() {
		_ = PinProcess(all)
		for _, v := range s.Vars {
			os.Unsetenv(v.Name)
		}
	})
	applied, warnings, err := ApplyInProcess(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("applied %v, warnings %v", applied, warnings)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			continue
		}
		if !strings.Contains(string(b), "Cpus_allowed_list:\t"+s.CPUs.String()+"\n") {
			t.Errorf("thread %s not pinned to %s", task.Name(), s.CPUs)
		}
	}
	if os.Getenv("OMP_NUM_THREADS") != "1" || os.Getenv("TORCHSPEED_CPUS") != s.CPUs.String() {
		t.Errorf("environment not set")
	}
}

func TestBindThreadMemory(t *testing.T) {
	runtime.LockOSThread()
	// This thread's memory policy changes; let the runtime discard the thread.
	err := BindThreadMemory(0)
	if errors.Is(err, ErrMemBindNotAllowed) {
		t.Skipf("memory binding refused here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	mode, node, err := threadMemBind()
	if err != nil || node != 0 || mode != 2 {
		t.Errorf("after binding: mode %d node %d err %v; want MPOL_BIND(2) node 0", mode, node, err)
	}
	if err := BindThreadMemory(4095); err == nil {
		t.Errorf("binding to node 4095 accepted")
	}
}
