package main

import (
	"archive/zip"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// maxBombRSS is the peak memory a refused bomb may cost: the process with libtorch loaded, and
// nothing of what the archive declares.
const maxBombRSS = 256 << 20

// cliRSS is cli, with the process's peak resident memory.
func cliRSS(t *testing.T, dir string, args ...string) (stderr string, code int, rss int64) {
	t.Helper()
	// The peak RSS comes from GNU time, which starts the command itself: a process this test
	// starts would report at least this test process's own peak (Linux records the peak of the
	// address space a child replaces at exec, and Go starts children with vfork, which shares
	// the parent's), whatever the command used.
	gnuTime, err := exec.LookPath("/usr/bin/time")
	if err != nil {
		t.Fatalf("GNU time (Debian's package time, which scripts/setup.sh installs) is needed to read a command's peak RSS: %v", err)
	}
	rssFile := filepath.Join(t.TempDir(), "rss")
	cmd := exec.Command(gnuTime, append([]string{"-q", "-f", "%M", "-o", rssFile, torchspeedBin(t)}, args...)...)
	cmd.Dir = dir
	cmd.Env = scrubbedEnv()
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(rssFile)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("GNU time wrote %q: %v", b, err)
	}
	return errOut.String(), code, kb << 10
}

// Archives whose records inflate far past their size on disk once made run peak at 2.3 GB (a
// model with an extra record of 1 GiB of zeros: the shim read every extra record) and 6.5 GB
// (an .npz member of 1 GiB of zeros). What a record declares is checked from the zip directory
// before anything is inflated: exit 2 naming the file, the record and the size, at the memory
// of a process that read nothing.
func TestHostileBombs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	digits := filepath.Join(fixtureDir(t), "digits.pt")
	zr, err := zip.OpenReader(digits)
	if err != nil {
		t.Fatal(err)
	}
	root, _, _ := strings.Cut(zr.File[0].Name, "/")
	zr.Close()
	const n = 256 << 20
	bombModel := fixtures.AddZeros(t, digits, "bomb.pt", root+"/extra/big.bin", nil, n)
	bigExtras := fixtures.AddZeros(t, digits, "extras.pt", root+"/extra/vocab.bin", nil, torch.MaxExtraBytes+1<<20)
	bombNPZ := fixtures.AddZeros(t, "", "bomb.npz", "x.npy", fixtures.NPYHeader(n/4), n)
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"run a model with a zip bomb in an extra record", []string{"run", "-m", bombModel},
			[]string{"bomb.pt", "extra/big.bin", "256.0 MiB", "zip bomb"}},
		{"bench a model with a zip bomb in an extra record", []string{"bench", "-m", bombModel, "--input-shape", "1x1x8x8", "-o", filepath.Join(dir, "b")},
			[]string{"bomb.pt", "extra/big.bin", "zip bomb"}},
		{"run a model whose extra records pass the bound", []string{"run", "-m", bigExtras},
			[]string{"extras.pt", "extra files", "33.0 MiB together, more than the 32.0 MiB"}},
		{"run with an .npz bomb as input", []string{"run", "-m", digits, "--input", "x=" + bombNPZ},
			[]string{"bomb.npz", "x.npy", "256.0 MiB", "zip bomb"}},
		{"optimize with an .npz bomb as calibration data", []string{"optimize", "-c", writeConfig(t, "model:\n  path: "+digits+
			"\n  inputs:\n    - {name: x, shape: [1, 1, 8, 8]}\ncalibration:\n  path: "+bombNPZ+"\noutput:\n  dir: "+filepath.Join(dir, "o")+"\n")},
			[]string{"bomb.npz", "x.npy", "zip bomb"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			stderr, code, rss := cliRSS(t, dir, c.args...)
			expectExit(t, stderr, code, exitcode.Usage, c.want...)
			if rss > maxBombRSS {
				t.Errorf("peak RSS %d MiB, more than %d MiB", rss>>20, maxBombRSS>>20)
			}
			t.Logf("peak RSS %d MiB", rss>>20)
		})
	}
	for _, out := range []string{"b", "o"} {
		if names := listDir(t, filepath.Join(dir, out)); len(names) > 0 {
			t.Errorf("left in %s: %v", out, names)
		}
	}
}

// An artifact is refused (exit 2) by every command that reads one when any part of it changed
// after torchspeed wrote it, CRCs recomputed: the manifest (which its records digest does not
// cover: a rewritten manifest once verified), the code, a constant; the message names the part.
func TestHostileTamperedArtifact(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m, err := torch.Load(filepath.Join(fixtureDir(t), "digits.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	art := filepath.Join(t.TempDir(), "digits.torchspeed.pt")
	if err := torchspeed.SaveArtifact(m, art, hostileManifest()); err != nil {
		t.Fatal(err)
	}
	edit := func(suffix string, change func([]byte) []byte) string {
		return fixtures.RewriteZip(t, art, func(name string, data []byte) []byte {
			if strings.HasSuffix(name, suffix) {
				return change(data)
			}
			return data
		})
	}
	for _, c := range []struct {
		name, path, want string
	}{
		{"the manifest's runtime candidate", edit("/extra/"+torchspeed.ManifestFile, func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"candidate": "passive"`), []byte(`"candidate": "active" `), 1)
		}), "manifest (extra/torchspeed.json) does not match its digest"},
		{"the manifest's threads", edit("/extra/"+torchspeed.ManifestFile, func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"threads": 1`), []byte(`"threads": 2`), 1)
		}), "manifest (extra/torchspeed.json) does not match its digest"},
		{"the code", edit("/code/__torch__.py", func(b []byte) []byte { return append(b, '\n') }), "changed code/__torch__.py"},
		{"the constants", edit("/constants.pkl", func(b []byte) []byte { return append(b, 0) }), "changed constants.pkl"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"run", "-m", c.path},
				{"launch", "--artifact", c.path, "--print-env"},
				{"check", "-m", c.path, "--original", filepath.Join(fixtureDir(t), "digits.pt"), "--no-timing"},
			} {
				stdout, stderr, code := cli(t, dir, nil, args...)
				expectExit(t, stderr, code, exitcode.Usage, "digits.torchspeed.pt", c.want)
				if stdout != "" {
					t.Errorf("%s printed:\n%s", args[0], stdout)
				}
			}
		})
	}
	// The artifact as written verifies (its manifest names a reset method digits lacks: launch
	// reads it without loading the model).
	_, stderr, code := cli(t, dir, nil, "launch", "--artifact", art, "--print-env")
	expectExit(t, stderr, code, 0)
}

// A model call cannot be interrupted, and optimize once ignored SIGINT and SIGTERM for as long
// as a forward looped. It now exits 130 within 5 s of either, with nothing of its outputs left.
func TestHostileOptimizeInterruptInModelCall(t *testing.T) {
	t.Parallel()
	m, err := torch.Load(filepath.Join(fixtureDir(t), "digits.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// A method that loops for as many iterations as its n argument says: 10^12 is hours.
	if err := m.Define("def spin(self, x: Tensor, n: int) -> Tensor:\n    i = 0\n    while i < n:\n        x = x + 0.0\n        i += 1\n    return self.forward(x)\n"); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "spin.pt")
	if err := m.Save(model, nil); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "out")
			cfg := writeConfig(t, "model:\n  path: "+model+"\n  method: spin\n  inputs:\n    - {name: x, shape: [1, 1, 8, 8]}\n"+
				"    - {name: n, type: int, value: 1000000000000}\noutput:\n  dir: "+out+"\n")
			cmd := exec.Command(torchspeedBin(t), "optimize", "-c", cfg)
			cmd.Env = scrubbedEnv()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// In the model call once the process has spent more CPU than everything before it
			// takes (under 2 s): the loop is all that runs then.
			deadline := time.Now().Add(5 * time.Minute)
			for cpuSeconds(cmd.Process.Pid) < 5 {
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatalf("optimize did not reach the model call in 5 minutes:\n%s", stderr.String())
				}
				select {
				case err := <-done:
					t.Fatalf("optimize ended before the signal: %v\n%s", err, stderr.String())
				case <-time.After(200 * time.Millisecond):
				}
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			select {
			case err := <-done:
				ee, ok := err.(*exec.ExitError)
				if !ok || ee.ExitCode() != exitcode.Interrupt {
					t.Errorf("exit %v, want %d:\n%s", err, exitcode.Interrupt, stderr.String())
				}
				t.Logf("exited %v after %v", err, time.Since(sent))
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("still running 5 s after %v:\n%s", sig, stderr.String())
			}
			if !strings.Contains(stderr.String(), "interrupted during a model call") {
				t.Errorf("the signal did not come during the model call:\n%s", stderr.String())
			}
			if names := listDir(t, out); len(names) > 0 {
				t.Errorf("left in the output folder: %v", names)
			}
		})
	}
}

// cpuSeconds is the CPU time process pid has used so far (its own threads, not its children).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := bytes.Cut(b, []byte(") ")) // past the command name, which may hold spaces
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}
