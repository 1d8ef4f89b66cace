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

// CheckCRD validates a Kubernetes object (JSON) against a CRD's openAPIV3Schema kept in
// docs/schema (e.g. "kserve/kserve-servingruntimes-v1alpha1.schema.json") as the API server
// does with strict field validation (kubectl's default since 1.27 warns, --validate=strict
// refuses): a field the schema does not list is an error, where JSON Schema alone would let it
// through and the API server would drop it silently.
func CheckCRD(name string, doc []byte) error {
	mu.Lock()
	s, ok := compiled["crd:"+name]
	mu.Unlock()
	if !ok {
		raw, err := os.ReadFile(filepath.Join(Dir(), name))
		if err != nil {
			return fmt.Errorf("schema %s: %w", name, err)
		}
		sch, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("schema %s: %w", name, err)
		}
		strictFields(sch)
		c := jsonschema.NewCompiler()
		url := filepath.Join(Dir(), name)
		if err := c.AddResource(url, sch); err != nil {
			return fmt.Errorf("schema %s: %w", name, err)
		}
		if s, err = c.Compile(url); err != nil {
			return fmt.Errorf("schema %s: %w", name, err)
		}
		mu.Lock()
		compiled["crd:"+name] = s
		mu.Unlock()
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := s.Validate(v); err != nil {
		// %#v lists every failing field, where Error() names only the schema.
		return fmt.Errorf("does not match %s: %#v", name, err)
	}
	return nil
}

// strictFields closes every object schema that lists its properties, unless it keeps unknown
// fields (x-kubernetes-preserve-unknown-fields) or says what other properties may hold.
func strictFields(v any) {
	switch n := v.(type) {
	case map[string]any:
		_, props := n["properties"]
		_, extra := n["additionalProperties"]
		if props && !extra && n["x-kubernetes-preserve-unknown-fields"] != true {
			n["additionalProperties"] = false
		}
		for _, c := range n {
			strictFields(c)
		}
	case []any:
		for _, c := range n {
			strictFields(c)
		}
	}
}
