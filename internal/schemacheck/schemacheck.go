// Package schemacheck validates torchspeed's JSON outputs (report.json, bench.json) against
// the JSON Schemas in docs/schema, for tests: every report a test writes must match the
// documented schema.
package schemacheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var (
	mu       sync.Mutex
	compiled = map[string]*jsonschema.Schema{}
)

// Dir is docs/schema in the source tree this package was built from.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "docs", "schema")
}

// Check validates doc against docs/schema/<name> (e.g. "report.schema.json").
func Check(name string, doc []byte) error {
	s, err := schema(name)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("does not match %s: %w", name, err)
	}
	return nil
}

// CheckFile validates the JSON file at path against docs/schema/<name>.
func CheckFile(name, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := Check(name, b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func schema(name string) (*jsonschema.Schema, error) {
	mu.Lock()
	defer mu.Unlock()
	if s, ok := compiled[name]; ok {
		return s, nil
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	s, err := c.Compile(filepath.Join(Dir(), name))
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	compiled[name] = s
	return s, nil
}
