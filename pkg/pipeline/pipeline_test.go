package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/mkldnncheck"
	"github.com/torchspeed/torchspeed/internal/schemacheck"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// mkldnnBroken is why oneDNN cannot run here ("" when it can): the tests call Run in this
// process, so a oneDNN that crashes (Debian 13's libdnnl on some CPUs) would end the whole
// test binary. Found once by re-running this binary as a child (mkldnncheck).
var mkldnnBroken string

func TestMain(m *testing.M) {
	mkldnncheck.ChildMain()
	reason, err := mkldnncheck.SelfCheck(context.Background(), "-test.run=^$")
	if err != nil {
		panic(err)
	}
	mkldnnBroken = reason
	if reason != "" {
		fmt.Fprintln(os.Stderr, "pipeline tests: optimize_for_inference candidates skipped:", reason)
	}
	if err := torch.SetNumThreads(1); err != nil {
		panic(err)
	}
	code := m.Run()
	schemaMu.Lock()
	for _, e := range schemaErrs {
		fmt.Fprintln(os.Stderr, "report does not match docs/schema/report.schema.json:", e)
		code = 1
	}
	fmt.Fprintf(os.Stderr, "pipeline tests: %d report.json files checked against docs/schema/report.schema.json\n", schemaChecked)
	schemaMu.Unlock()
	os.Exit(code)
}

var (
	schemaMu      sync.Mutex
	schemaErrs    []error
	schemaChecked int
)

// checkWritten validates every report a run wrote against the documented schema; TestMain
// fails the package when any does not match.
func checkWritten(paths []string) {
	for _, p := range paths {
		if filepath.Ext(p) != ".json" {
			continue
		}
		err := schemacheck.CheckFile("report.schema.json", p)
		schemaMu.Lock()
		schemaChecked++
		if err != nil {
			schemaErrs = append(schemaErrs, err)
		}
		schemaMu.Unlock()
	}
}

// testOptions are the Options every in-process Run of these tests uses.
func testOptions() Options { return Options{MKLDNNBroken: mkldnnBroken, written: checkWritten} }

// testConfig is a quick config for a fixture: few runs, everything else default.
func testConfig(t testing.TB, f fixtures.Fixture, out string) *config.Config {
	t.Helper()
	c := config.Default()
	c.Model.Path = f.ModelPath()
	for _, in := range f.Inputs {
		ci := config.Input{Name: in.Name, Shape: in.Shape, DType: in.DType}
		if in.DType == "int64" {
			ci.Range = []int64{0, 10}
		}
		c.Model.Inputs = append(c.Model.Inputs, ci)
	}
	c.Bench.Runs, c.Bench.Warmup, c.Bench.StageRuns = 8, 1, 4
	c.Output.Dir = out
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &c
}

func tensors(t testing.TB, arrays []*npy.Array) []*torch.Tensor {
	var out []*torch.Tensor
	for _, a := range arrays {
		x, err := torch.NewTensorAny(a.Data, a.Shape)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		out = append(out, x)
	}
	return out
}

// loadBoth loads an artifact twice: raw, as stock libtorch does (eval, under the quantized
// engine qengine when not empty), and through torchspeed.Load with its load passes. Both close
// when the test ends.
func loadBoth(t *testing.T, path, qengine string) (raw *torch.Module, m *torchspeed.Model) {
	t.Helper()
	var err error
	if qengine != "" {
		raw, err = torch.LoadWithEngine(path, qengine)
	} else {
		raw, err = torch.Load(path)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if err := raw.Eval(); err != nil {
		t.Fatal(err)
	}
	if m, err = torchspeed.Load(path, torchspeed.LoadOptions{KeepThreads: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return raw, m
}

// firstOutputs runs the saved module raw and the loaded artifact m on fixture f's inputs and
// returns their first outputs' values (want from raw, got from m).
func firstOutputs(t *testing.T, f fixtures.Fixture, raw *torch.Module, m *torchspeed.Model) (want, got []float32) {
	t.Helper()
	x := tensors(t, f.InputArrays(t))
	wo, err := raw.Forward(x...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(wo)
	gotOut, err := m.Predict(x...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(gotOut)
	w, _ := wo[0].Tensor.Float32s()
	g, err := gotOut[0].Tensor.Float32s()
	if err != nil || len(g) != len(w) {
		t.Fatalf("outputs: %v, %d values, want %d", err, len(g), len(w))
	}
	return w, g
}

// The artifact of each fixture loads through torchspeed.Load and answers like PyTorch did.
func TestOptimizeFixtures(t *testing.T) {
	man := fixtures.Load(t)
	for _, name := range []string{"resnet18", "mobilenet_v2", "transformer_traced", "digits", "multi"} {
		t.Run(name, func(t *testing.T) {
			f := man.Get(t, name)
			out := t.TempDir()
			cfg := testConfig(t, f, out)
			rep, err := Run(context.Background(), cfg, testOptions())
			if err != nil {
				t.Fatal(err)
			}
			if rep.Artifact == nil || rep.Bench == nil || len(rep.Stages) < 3 {
				t.Fatalf("report incomplete: artifact %v, bench %v, %d stages", rep.Artifact, rep.Bench, len(rep.Stages))
			}
			for _, file := range []string{name + ".torchspeed.pt", "report.json", "report.md"} {
				if _, err := os.Stat(filepath.Join(out, file)); err != nil {
					t.Errorf("missing %s: %v", file, err)
				}
			}
			var js map[string]any
			b, _ := os.ReadFile(filepath.Join(out, "report.json"))
			if err := json.Unmarshal(b, &js); err != nil {
				t.Fatalf("report.json: %v", err)
			}
			md, _ := os.ReadFile(filepath.Join(out, "report.md"))
			if !strings.Contains(string(md), "| original |") {
				t.Errorf("report.md has no stage table:\n%s", md)
			}
			m, err := torchspeed.Load(*rep.Artifact, torchspeed.LoadOptions{KeepThreads: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			outs, err := m.Predict(tensors(t, f.InputArrays(t))...)
			if err != nil {
				t.Fatal(err)
			}
			defer torch.CloseOutputs(outs)
			want := f.OutputArrays(t)
			for _, o := range outs {
				got, _ := o.Tensor.Float32s()
				w, _ := want[o.Name].Float32s()
				if len(got) != len(w) {
					t.Fatalf("output %s: %d values, want %d", o.Name, len(got), len(w))
				}
				ref := [][]float64{toF64(w)}
				maxAbs, cos, err := validate.CompareOutputs(ref, [][]float64{toF64(got)})
				if err != nil || maxAbs > 1e-3 || cos < 0.9999 {
					t.Errorf("output %s: max abs %.3g cosine %.6f (%v)", o.Name, maxAbs, cos, err)
				}
			}
			if len(m.Manifest.Steps) == 0 && rep.Stages[len(rep.Stages)-1].Status == "kept" {
				t.Errorf("manifest lists no steps: %+v", m.Manifest)
			}
		})
	}
}

func toF64(v []float32) []float64 {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return f
}

// The artifact loads in stock libtorch (ts_run, which knows nothing of torchspeed) and gives
// the same outputs.
func TestArtifactLoadsInPlainLibtorch(t *testing.T) {
	tsRun, err := filepath.Abs("../../build/cmake/ts_run")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tsRun); err != nil {
		t.Fatalf("ts_run not built (%v): run `make shim`", err)
	}
	f := fixtures.Load(t).Get(t, "resnet18")
	out := t.TempDir()
	rep, err := Run(context.Background(), testConfig(t, f, out), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	in := f.InputArrays(t)[0]
	raw := filepath.Join(out, "in.bin")
	data := in.Data.([]float32)
	buf := make([]byte, 4*len(data))
	for i, v := range data {
		u := mathFloat32bits(v)
		buf[4*i], buf[4*i+1], buf[4*i+2], buf[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	if err := os.WriteFile(raw, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{*rep.Artifact, "--input", "float32:1x3x224x224:" + raw, "--out", out, "--threads", "1"}
	if m, _ := torchspeed.ParseManifest(mustExtra(t, *rep.Artifact)); m != nil && m.ChannelsLast {
		args = append(args, "--channels-last")
	}
	cmd := exec.Command(tsRun, args...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ts_run: %v\n%s", err, b)
	}
	got, err := os.ReadFile(filepath.Join(out, "0.bin"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := f.OutputArrays(t)["0"].Float32s()
	gotF := make([]float64, len(want))
	for i := range want {
		u := uint32(got[4*i]) | uint32(got[4*i+1])<<8 | uint32(got[4*i+2])<<16 | uint32(got[4*i+3])<<24
		gotF[i] = float64(mathFloat32frombits(u))
	}
	maxAbs, cos, err := validate.CompareOutputs([][]float64{toF64(want)}, [][]float64{gotF})
	if err != nil || maxAbs > 1e-3 || cos < 0.9999 {
		t.Fatalf("plain libtorch output: max abs %.3g cosine %.6f (%v)", maxAbs, cos, err)
	}
}

func mustExtra(t *testing.T, path string) []byte {
	m, err := torch.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ex, err := m.ExtraFiles()
	if err != nil {
		t.Fatal(err)
	}
	return ex[torchspeed.ManifestFile]
}

func TestOptimizeBadInput(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "digits")
	t.Run("missing model", func(t *testing.T) {
		cfg := testConfig(t, f, t.TempDir())
		cfg.Model.Path = filepath.Join(t.TempDir(), "nope.pt")
		_, err := Run(context.Background(), cfg, testOptions())
		if err == nil || !strings.Contains(err.Error(), "file not found") || !strings.Contains(err.Error(), "nope.pt") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("shape the model rejects", func(t *testing.T) {
		out := t.TempDir()
		cfg := testConfig(t, f, out)
		cfg.Model.Inputs[0].Shape = []int64{1, 3, 8, 8}
		_, err := Run(context.Background(), cfg, testOptions())
		if err == nil || !strings.Contains(err.Error(), "rejects the configured inputs") || !strings.Contains(err.Error(), "channels") {
			t.Fatalf("error %v", err)
		}
		assertEmpty(t, out)
	})
	t.Run("output not writable", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "afile")
		os.WriteFile(file, []byte("x"), 0o644)
		cfg := testConfig(t, f, filepath.Join(file, "sub"))
		_, err := Run(context.Background(), cfg, testOptions())
		if err == nil || !strings.Contains(err.Error(), "output.dir") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("existing artifact without overwrite", func(t *testing.T) {
		out := t.TempDir()
		os.WriteFile(filepath.Join(out, "digits.torchspeed.pt"), []byte("keep me"), 0o644)
		cfg := testConfig(t, f, out)
		_, err := Run(context.Background(), cfg, testOptions())
		if err == nil || !strings.Contains(err.Error(), "overwrite") {
			t.Fatalf("error %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "digits.torchspeed.pt")); string(b) != "keep me" {
			t.Fatal("existing file changed")
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		out := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Run(ctx, testConfig(t, f, out), testOptions())
		if err == nil || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("error %v", err)
		}
		assertEmpty(t, out)
	})
	t.Run("disk full", func(t *testing.T) {
		dir := t.TempDir()
		if b, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a small tmpfs here (%v: %s); the disk-full path is covered by the CLI test where possible", err, b)
		}
		defer exec.Command("umount", dir).Run()
		cfg := testConfig(t, f, dir)
		_, err := Run(context.Background(), cfg, testOptions())
		if err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("error %v", err)
		}
		assertEmpty(t, dir)
	})
}

// assertEmpty checks that a failed run left nothing in the output folder.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Errorf("left behind: %s", e.Name())
	}
}

// With oneDNN reported broken, the optimize_for_inference candidates are not built (building
// or running them would crash the process): they show as skipped with the reason, the report
// warns, and the run still finishes with the other steps.
func TestMKLDNNBrokenSkipsOFI(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "digits")
	cfg := testConfig(t, f, t.TempDir())
	cfg.Quantize.Mode = "none"
	const reason = "oneDNN crashes here (test)"
	opts := testOptions()
	opts.MKLDNNBroken = reason
	rep, err := Run(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, s := range rep.Stages {
		status[s.Name] = s.Status
		if s.Status == "skipped" && s.Reason != reason {
			t.Errorf("stage %s: reason %q, want %q", s.Name, s.Reason, reason)
		}
	}
	for _, name := range []string{"freeze + optimize_for_inference", "channels-last + freeze + ofi"} {
		if status[name] != "skipped" {
			t.Errorf("stage %q: status %q, want skipped (stages %v)", name, status[name], status)
		}
	}
	if status["freeze"] == "" || status["freeze"] == "skipped" {
		t.Errorf("freeze: status %q, want it built and measured", status["freeze"])
	}
	warned := false
	for _, w := range rep.Warnings {
		warned = warned || strings.Contains(w, "optimize_for_inference skipped: "+reason)
	}
	if !warned {
		t.Errorf("no warning about the skipped optimize_for_inference: %q", rep.Warnings)
	}
	t.Logf("stages %v", status)
}
