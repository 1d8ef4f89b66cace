package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad checks that no config text makes Load's decoding (loadValues) panic, hang or grow
// without bound (YAML anchors, deep nesting, huge numbers), and that a config it accepts is one
// Validate accepts and that loads again to the same values.
//
//	go test ./pkg/config -run '^$' -fuzz FuzzLoad -fuzztime 60s
func FuzzLoad(f *testing.F) {
	examples, _ := filepath.Glob(filepath.Join("..", "..", "configs", "*.yaml"))
	for _, p := range examples {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(good))
	f.Add([]byte("model: &a\n  path: m.pt\n  inputs: [{name: x, shape: [1, 2]}]\nbench: *a\n"))
	f.Add([]byte("runtime:\n  threads: 99999999999999999999\n"))
	// Decoded from memory, so that no input touches the file system; the name only places
	// relative paths.
	p := filepath.Join(f.TempDir(), "c.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		// Load reads TORCHSPEED_* variables too: the fuzzer's environment must not decide.
		for _, kv := range os.Environ() {
			if len(kv) > len(EnvPrefix) && kv[:len(EnvPrefix)+1] == EnvPrefix+"_" {
				t.Skip("TORCHSPEED_* variables set")
			}
		}
		c, err := loadValues(p, data, nil, nil, true)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load accepted a config Validate refuses: %v", err)
		}
		again, err := loadValues(p, data, nil, nil, true)
		if err != nil || again.Model.Path != c.Model.Path || len(again.Model.Inputs) != len(c.Model.Inputs) {
			t.Fatalf("a second load differs: %v", err)
		}
	})
}
