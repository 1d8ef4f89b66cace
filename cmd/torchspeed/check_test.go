package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// check on the machine that made the artifact: the same features, the runtime setting timed
// against the defaults, accuracy against the original found beside it by its digest, the result
// written beside the artifact; and the inputs it refuses.
func TestCheckCommand(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	art := measuredArtifact(t, runenv.Candidate{Name: "passive", WaitPolicy: "PASSIVE"})
	dir := filepath.Dir(art)
	src, err := os.ReadFile(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	// Without the original: accuracy not checked, said so, exit 0.
	out, stderr, code := cli(t, "", nil, "check", "-m", art, "--json", "--no-timing")
	if code != 0 {
		t.Fatalf("check without the original: exit %d\n%s", code, stderr)
	}
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != "accuracy-not-checked" || !strings.Contains(strings.Join(rep.Warnings, " "), "give it with --original") {
		t.Errorf("without the original: %+v", rep)
	}
	// The original beside it (the manifest names digits.pt): found by name.
	if err := os.WriteFile(filepath.Join(dir, "digits.pt"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code = cli(t, "", nil, "check", "-m", art, "--input", "x="+f.Path(f.Inputs[0].File), "--json")
	if code != 0 {
		t.Fatalf("check: exit %d\n%s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	a := rep.Accuracy
	if rep.Verdict != "ok" || a == nil || !a.Decisive || a.Cosine < 0.99999 || a.Original != filepath.Join(dir, "digits.pt") {
		t.Errorf("check: %+v accuracy %+v", rep, a)
	}
	if rep.Threads == nil || len(rep.Threads.P50Ms) == 0 || rep.Threads.Best < 1 || rep.Runtime == nil || rep.RuntimeStillWins == nil || rep.Runtime.Name != "passive" {
		t.Errorf("check's timing: threads %+v, runtime %+v", rep.Threads, rep.Runtime)
	}
	written, err := os.ReadFile(art + ".check.json")
	if err != nil || !json.Valid(written) {
		t.Errorf("the result beside the artifact: %v", err)
	}
	// What check refuses, before any work: exit 2 naming the input.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check"}, "--model is required"},
		{[]string{"check", "-m", dir}, "is a directory"},
		{[]string{"check", "-m", f.ModelPath()}, "has no torchspeed manifest"},
		{[]string{"check", "-m", art, "--original", f.Path(f.Inputs[0].File)}, "not a TorchScript archive"},
		{[]string{"check", "-m", art, "--out", art}, "is the input"},
		{[]string{"check", "-m", art, "--calls", "-1"}, "--calls -1"},
	} {
		_, stderr, code := cli(t, "", nil, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want 2 with %q:\n%s", tc.args, code, tc.want, stderr)
		}
	}
}
