package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// TestCLIProbeLaunch builds the real binary once (launch re-executes itself as the
// trampoline, which the test binary cannot stand in for) and runs the probe and launch
// checks against it.
func TestCLIProbeLaunch(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "torchspeed")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for name, f := range map[string]func(*testing.T, string){
		"launch two instances disjoint": testLaunchTwoInstancesDisjoint,
		"launch print-env json":         testLaunchPrintEnvJSON,
		"launch bad input":              testLaunchBadInput,
		"launch log dir and overrides":  testLaunchLogDir,
		"probe":                         testProbeCommand,
	} {
		t.Run(name, func(t *testing.T) { f(t, bin) })
	}
}

func runBin(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func testLaunchTwoInstancesDisjoint(t *testing.T, bin string) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	out, errOut, code := runBin(t, bin, "launch", "--instances", "2", "--",
		"sh", "-c", `echo "$TORCHSPEED_INSTANCE $(grep Cpus_allowed_list /proc/self/status | cut -f2) $OMP_NUM_THREADS"`)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	t.Logf("stdout:\n%sstderr:\n%s", out, errOut)
	sets := map[string]cpu.CPUSet{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("line %q", line)
		}
		set, err := cpu.ParseCPUList(f[1])
		if err != nil {
			t.Fatal(err)
		}
		if f[2] != "1" && runtime.NumCPU() == 2 {
			t.Errorf("instance %s OMP_NUM_THREADS=%s, want 1 on a 2-CPU machine", f[0], f[2])
		}
		sets[f[0]] = set
	}
	if len(sets) != 2 || len(sets["0"]) == 0 || len(sets["1"]) == 0 {
		t.Fatalf("instances reported %v", sets)
	}
	if both := sets["0"].Intersect(sets["1"]); len(both) > 0 {
		t.Errorf("instances share CPUs %s (%s and %s)", both, sets["0"], sets["1"])
	}
}

func testLaunchPrintEnvJSON(t *testing.T, bin string) {
	out, errOut, code := runBin(t, bin, "launch", "--print-env", "--json", "--latency-mode")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var ss []runenv.Settings
	if err := json.Unmarshal([]byte(out), &ss); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(ss) != 1 || ss[0].Threads < 1 || len(ss[0].CPUs) == 0 || ss[0].OpenMP != "gnu" {
		t.Errorf("settings %+v (want the GNU runtime Debian's libtorch loads)", ss)
	}
}

// TestLaunchBadInput checks each bad input is refused with exit code 2 before any
// instance starts.
func testLaunchBadInput(t *testing.T, bin string) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--instances", "1000"}, "needs at least 1000 physical cores"},
		{[]string{"--cpus", "0-4095"}, "are not available to this process"},
		{[]string{"--numa-node", "63"}, "no such NUMA node"},
		{[]string{"--allocator", "hoard"}, "want jemalloc, tcmalloc or default"},
		{[]string{"--latency-mode", "--throughput-mode"}, "exclude each other"},
		{[]string{"--mode", "latency", "--throughput-mode"}, "exclude each other"},
		{[]string{"--mode", "fastest"}, `--mode "fastest"`},
		{[]string{"--log-dir", "/proc/no/such"}, "--log-dir"},
		{[]string{"--cores-per-instance", "-1"}, "must be 0"},
	}
	for _, tc := range tests {
		args := append(append([]string{"launch"}, tc.args...), "--", "touch", marker)
		_, errOut, code := runBin(t, bin, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%v: the command ran", tc.args)
		}
	}
	_, errOut, code := runBin(t, bin, "launch", "--instances", "1")
	if code != 2 || !strings.Contains(errOut, "no command") {
		t.Errorf("no command: exit %d %q", code, errOut)
	}
}

func testProbeCommand(t *testing.T, bin string) {
	out, errOut, code := runBin(t, bin, "probe", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var p cpu.Probe
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	// libtorch is linked in, so its OpenMP runtime must be found in our own maps.
	if p.Torch == nil || p.Torch.Version == "" || p.Torch.OneDNN == "" || p.OpenMPRuntime() == "" {
		t.Errorf("live probe lacks libtorch or OpenMP: torch %+v openmp %v", p.Torch, p.OpenMP)
	}
	// The oneDNN check ran in a child; where it failed (Debian's libtorch 2.6 here), a warning
	// finding says so.
	if c := p.Torch.OneDNNCheck; c == "" {
		t.Error("live probe did not run the oneDNN check")
	} else if c != cpu.OneDNNPassed && !slices.ContainsFunc(p.Findings, func(f cpu.Finding) bool { return f.Code == "onednn-broken" && f.Message == c }) {
		t.Errorf("oneDNN check %q without an onednn-broken finding: %+v", c, p.Findings)
	}
	// Where libtorch calls OpenBLAS (Debian's build), the probe reports it.
	if b, err := torch.BLAS(); err == nil && b.Library != "" && (p.Torch == nil || p.Torch.BLAS == nil || p.Torch.BLAS.Config != b.Config) {
		t.Errorf("probe does not report the BLAS %+v: %+v", b, p.Torch)
	}
	// The interruptions were measured on the usable CPUs, by default for 500 ms.
	if in := p.Interruptions; in == nil || len(in.CPUs) != p.Usable.Count || in.Duration < 500*time.Millisecond || in.Threshold <= 0 || len(in.Floors) == 0 {
		t.Errorf("live probe's interruptions: %+v (usable %+v)", in, p.Usable)
	}
	out, errOut, code = runBin(t, bin, "probe", "--interrupts", "0", "--json")
	if code != 0 || strings.Contains(out, `"interruptions"`) {
		t.Errorf("--interrupts 0: exit %d, %s", code, errOut)
	}
	for _, args := range [][]string{{"--interrupts", "5ms"}, {"--interrupts", "2m"}, {"--interrupts", "100ms", "--root", "."}} {
		_, errOut, code = runBin(t, bin, append([]string{"probe"}, args...)...)
		if code != 2 || !strings.Contains(errOut, "interrupts") {
			t.Errorf("probe %v: exit %d, want 2 and a message naming --interrupts: %s", args, code, errOut)
		}
	}
	root := filepath.Join("..", "..", "pkg", "cpu", "testdata", "xeon-2s")
	out, errOut, code = runBin(t, bin, "probe", "--root", root)
	if code != 0 || !strings.Contains(out, "NUMA node 1 CPUs 10-19,30-39") || !strings.Contains(out, "cross-numa") && !strings.Contains(out, "NUMA nodes 0,1") {
		t.Errorf("fixture probe exit %d:\n%s\n%s", code, out, errOut)
	}
	_, _, code = runBin(t, bin, "probe", "--root", filepath.Join(t.TempDir(), "none"))
	if code != 2 {
		t.Errorf("bad root: exit %d, want 2", code)
	}
}

// --log-dir gives each instance its own log file; a variable the user set that launch
// changes is named on stderr, even with --quiet.
func testLaunchLogDir(t *testing.T, bin string) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	dir := filepath.Join(t.TempDir(), "logs")
	cmd := exec.Command(bin, "launch", "--quiet", "--mode", "latency", "--instances", "2", "--log-dir", dir, "--",
		"sh", "-c", `echo "instance $TORCHSPEED_INSTANCE threads $OMP_NUM_THREADS"; echo oops >&2`)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=7")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, e.String())
	}
	if o.Len() != 0 {
		t.Errorf("instances wrote to launch's stdout: %q", o.String())
	}
	if !strings.Contains(e.String(), "OMP_NUM_THREADS=7 from your environment is overridden") {
		t.Errorf("no override note on stderr: %q", e.String())
	}
	for i := 0; i < 2; i++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("instance-%d.log", i)))
		want := fmt.Sprintf("instance %d threads 1\noops\n", i)
		if err != nil || string(b) != want {
			t.Errorf("instance %d log: %q (%v), want %q", i, b, err, want)
		}
	}
}
