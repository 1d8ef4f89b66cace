package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/internal/schemacheck"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/tserr"
)

// listing is a folder's entries with each file's content size, for before/after comparisons.
func listing(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, _ := e.Info()
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = fmt.Sprintf("%v %d %x", info.IsDir(), len(b), b[:min(len(b), 64)])
	}
	return out
}

func names(m map[string]string) []string {
	var n []string
	for k := range m {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

func sameListing(t *testing.T, what string, a, b map[string]string) {
	t.Helper()
	if strings.Join(names(a), ",") != strings.Join(names(b), ",") {
		t.Errorf("%s: files %v, before %v", what, names(b), names(a))
		return
	}
	for k := range a {
		if a[k] != b[k] {
			t.Errorf("%s: %s changed", what, k)
		}
	}
}

// wantClass checks that err is of the failure class class (a tserr sentinel, as a library user
// matches it) and that its message holds every msg.
func wantClass(t *testing.T, err error, class error, msg ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", class)
	}
	if !errors.Is(err, class) {
		t.Errorf("error is not %q: %v", class, err)
	}
	for _, m := range msg {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q lacks %q", err, m)
		}
	}
}

// quickConfig is testConfig with quantization off and the short runs the output tests need.
func quickConfig(t *testing.T, f fixtures.Fixture, out string) *config.Config {
	c := testConfig(t, f, out)
	c.Quantize.Mode = "none"
	c.Output.Overwrite = true
	return c
}

// failingConfig makes INT8, required by quantize.force, miss its threshold with no fallback:
// validation fails (exit 3).
func failingConfig(t *testing.T, f fixtures.Fixture, out string) *config.Config {
	c := testConfig(t, f, out)
	c.Quantize.Mode, c.Quantize.Fallback, c.Quantize.Observer, c.Quantize.Force = "static", false, "minmax", true
	c.Calibration.Path, c.Calibration.Limit = f.Path(f.Calib.Inputs[0].File), 16
	c.Validation.MinCosine = 0.9999999
	c.Output.Overwrite = true
	return c
}

func TestOutputsAllOrNothing(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")

	t.Run("folder named report.md", func(t *testing.T) {
		out := t.TempDir()
		if _, err := Run(context.Background(), quickConfig(t, f, out), testOptions()); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(out, "report.md"))
		os.Mkdir(filepath.Join(out, "report.md"), 0o755)
		before := listing(t, out)
		_, err := Run(context.Background(), quickConfig(t, f, out), testOptions())
		wantClass(t, err, tserr.ErrBadInput, "report.md", "is a folder")
		sameListing(t, "after the refused run", before, listing(t, out))
	})

	t.Run("validation failure keeps the previous outputs", func(t *testing.T) {
		out := t.TempDir()
		if _, err := Run(context.Background(), quickConfig(t, f, out), testOptions()); err != nil {
			t.Fatal(err)
		}
		before := listing(t, out)
		rep, err := Run(context.Background(), failingConfig(t, f, out), testOptions())
		wantClass(t, err, tserr.ErrAccuracy, "validation")
		after := listing(t, out)
		for _, n := range []string{"digits.torchspeed.pt", "report.json", "report.md", "latency.png"} {
			if after[n] != before[n] {
				t.Errorf("%s changed by the failing run", n)
			}
		}
		for _, n := range []string{"report.failed.json", "report.failed.md"} {
			if _, ok := after[n]; !ok {
				t.Errorf("no %s: files %v", n, names(after))
			}
		}
		var back report.Report
		b, _ := os.ReadFile(filepath.Join(out, "report.failed.json"))
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Outcome != report.OutcomeValidationFailed || back.Artifact != nil || rep.Artifact != nil {
			t.Errorf("failed report: outcome %q, artifact %v", back.Outcome, back.Artifact)
		}
		md, _ := os.ReadFile(filepath.Join(out, "report.failed.md"))
		if !strings.Contains(string(md), "Do not deploy") || !strings.Contains(string(md), "No artifact was written") {
			t.Errorf("report.failed.md does not say so:\n%.600s", md)
		}
		// The next passing run retires the failed reports.
		if _, err := Run(context.Background(), quickConfig(t, f, out), testOptions()); err != nil {
			t.Fatal(err)
		}
		after = listing(t, out)
		if _, ok := after["report.failed.json"]; ok {
			t.Errorf("report.failed.json survived a passing run: %v", names(after))
		}
	})

	t.Run("another run wrote the artifact meanwhile", func(t *testing.T) {
		out := t.TempDir()
		cfg := quickConfig(t, f, out)
		cfg.Output.Overwrite = false
		art := filepath.Join(out, "digits.torchspeed.pt")
		opts := testOptions()
		opts.slow = func(meas, target string) time.Duration {
			if meas == "final" && target == "original" {
				os.WriteFile(art, []byte("the other run's artifact"), 0o644)
			}
			return 0
		}
		_, err := Run(context.Background(), cfg, opts)
		wantClass(t, err, tserr.ErrBadInput, "appeared while this run worked")
		if b, _ := os.ReadFile(art); string(b) != "the other run's artifact" {
			t.Errorf("the other run's artifact was replaced")
		}
		if got := names(listing(t, out)); len(got) != 1 {
			t.Errorf("files left: %v", got)
		}
	})

	t.Run("stale staging of a dead run is cleaned", func(t *testing.T) {
		out := t.TempDir()
		dead := filepath.Join(out, stagingPrefix+"999999999-1")
		live := filepath.Join(out, stagingPrefix+"1-2") // pid 1 is alive
		for _, d := range []string{dead, live} {
			os.MkdirAll(filepath.Join(d, replacedDir), 0o755)
			os.WriteFile(filepath.Join(d, "x.pt"), []byte("x"), 0o644)
		}
		// The dead run was killed after moving an earlier run's file aside: it comes back.
		os.WriteFile(filepath.Join(dead, replacedDir, "notes.txt"), []byte("earlier"), 0o644)
		if _, err := Run(context.Background(), quickConfig(t, f, out), testOptions()); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(out, "notes.txt")); string(b) != "earlier" {
			t.Errorf("file moved aside by the dead run not restored: %q, %v", b, err)
		}
		if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dead run's staging folder kept: %v", err)
		}
		if _, err := os.Stat(live); err != nil {
			t.Errorf("live run's staging folder removed: %v", err)
		}
	})

	t.Run("failed run leaves no new folder", func(t *testing.T) {
		root := t.TempDir()
		cfg := quickConfig(t, f, filepath.Join(root, "new", "sub"))
		cfg.Model.Inputs[0].Shape = []int64{1, 3, 8, 8}
		_, err := Run(context.Background(), cfg, testOptions())
		if err == nil {
			t.Fatal("no error")
		}
		if got := names(listing(t, root)); len(got) != 0 {
			t.Errorf("left behind in %s: %v", root, got)
		}
	})

	t.Run("every file gets the umask mode", func(t *testing.T) {
		out := t.TempDir()
		if _, err := Run(context.Background(), quickConfig(t, f, out), testOptions()); err != nil {
			t.Fatal(err)
		}
		for n := range listing(t, out) {
			st, _ := os.Stat(filepath.Join(out, n))
			if st.Mode().Perm() != safefile.FileMode() {
				t.Errorf("%s: mode %v, want %v", n, st.Mode().Perm(), safefile.FileMode())
			}
		}
	})

	t.Run("model.name with a path separator", func(t *testing.T) {
		dir := t.TempDir()
		model := filepath.Join(dir, "digits.pt")
		b, _ := os.ReadFile(f.ModelPath())
		os.WriteFile(model, b, 0o644)
		cfg := quickConfig(t, f, filepath.Join(dir, "out"))
		cfg.Model.Path, cfg.Model.Name = model, "../digits"
		_, err := Run(context.Background(), cfg, testOptions())
		wantClass(t, err, tserr.ErrBadInput, "model.name", "path separators")
		if got, _ := os.ReadFile(model); string(got) != string(b) {
			t.Error("input model changed")
		}
		if _, err := os.Stat(filepath.Join(dir, "out")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("output folder created: %v", err)
		}
	})
}

// The reports of a passing and of a failing run match docs/schema/report.schema.json (every
// other test's reports are checked too, through testOptions).
func TestReportsMatchSchema(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	out := t.TempDir()
	if _, err := Run(context.Background(), quickConfig(t, f, out), testOptions()); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), failingConfig(t, f, out), testOptions()); err == nil {
		t.Fatal("the failing config passed")
	}
	for _, n := range []string{"report.json", "report.failed.json"} {
		if err := schemacheck.CheckFile("report.schema.json", filepath.Join(out, n)); err != nil {
			t.Error(err)
		}
	}
	// The schema is strict enough to catch a mistyped report.
	if err := schemacheck.Check("report.schema.json", []byte(`{"schema_version": 1, "stages": [{"name": "x", "speedup": "2x"}]}`)); err == nil {
		t.Error("a report with a string speedup and missing keys matched the schema")
	}
}
