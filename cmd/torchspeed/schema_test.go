package main

import (
	"io/fs"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/torchspeed/torchspeed/internal/schemacheck"
)

var (
	reportsMu      sync.Mutex
	reportsChecked = map[testing.TB]bool{}
)

// reportSchemas names the documented schema of each JSON report the commands write.
var reportSchemas = map[string]string{"report.json": "report.schema.json", "bench.json": "bench.schema.json"}

// checkWrittenReports makes t validate, when it ends, every report.json and bench.json written
// under its temporary folders against docs/schema. Its cleanup is registered after t.TempDir's
// own (cleanups run last-in first-out), so it reads the files before they are removed. The CLI
// runners call it, so every test that runs a command is covered.
func checkWrittenReports(t testing.TB) {
	root := filepath.Dir(t.TempDir())
	reportsMu.Lock()
	seen := reportsChecked[t]
	reportsChecked[t] = true
	reportsMu.Unlock()
	if seen {
		return
	}
	t.Cleanup(func() {
		reportsMu.Lock()
		delete(reportsChecked, t)
		reportsMu.Unlock()
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if schema, ok := reportSchemas[d.Name()]; ok {
				if err := schemacheck.CheckFile(schema, p); err != nil {
					t.Errorf("written report does not match the documented schema: %v", err)
				}
			}
			return nil
		})
	})
}

// checkStdoutReport validates a report printed with --json (bench's bench.json, optimize's
// report.json) against its schema; other commands' --json output is not a report.
func checkStdoutReport(t testing.TB, args []string, stdout string) {
	t.Helper()
	if len(args) == 0 || !slices.Contains(args, "--json") || stdout == "" {
		return
	}
	schema := map[string]string{"bench": "bench.schema.json", "optimize": "report.schema.json"}[args[0]]
	if schema == "" {
		return
	}
	if err := schemacheck.Check(schema, []byte(stdout)); err != nil {
		t.Errorf("%s --json output does not match the documented schema: %v", args[0], err)
	}
}
