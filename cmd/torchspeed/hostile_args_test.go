package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/npy"
)

// Outputs that are NaN or infinite (an input of 2e37 overflows the digits model to -Inf and +Inf;
// a NaN pixel makes every output NaN) once made `run --json` fail with "json: unsupported
// value": it exits 0 with valid JSON, null where a figure is not a number.
func TestHostileRunJSONNonFinite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		name              string
		fill              float32
		nans              int
		minNull, meanNull bool
		finiteTopKEntries int // at least
	}{
		{"overflow to infinity", 2e37, 0, true, true, 0},
		{"NaN", float32(nan()), 10, true, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := filepath.Join(dir, c.name+".npy")
			d := make([]float32, 64)
			if c.nans > 0 {
				d[0] = c.fill
			} else {
				for i := range d {
					d[i] = c.fill
				}
			}
			if err := npy.WriteFile(x, npy.FromFloat32([]int64{1, 1, 8, 8}, d)); err != nil {
				t.Fatal(err)
			}
			stdout, stderr, code := cli(t, dir, nil, "run", "-m", filepath.Join(fixtureDir(t), "digits.pt"), "--input", x, "--topk", "10", "--json")
			expectExit(t, stderr, code, 0)
			var got struct {
				Outputs []struct {
					Min, Max, Mean *float64
					NaNs           int `json:"nans"`
					TopK           []struct{ Value *float64 }
				}
			}
			if err := json.Unmarshal([]byte(stdout), &got); err != nil || len(got.Outputs) != 1 {
				t.Fatalf("not the JSON of one output (%v):\n%s", err, stdout)
			}
			o := got.Outputs[0]
			if o.NaNs != c.nans || (o.Min == nil) != c.minNull || (o.Max == nil) != c.minNull || (o.Mean == nil) != c.meanNull {
				t.Errorf("nans %d, min %v, max %v, mean %v:\n%s", o.NaNs, o.Min, o.Max, o.Mean, stdout)
			}
			finite := 0
			for _, k := range o.TopK {
				if k.Value != nil {
					finite++
				}
			}
			if len(o.TopK) != 10 || finite < c.finiteTopKEntries || (c.nans > 0 && finite > 0) {
				t.Errorf("top-k %d entries, %d of them numbers:\n%s", len(o.TopK), finite, stdout)
			}
		})
	}
}

func nan() float64 { return math.NaN() }

// Counts and sizes that once ran the process out of memory, paths that made an output replace
// an input, inputs of the wrong kind that exited 1 (a folder as the model), and unbounded reads:
// each is exit 2 with a message naming the flag or file and what is allowed, before anything
// is loaded or written.
func TestHostileArgs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model, sum := copyModel(t, dir, "digits.pt")
	out := filepath.Join(dir, "out")
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink(model, link); err != nil {
		t.Fatal(err)
	}
	// An artifact inside the repository entry its export would write.
	m, err := torch.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	art := saveArtifactWith(t, m, "digits.torchspeed.pt", []int64{1, 1, 8, 8}, 1)
	m.Close()
	repo := filepath.Join(dir, "repo")
	served := filepath.Join(repo, "digits", "1", "model.pt")
	raw, err := os.ReadFile(art)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(served), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(served, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	reportCfg := filepath.Join(out+"-cfg", "report.json") // a config where optimize writes its report
	if err := os.MkdirAll(filepath.Dir(reportCfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(reportCfg, []byte("model:\n  path: "+model+"\n  inputs:\n    - {name: x, shape: [1, 1, 8, 8]}\noutput:\n  dir: "+filepath.Dir(reportCfg)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	x := filepath.Join(dir, "x.npz")
	if err := npy.WriteNPZ(x, []string{"x"}, []*npy.Array{npy.FromFloat32([]int64{1, 1, 8, 8}, make([]float32, 64))}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"bench --runs past the latencies memory holds", []string{"bench", "-m", model, "--input-shape", "1x1x8x8", "--runs", "10000000000", "-o", out},
			[]string{"--runs (bench.runs): 10000000000", "at most 10000000", "--duration"}},
		{"bench --warmup past the bound", []string{"bench", "-m", model, "--input-shape", "1x1x8x8", "--warmup", "10000000000", "-o", out},
			[]string{"--warmup (bench.warmup): 10000000000", "0 to 10000000"}},
		{"bench --sweep-batch past the bound", []string{"bench", "-m", model, "--input-shape", "1x1x8x8", "--sweep-batch", "1,100000000000", "-o", out},
			[]string{"--sweep-batch 100000000000", "want 1 to 65536"}},
		{"bench --sweep-batch past memory", []string{"bench", "-m", model, "--input-shape", "1x1x1000x1000", "--sweep-batch", "1,65536", "-o", out},
			[]string{"--sweep-batch 65536", "is available"}},
		{"optimize bench.runs past the bound", []string{"optimize", "-c", writeConfig(t, "model:\n  path: "+model+"\n  inputs:\n    - {name: x, shape: [1, 1, 8, 8]}\nbench:\n  runs: 10000000000\noutput:\n  dir: "+out+"\n")},
			[]string{"bench.runs: 10000000000 is not allowed", "at most 10000000"}},
		{"run a folder as the model", []string{"run", "-m", dir}, []string{"run: model", dir, "a folder, not a file"}},
		{"run a device as the model", []string{"run", "-m", "/dev/zero"}, []string{"/dev/zero", "not a regular file (a device)"}},
		{"bench a folder as the model", []string{"bench", "-m", dir, "--input-shape", "1x1x8x8", "-o", out}, []string{"bench: model", "a folder"}},
		{"optimize a folder as the model", []string{"optimize", "-m", dir, "--input-shape", "1x1x8x8", "-o", out}, []string{"model.path", "a folder"}},
		{"optimize -o a file", []string{"optimize", "-m", model, "--input-shape", "1x1x8x8", "-o", model}, []string{"output.dir", "is a file: choose a folder"}},
		{"export a folder as the model", []string{"export", "triton", "-m", dir, "-o", out}, []string{"export triton: --model", "a folder"}},
		{"config init a folder as the model", []string{"config", "init", "-m", dir, "-o", filepath.Join(out, "c.yaml")}, []string{"config init: model", "a folder"}},
		{"run -c /dev/zero", []string{"run", "-c", "/dev/zero"}, []string{`config "/dev/zero"`, "more than the 1 MiB"}},
		{"bench -c a folder", []string{"bench", "-c", dir}, []string{"config", "a folder, not a file"}},
		{"export --batch-sweep /dev/zero", []string{"export", "triton", "-m", model, "-o", out, "--batch-sweep", "/dev/zero"}, []string{`batch sweep "/dev/zero"`, "more than the 64 MiB"}},
		{"bench --benchfmt the model", []string{"bench", "-m", model, "--input-shape", "1x1x8x8", "--benchfmt", model}, []string{"--benchfmt", "is also the model"}},
		{"bench --benchfmt a link to the model", []string{"bench", "-m", model, "--input-shape", "1x1x8x8", "--benchfmt", link}, []string{"--benchfmt", link, "is also the model"}},
		{"config init -o the model --force", []string{"config", "init", "-m", model, "-o", model, "--force"}, []string{"config init: -o", "is also the model"}},
		{"run --save its --input", []string{"run", "-m", model, "--input", "x=" + x, "--save", x}, []string{"--save", "is also --input"}},
		{"optimize report.json over its config", []string{"optimize", "-c", reportCfg}, []string{"output", "is also the config"}},
		{"export triton over its artifact", []string{"export", "triton", "-m", served, "-o", repo, "--name", "digits", "--overwrite", "--measure=false"}, []string{"model.pt", "is also the artifact"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := cli(t, dir, nil, c.args...)
			expectExit(t, stderr, code, exitcode.Usage, c.want...)
			if names := listDir(t, out); len(names) > 0 {
				t.Errorf("left in the output folder: %v", names)
			}
			if now, _, _ := safefile.SHA256(model); now != sum {
				t.Errorf("the input model changed")
			}
		})
	}
	if b, _ := os.ReadFile(served); string(b) != string(raw) {
		t.Errorf("the exported artifact changed")
	}
}

// torchspeed.Load's warnings about an artifact (here: it records no digest, so its integrity
// cannot be checked) reach stderr from every command that loads one, --quiet or not: run and
// export never printed them, and bench -q dropped them.
func TestHostileLoadWarnings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m, err := torch.Load(filepath.Join(fixtureDir(t), "digits.pt"))
	if err != nil {
		t.Fatal(err)
	}
	art := saveArtifactWith(t, m, "digits.torchspeed.pt", []int64{1, 1, 8, 8}, 1)
	m.Close()
	for _, args := range [][]string{
		{"run", "-m", art},
		{"-q", "run", "-m", art},
		{"-q", "bench", "-m", art, "--runs", "3", "--warmup", "0", "--interrupts", "0", "-o", filepath.Join(dir, "bench")},
		{"-q", "export", "triton", "-m", art, "-o", filepath.Join(dir, "repo"), "--measure=false"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, stderr, code := cli(t, dir, nil, args...)
			expectExit(t, stderr, code, 0, "digits.torchspeed.pt", "records no digest")
		})
	}
}

// A log folder may be shared: a link planted at instance-0.log once had the instance's output
// appended to whatever it named (sh's >> follows links). launch refuses it, a hard link and a
// pipe there, with exit 2, before starting anything; the victim is untouched.
func TestHostileLaunchLogDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(dir, "ran")
	for _, c := range []struct {
		name  string
		plant func(log string) error
		want  string
	}{
		{"symbolic link", func(log string) error { return os.Symlink(victim, log) }, "is a symbolic link"},
		{"dangling symbolic link", func(log string) error { return os.Symlink(filepath.Join(dir, "new"), log) }, "is a symbolic link"},
		{"hard link", func(log string) error { return os.Link(victim, log) }, "hard links"},
		{"pipe", func(log string) error { return unix.Mkfifo(log, 0o644) }, "instance-0.log"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := filepath.Join(t.TempDir(), "logs")
			if err := os.MkdirAll(logs, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := c.plant(filepath.Join(logs, "instance-0.log")); err != nil {
				t.Fatal(err)
			}
			_, stderr, code := cli(t, dir, nil, "launch", "--log-dir", logs, "--", "sh", "-c", "echo pwned; touch "+ran)
			expectExit(t, stderr, code, exitcode.Usage, "--log-dir", c.want)
			if b, _ := os.ReadFile(victim); string(b) != "keep" {
				t.Errorf("the victim now holds %q", b)
			}
			if _, err := os.Lstat(ran); err == nil {
				t.Errorf("the command ran")
			}
			if _, err := os.Lstat(filepath.Join(dir, "new")); err == nil {
				t.Errorf("a file was created through the dangling link")
			}
		})
	}
	t.Run("a fresh folder gets its log", func(t *testing.T) {
		logs := filepath.Join(t.TempDir(), "logs")
		_, stderr, code := cli(t, dir, nil, "launch", "--log-dir", logs, "--", "sh", "-c", "echo hello")
		expectExit(t, stderr, code, 0)
		if b, err := os.ReadFile(filepath.Join(logs, "instance-0.log")); err != nil || string(b) != "hello\n" {
			t.Errorf("log %q, %v", b, err)
		}
	})
}

// optimize once checked only its artifact's name: without --overwrite it replaced an earlier
// run's report.json, report.md and latency plots (and retired report.failed.*). Now any file
// it may write that exists stops it first, with exit 2, and nothing in the folder changes.
func TestHostileOptimizeKeepsEarlierOutputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model, _ := copyModel(t, dir, "digits.pt")
	for _, name := range []string{"report.json", "report.md", "latency.png", "latency.svg", "report.failed.json", "latency.failed.svg"} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(out, name), []byte("an earlier run's"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, out)
			_, stderr, code := cli(t, dir, nil, "optimize", "-m", model, "--input-shape", "1x1x8x8", "-o", out, "--quiet")
			expectExit(t, stderr, code, exitcode.Usage, name, "exists", "--overwrite")
			sameSnapshot(t, before, snapshot(t, out))
			// Runs before the written reports' schema check (registered by cli, earlier): the
			// planted report is no report.
			t.Cleanup(func() { os.Remove(filepath.Join(out, name)) })
		})
	}
}

// Exports into one repository entry once shared the staging name REPO/NAME/1/.model.pt.export:
// one export renamed or removed the other's file ("no such file"), or left model.pt of one
// beside config.pbtxt of another. Now each stages under its own name and they take turns.
func TestHostileConcurrentExports(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m, err := torch.Load(filepath.Join(fixtureDir(t), "digits.pt"))
	if err != nil {
		t.Fatal(err)
	}
	art := saveArtifactWith(t, m, "digits.torchspeed.pt", []int64{1, 1, 8, 8}, 1)
	m.Close()
	repo := filepath.Join(dir, "repo")
	const n = 4
	cmds := make([]*exec.Cmd, n)
	outs := make([]*strings.Builder, n)
	for i := range cmds {
		cmds[i] = exec.Command(torchspeedBin(t), "export", "triton", "-m", art, "-o", repo, "--overwrite", "--runs", "2", "--measure-params=false", "--quiet")
		cmds[i].Env = scrubbedEnv()
		outs[i] = &strings.Builder{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("export %d: %v\n%s", i, err, outs[i])
		}
	}
	entry := filepath.Join(repo, "digits")
	var left []string
	_ = filepath.WalkDir(entry, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, strings.TrimPrefix(p, entry+"/"))
		}
		return nil
	})
	if strings.Join(left, " ") != "1/model.pt config.pbtxt" {
		t.Errorf("the entry holds %v, want 1/model.pt and config.pbtxt", left)
	}
	want, _ := os.ReadFile(art)
	if got, _ := os.ReadFile(filepath.Join(entry, "1", "model.pt")); string(got) != string(want) {
		t.Errorf("model.pt is not the artifact")
	}
}
