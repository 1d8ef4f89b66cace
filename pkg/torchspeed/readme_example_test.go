package torchspeed_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// TestREADMEProgramOutsideClone builds the README's "A Go program outside the clone" example
// as a user would: its own module in a temp folder, a replace directive to this clone,
// GOFLAGS=-mod=mod. It runs it on the digits fixture and checks its answer against the same
// call made here, so the README's program is the one that works.
func TestREADMEProgramOutsideClone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in its own module")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	src := readmeProgram(t, filepath.Join(root, "README.md"))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	for _, args := range [][]string{
		{"mod", "init", "example"},
		{"mod", "edit", "-replace", "github.com/torchspeed/torchspeed=" + root},
		{"build", "-o", "predict", "."},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	model := fixtures.Load(t).Get(t, "digits").ModelPath()
	out, err := exec.Command(filepath.Join(dir, "predict"), model).CombinedOutput()
	if err != nil {
		t.Fatalf("predict %s: %v\n%s", model, err, out)
	}
	// The same call in this process: zeros of the model's input shape.
	m, err := torchspeed.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, err := torch.NewTensor(make([]float32, 64), []int64{1, 1, 8, 8})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	outs, err := m.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(outs)
	vals, err := outs[0].Tensor.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("output %s: shape %v, first value %.4f\n", outs[0].Name, outs[0].Tensor.Shape(), vals[0])
	if string(out) != want {
		t.Errorf("the README's program printed %q, want %q", out, want)
	}
}

// readmeProgram is the first ```go block after the README's heading for it.
func readmeProgram(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	state := 0 // 0: before the heading, 1: in the section, 2: in the block
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case state == 0 && l == "### A Go program outside the clone":
			state = 1
		case state == 1 && l == "```go":
			state = 2
		case state == 2 && l == "```":
			return b.String()
		case state == 2:
			b.WriteString(l + "\n")
		}
	}
	t.Fatalf("%s has no ```go block under \"### A Go program outside the clone\"", path)
	return ""
}
