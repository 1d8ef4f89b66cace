package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// emulated runs the built CLI on an emulated CPU without AVX-512: QEMU's user-mode emulation
// of a Haswell (AVX2 and FMA), where any AVX-512 instruction is an illegal instruction, as on an
// AVX2 server of a mixed fleet. torchspeed re-executes itself (runtime settings) and starts
// workers: those must be emulated too, or they would run on the real CPU. A binfmt_misc entry
// for a file extension of this test's own does that: the kernel hands every exec of the copied
// binary to QEMU, and QEMU_CPU in the environment picks the CPU model for each. Without
// qemu-x86_64 (Debian's qemu-user, which make setup installs) or binfmt_misc (root) the test
// is skipped, saying which.
type emulated struct {
	bin string
	env []string
}

func newEmulated(t *testing.T) *emulated {
	t.Helper()
	if runtime.GOARCH != "amd64" || runtime.GOOS != "linux" {
		t.Skip("the AVX2 emulation runs x86-64 Linux binaries")
	}
	qemu, err := exec.LookPath("qemu-x86_64")
	if err != nil {
		t.Skip("qemu-x86_64 not found: install Debian's qemu-user (make setup does) to run the CLI on an emulated CPU without AVX-512")
	}
	const dir = "/proc/sys/fs/binfmt_misc"
	if _, err := os.Stat(filepath.Join(dir, "register")); err != nil {
		if out, err := exec.Command("mount", "-t", "binfmt_misc", "binfmt_misc", dir).CombinedOutput(); err != nil {
			t.Skipf("binfmt_misc is not mounted and cannot be (%v: %s): the emulated CPU needs it to follow torchspeed's re-exec; run as root", err, bytes.TrimSpace(out))
		}
	}
	name := fmt.Sprintf("torchspeedisa%d", os.Getpid())
	if err := os.WriteFile(filepath.Join(dir, "register"), []byte(":"+name+":E::"+name+"::"+qemu+":"), 0); err != nil {
		t.Skipf("register a binfmt_misc entry for QEMU: %v (needs root)", err)
	}
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(dir, name), []byte("-1"), 0) })
	src, err := os.ReadFile(torchspeedBin(t))
	if err != nil {
		t.Fatal(err)
	}
	// QEMU reads QEMU_* variables of its own (QEMU_LOG set empty makes it print its log items
	// and exit 1): only the CPU model goes through.
	var env []string
	for _, kv := range scrubbedEnv() {
		if !strings.HasPrefix(kv, "QEMU_") {
			env = append(env, kv)
		}
	}
	e := &emulated{bin: filepath.Join(t.TempDir(), "torchspeed."+name), env: append(env, "QEMU_CPU=Haswell")}
	if err := os.WriteFile(e.bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	// The emulation is in force: the CPU the binary sees has AVX2 and no AVX-512.
	out, stderr, code := e.run(t, nil, "probe", "--json", "--no-torch")
	if code != 0 {
		t.Fatalf("probe on the emulated CPU: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	var p cpu.Probe
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("probe --json: %v\n%s", err, out)
	}
	if !p.ISA.AVX2 || p.ISA.AVX512F || p.ISA.AVX512VNNI {
		t.Fatalf("the emulated CPU has %v: want AVX2 without AVX-512", p.ISA.Features())
	}
	return e
}

// run runs the emulated CLI with extra environment variables; QEMU's notes about host features
// it does not model are dropped from stderr.
func (e *emulated) run(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(append([]string{}, e.env...), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ee.ProcessState != nil && ee.ProcessState.String() == "signal: illegal instruction" {
			t.Fatalf("%v: illegal instruction on the emulated AVX2 CPU\n%s", args, errOut.String())
		}
	} else if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(errOut.String(), "\n") {
		if !strings.Contains(l, "TCG doesn't support requested feature") {
			keep = append(keep, l)
		}
	}
	stderr := strings.Join(keep, "\n")
	if strings.Contains(stderr, "SIGILL") || code == 132 || code == 4 {
		t.Fatalf("%v: illegal instruction on the emulated AVX2 CPU (exit %d)\n%s", args, code, stderr)
	}
	return out.String(), stderr, code
}

// isaArtifact is the digits fixture saved as an artifact measured, on the CPU this test runs
// on, fastest with settings an AVX2 server cannot run: ATen's and OpenBLAS's AVX-512 kernels.
func isaArtifact(t *testing.T) string {
	t.Helper()
	mod, err := torch.Load(digits(t))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	p, err := cpu.Detect(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	here := torchspeed.CPUOf(p)
	// Whatever CPU runs the test, the artifact claims the AVX-512 server it was made for.
	here.Model, here.Features = "AMD EPYC 9B45 (recorded)", []string{"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"}
	path := filepath.Join(t.TempDir(), "digits.torchspeed.pt")
	man := &torchspeed.Manifest{
		Format: version.ManifestFormat, Torchspeed: version.Version, Libtorch: torch.Version(), SourceName: "digits.pt",
		Inputs: []torchspeed.InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}}, LoadPasses: []string{}, Steps: []string{},
		Precision: "fp32", CPU: here,
		Runtime: torchspeed.Runtime{Threads: 1, InteropThreads: 1, Candidate: "avx512+openblas-avx512", CPUCapability: "avx512", BLASCore: "SkylakeX"},
	}
	if err := torchspeed.SaveArtifact(mod, path, man); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCLIOnEmulatedAVX2 deploys artifacts made on this machine to an emulated AVX2 server: the
// AVX-512 settings an artifact names are left out with a warning that names both CPUs, every
// command runs to the end (an AVX-512 instruction anywhere would stop it), the outputs match the
// native ones within float32 reassociation, and an ISA variable set beyond the CPU is refused.
func TestCLIOnEmulatedAVX2(t *testing.T) {
	e := newEmulated(t)
	art := isaArtifact(t)
	f := fixtures.Load(t).Get(t, "digits")
	input := "x=" + f.Path(f.Inputs[0].File)

	out, stderr, code := e.run(t, nil, "launch", "--print-env", "--threads", "1", "--artifact", art)
	if code != 0 {
		t.Fatalf("launch --print-env: exit %d\n%s", code, stderr)
	}
	if strings.Contains(out, "ATEN_CPU_CAPABILITY") || strings.Contains(out, "OPENBLAS_CORETYPE") {
		t.Errorf("launch exports AVX-512 kernels to an AVX2 CPU:\n%s", out)
	}
	for _, want := range []string{"ATEN_CPU_CAPABILITY=avx512 left out (measured on AMD EPYC 9B45 (recorded))", "OPENBLAS_CORETYPE=SkylakeX left out", "Haswell"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("launch's warning lacks %q:\n%s", want, stderr)
		}
	}

	out, stderr, code = e.run(t, nil, "bench", "-m", art, "--runtime", "torchspeed", "--threads", "1", "--runs", "5", "--warmup", "1", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, stderr)
	}
	if cand, env := benchRuntimeSettings(t, out); cand != "avx512+openblas-avx512" || env["ATEN_CPU_CAPABILITY"] != "" || env["OPENBLAS_CORETYPE"] != "" {
		t.Errorf("bench on AVX2: candidate %q, env %v", cand, env)
	}
	if !strings.Contains(stderr, "this CPU (Intel Core Processor (Haswell)) lacks") {
		t.Errorf("bench did not say the artifact was measured on another CPU:\n%s", stderr)
	}

	e.sameAsNative(t, art, input)

	repo := filepath.Join(t.TempDir(), "repo")
	if _, stderr, code = e.run(t, nil, "export", "triton", "-m", art, "-o", repo); code != 0 {
		t.Fatalf("export triton: exit %d\n%s", code, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(repo, "digits", runtimeEnvFileName)); err == nil && strings.Contains(string(b), "ATEN_CPU_CAPABILITY") {
		t.Errorf("export wrote AVX-512 kernels for an AVX2 server:\n%s", b)
	}

	out, stderr, code = e.run(t, nil, "check", "-m", art, "--original", f.ModelPath(), "--input", input, "--no-timing", "--json")
	if code != 0 {
		t.Fatalf("check: exit %d\n%s", code, stderr)
	}
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("check --json: %v\n%s", err, out)
	}
	if rep.Verdict != "ok" || len(rep.RuntimeLeftOut) != 2 || !strings.Contains(strings.Join(rep.Missing, " "), "avx512f") {
		t.Errorf("check on AVX2: %+v", rep)
	}

	// A variable the user set beyond this CPU: refused before libtorch runs anything.
	for _, env := range []string{"ATEN_CPU_CAPABILITY=avx512", "OPENBLAS_CORETYPE=SkylakeX"} {
		_, stderr, code = e.run(t, []string{env}, "run", "-m", art, "--input", input)
		if code != 2 || !strings.Contains(stderr, env+" is set, but this CPU (Intel Core Processor (Haswell)) lacks AVX-512") {
			t.Errorf("%s on AVX2: exit %d\n%s", env, code, stderr)
		}
	}
}

// TestCLIINT8OnEmulatedAVX2: an INT8 artifact optimized on this machine runs on the emulated
// AVX2 CPU, answers like the original there (its own validation's threshold), and, where it
// was validated with exact INT8 arithmetic (VNNI) and 8-bit activations, says that this CPU's
// kernels saturate them.
func TestCLIINT8OnEmulatedAVX2(t *testing.T) {
	e := newEmulated(t)
	f := fixtures.Load(t).Get(t, "digits")
	dir := t.TempDir()
	model := filepath.Join(dir, "digits.pt")
	b, err := os.ReadFile(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(model, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "digits.yaml")
	yaml := fmt.Sprintf(`model:
  path: %s
  inputs:
    - {name: x, shape: [1, 1, 8, 8], dtype: float32}
quantize: {mode: static, observer: minmax, force: true}
calibration: {path: %s, limit: 100}
validation:
  data: {path: %s, labels: %s}
runtime: {threads: 1, measure: false}
output: {dir: %s}
`, model, f.Path(f.Calib.Inputs[0].File), f.Path(f.Eval.Inputs[0].File), f.Path(f.Eval.Labels.File), dir)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := cli(t, "", nil, "optimize", "-c", cfg, "-q"); code != 0 {
		t.Fatalf("optimize (native): exit %d\n%s", code, stderr)
	}
	art := filepath.Join(dir, "digits.torchspeed.pt")
	man, err := torchspeed.VerifyArchive(art)
	if err != nil || man == nil {
		t.Fatalf("artifact: %v", err)
	}
	if man.Precision != "int8-static" || man.CPU == nil || man.ActivationBits == 0 {
		t.Fatalf("manifest: precision %s, cpu %+v, activation bits %d", man.Precision, man.CPU, man.ActivationBits)
	}
	input := "x=" + f.Path(f.Inputs[0].File)
	_, stderr, code := e.run(t, nil, "run", "-m", art, "--input", input)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	risk := man.ActivationBits == 8 && man.CPU.ExactINT8
	if got := strings.Contains(stderr, "saturating 16-bit arithmetic"); got != risk {
		t.Errorf("activation bits %d, exact INT8 where made %v: warned of saturation %v\n%s", man.ActivationBits, man.CPU.ExactINT8, got, stderr)
	}
	out, stderr, code := e.run(t, nil, "check", "-m", art, "--input", "x="+f.Path(f.Eval.Inputs[0].File), "--calls", "1", "--no-timing", "--json")
	if code != 0 {
		t.Fatalf("check: exit %d\n%s\n%s", code, out, stderr)
	}
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("check --json: %v\n%s", err, out)
	}
	if rep.Accuracy == nil || !rep.Accuracy.Pass || rep.INT8SaturationRisk != risk {
		t.Errorf("check on AVX2: %+v accuracy %+v", rep, rep.Accuracy)
	}
	t.Logf("INT8 digits on emulated Haswell: cosine %.6f to the original (validated %.6f where made; activations %d-bit)",
		rep.Accuracy.Cosine, man.Validation["cosine"], man.ActivationBits)
}

// TestCLIBF16OnEmulatedAVX2: a transformer artifact optimized here with its linears in BF16
// (linear_bf16: vdpbf16ps on a CPU with AVX512_BF16) runs on the emulated AVX2 CPU, which lacks
// the instruction, through the widening kernel: no illegal instruction, the same outputs as
// natively within float32 reassociation (both round the same operands to BF16), and check passes
// it against the original.
func TestCLIBF16OnEmulatedAVX2(t *testing.T) {
	e := newEmulated(t)
	f := fixtures.Load(t).Get(t, "transformer_traced")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "transformer.yaml")
	yaml := fmt.Sprintf(`model:
  path: %s
  inputs:
    - {name: src, shape: [1, 16, 128], dtype: float32}
optimize: {optimize_for_inference: false, fast_linear: true, linear_bf16: true}
bench: {runs: 8, warmup: 1, stage_runs: 4}
runtime: {threads: 1, measure: false}
output: {dir: %s}
`, f.ModelPath(), dir)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := cli(t, "", nil, "optimize", "-c", cfg, "-q"); code != 0 {
		t.Fatalf("optimize (native): exit %d\n%s", code, stderr)
	}
	art := filepath.Join(dir, "transformer_traced.torchspeed.pt")
	man, err := torchspeed.VerifyArchive(art)
	if err != nil || man == nil {
		t.Fatalf("artifact: %v", err)
	}
	if man.Precision != "bf16" || !strings.Contains(strings.Join(man.LoadPasses, " "), torchspeed.PassLinearBF16) {
		t.Fatalf("manifest: precision %s, load passes %q: want bf16 with %s", man.Precision, man.LoadPasses, torchspeed.PassLinearBF16)
	}
	input := "src=" + f.Path(f.Inputs[0].File)
	e.sameAsNative(t, art, input)
	out, stderr, code := e.run(t, nil, "check", "-m", art, "--original", f.ModelPath(), "--input", input, "--no-timing", "--json")
	if code != 0 {
		t.Fatalf("check: exit %d\n%s\n%s", code, out, stderr)
	}
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("check --json: %v\n%s", err, out)
	}
	if rep.Accuracy == nil || !rep.Accuracy.Pass {
		t.Errorf("check on AVX2: %+v accuracy %+v", rep, rep.Accuracy)
	} else {
		t.Logf("BF16 transformer on emulated Haswell: cosine %.6f to the original", rep.Accuracy.Cosine)
	}
}

// runtimeEnvFileName is export's runtime environment file.
const runtimeEnvFileName = "torchspeed.env"

// sameAsNative runs art on input (`run --json`) here and emulated, and compares the outputs
// (sameRunOutputs).
func (e *emulated) sameAsNative(t *testing.T, art, input string) {
	t.Helper()
	native, stderr, code := cli(t, "", nil, "run", "-m", art, "--input", input, "--json")
	if code != 0 {
		t.Fatalf("run (native): exit %d\n%s", code, stderr)
	}
	emu, stderr, code := e.run(t, nil, "run", "-m", art, "--input", input, "--json")
	if code != 0 {
		t.Fatalf("run (emulated): exit %d\n%s", code, stderr)
	}
	sameRunOutputs(t, native, emu)
}

// sameRunOutputs compares two `run --json` results: the same outputs within float32
// reassociation of the output's magnitude (other kernels sum in another order).
func sameRunOutputs(t *testing.T, a, b string) {
	t.Helper()
	var ra, rb struct {
		Outputs []runOutput `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(a), &ra); err != nil {
		t.Fatalf("run --json: %v\n%s", err, a)
	}
	if err := json.Unmarshal([]byte(b), &rb); err != nil {
		t.Fatalf("run --json: %v\n%s", err, b)
	}
	if len(ra.Outputs) != len(rb.Outputs) || len(ra.Outputs) == 0 {
		t.Fatalf("outputs: %d native, %d emulated", len(ra.Outputs), len(rb.Outputs))
	}
	for i := range ra.Outputs {
		x, y := ra.Outputs[i], rb.Outputs[i]
		xmin, xmax, xmean := float64(x.Min), float64(x.Max), float64(x.Mean)
		ymin, ymax, ymean := float64(y.Min), float64(y.Max), float64(y.Mean)
		tol := 1e-4 * math.Max(1, math.Max(math.Abs(xmin), math.Abs(xmax)))
		if math.Abs(xmin-ymin) > tol || math.Abs(xmax-ymax) > tol || math.Abs(xmean-ymean) > tol {
			t.Errorf("output %s: native min %g max %g mean %g, emulated AVX2 %g %g %g", x.Name, x.Min, x.Max, x.Mean, y.Min, y.Max, y.Mean)
		}
	}
}
