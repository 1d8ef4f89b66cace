package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// npyLike writes the fixture array name, passed through edit, into dir.
func npyLike(t *testing.T, dir, name string, edit func([]float32)) string {
	t.Helper()
	a, err := npy.ReadFile(filepath.Join(fixtureDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	d, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	edit(d)
	p := filepath.Join(dir, name)
	if err := npy.WriteFile(p, npy.FromFloat32(a.Shape, d)); err != nil {
		t.Fatal(err)
	}
	return p
}

// readReport reads the report a run left in out (report.json, or report.failed.json after
// exit 3).
func readReport(t *testing.T, out string, code int) *report.Report {
	t.Helper()
	name := "report.json"
	if code == 3 {
		name = "report.failed.json"
	}
	b, err := os.ReadFile(filepath.Join(out, name))
	if err != nil {
		t.Fatalf("exit %d and no %s: %v", code, name, err)
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &rep
}

func warned(rep *report.Report, words string) bool {
	for _, w := range rep.Warnings {
		if strings.Contains(w, words) {
			return true
		}
	}
	return false
}

// Items 11 to 16: nothing wrong reported as right (INT8 that quantized nothing, labels outside
// the classes, NaN outputs, a modified artifact), and clear bounded messages for files from a
// newer PyTorch or with absurd manifests.
func TestHostileResults(t *testing.T) {
	t.Parallel()
	fx := fixtureDir(t)
	dir := t.TempDir()
	body := func(out, extra string) string {
		return writeConfig(t, "model:\n  path: "+fx+"/digits.pt\n  inputs:\n    - {name: x, shape: [1, 1, 8, 8]}\noutput:\n  dir: "+out+
			"\nbench:\n  runs: 5\n  stage_runs: 3\noptimize:\n  channels_last: \"false\"\nruntime:\n  threads: 1\n"+extra)
	}

	t.Run("11 all-zero calibration data is refused", func(t *testing.T) {
		out := filepath.Join(dir, "zeros")
		zeros := npyLike(t, t.TempDir(), "digits_calib.npy", func(d []float32) { clear(d) })
		_, stderr, code := cli(t, dir, nil, "optimize", "-c", body(out, "quantize:\n  mode: static\ncalibration:\n  path: "+zeros+"\n"), "--quiet")
		expectExit(t, stderr, code, exitcode.Usage, "digits_calib.npy", "zero range")
		if names := listDir(t, out); names != nil {
			t.Errorf("left: %v", names)
		}
	})

	t.Run("11 a 1e30 outlier is warned about, and INT8 is claimed only with quantized ops", func(t *testing.T) {
		out := filepath.Join(dir, "outlier")
		calib := npyLike(t, t.TempDir(), "digits_calib.npy", func(d []float32) { d[7] = 1e30 })
		_, stderr, code := cli(t, dir, nil, "optimize", "-c", body(out, "quantize:\n  mode: static\n  observer: minmax\n  force: true\ncalibration:\n  path: "+calib+"\n"), "--quiet")
		if code != 0 && code != 3 {
			t.Fatalf("exit %d:\n%s", code, stderr)
		}
		expectExit(t, stderr, code, code)
		rep := readReport(t, out, code)
		if !warned(rep, "extreme outliers") {
			t.Errorf("no outlier warning: %q", rep.Warnings)
		}
		for _, s := range rep.Stages {
			if strings.HasPrefix(s.Precision, "int8") && (s.QuantizedOps == nil || *s.QuantizedOps == 0) {
				t.Errorf("stage %s says %s with %v quantized ops", s.Name, s.Precision, s.QuantizedOps)
			}
		}
		if rep.Bench != nil && strings.HasPrefix(rep.Bench.Precision, "int8") && (rep.Quantize == nil || rep.Quantize.QuantizedOpCount == 0) {
			t.Errorf("final precision %s with no quantized op", rep.Bench.Precision)
		}
		if rep.Bench != nil && rep.Quantize != nil {
			t.Logf("final precision %s, %d quantized ops", rep.Bench.Precision, rep.Quantize.QuantizedOpCount)
		}
	})

	t.Run("12 labels outside the model's classes are refused", func(t *testing.T) {
		out := filepath.Join(dir, "labels")
		a, err := npy.ReadFile(filepath.Join(fx, "digits_eval_labels.npy"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := a.Int64s()
		if err != nil {
			t.Fatal(err)
		}
		l[3] += 1000
		lp := filepath.Join(t.TempDir(), "labels.npy")
		if err := npy.WriteFile(lp, npy.FromInt64(a.Shape, l)); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := cli(t, dir, nil, "optimize", "-c", body(out, "validation:\n  data:\n    path: "+fx+"/digits_eval.npy\n    labels: "+lp+"\n"), "--quiet")
		expectExit(t, stderr, code, exitcode.Usage, "label 10", "outside the model's 10 classes")
		if names := listDir(t, out); names != nil {
			t.Errorf("left: %v", names)
		}
	})

	t.Run("13 NaN and infinite outputs keep the report", func(t *testing.T) {
		out := filepath.Join(dir, "nan")
		huge := npyLike(t, t.TempDir(), "digits_eval.npy", func(d []float32) {
			for i := range d {
				d[i] *= 3e38 // conv sums overflow to +-Inf, and Inf - Inf gives NaN
			}
		})
		_, stderr, code := cli(t, dir, nil, "optimize", "-c", body(out, "validation:\n  data:\n    path: "+huge+"\n"), "--quiet")
		if code != 0 && code != 3 {
			t.Fatalf("exit %d (the run was lost):\n%s", code, stderr)
		}
		expectExit(t, stderr, code, code)
		rep := readReport(t, out, code)
		if len(rep.NonFinite) == 0 || !warned(rep, "NaN or infinite") {
			t.Errorf("non_finite %v, warnings %q", rep.NonFinite, rep.Warnings)
		}
	})

	m, err := torch.Load(filepath.Join(fx, "digits.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	man := func() *torchspeed.Manifest {
		return &torchspeed.Manifest{Format: version.ManifestFormat, Torchspeed: "test", Libtorch: torch.Version(), Precision: "fp32",
			Inputs: []torchspeed.InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}}, Runtime: torchspeed.Runtime{Threads: 1}}
	}
	art := filepath.Join(t.TempDir(), "digits.torchspeed.pt")
	if err := torchspeed.SaveArtifact(m, art, man()); err != nil {
		t.Fatal(err)
	}
	runs := func(t *testing.T, path string, code int, words ...string) {
		t.Helper()
		stdout, stderr, got := cli(t, dir, nil, "run", "-m", path)
		expectExit(t, stderr, got, code, words...)
		if code != 0 && strings.Contains(stdout, "output(s)") {
			t.Errorf("it answered:\n%s", stdout)
		}
		if len(stderr) > 2000 {
			t.Errorf("a %d-byte message", len(stderr))
		}
	}

	t.Run("15 an artifact with a changed constant is refused", func(t *testing.T) {
		runs(t, art, 0) // the artifact as saved runs
		target, _, _ := fixtures.LargestRecord(t, art)
		p := fixtures.RewriteZip(t, art, func(name string, data []byte) []byte {
			if name == target { // a weight times 500, every CRC recomputed: only the digest can tell
				v := math.Float32frombits(binary.LittleEndian.Uint32(data))
				binary.LittleEndian.PutUint32(data, math.Float32bits(v*500+1))
			}
			return data
		})
		runs(t, p, exitcode.Usage, "digits.torchspeed.pt", "do not match the digest")
	})

	t.Run("15 a plain model with 4 damaged bytes is refused", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(fx, "digits.pt"))
		if err != nil {
			t.Fatal(err)
		}
		_, off, size := fixtures.LargestRecord(t, filepath.Join(fx, "digits.pt"))
		for i := off + size/2; i < off+size/2+4; i++ {
			b[i] ^= 0x5a
		}
		p := filepath.Join(t.TempDir(), "digits.pt")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		runs(t, p, 1, "digits.pt", "damaged")
	})

	t.Run("16 a file from a newer PyTorch says so", func(t *testing.T) {
		p := fixtures.RewriteZip(t, filepath.Join(fx, "digits.pt"), func(name string, data []byte) []byte {
			if strings.HasSuffix(name, "/version") {
				return []byte("99\n")
			}
			return data
		})
		runs(t, p, 1, "written by a newer PyTorch", "version 99")
	})

	t.Run("16 a manifest over the size bound is refused, briefly", func(t *testing.T) {
		huge := man()
		huge.Torchspeed = strings.Repeat("x", torchspeed.MaxManifestBytes+10)
		raw, err := huge.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "huge.torchspeed.pt")
		if err := m.Save(p, map[string][]byte{torchspeed.ManifestFile: raw}); err != nil {
			t.Fatal(err)
		}
		runs(t, p, exitcode.Usage, "huge.torchspeed.pt", "more than the")
	})

	t.Run("16 a manifest thread count past int64", func(t *testing.T) {
		p := rewriteManifest(t, art, func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"threads": 1`), []byte(`"threads": 99999999999999999999`), 1)
		})
		// A field that cannot hold its value is bad input, as any other invalid manifest field.
		runs(t, p, exitcode.Usage, "digits.torchspeed.pt", "99999999999999999999", "manifest field runtime.threads")
	})
}
