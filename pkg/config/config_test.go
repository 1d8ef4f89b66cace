package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

const good = `
model:
  path: model.pt
  inputs:
    - name: x
      shape: [1, 3, 224, 224]
      dtype: float32
optimize:
  channels_last: "false"
runtime:
  threads: 2
`

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// withCPUs makes n CPUs available to the checks for the rest of the test.
func withCPUs(t *testing.T, n int) {
	old := AvailableCPUs
	AvailableCPUs = func() int { return n }
	t.Cleanup(func() { AvailableCPUs = old })
}

func TestLoadGoodAndPrecedence(t *testing.T) {
	withCPUs(t, 8)
	p := write(t, good)
	c, err := Load(p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Runtime.Threads != 2 || c.Optimize.ChannelsLast != Off || c.Optimize.OptimizeForInference != Auto {
		t.Fatalf("values: %+v %+v", c.Runtime, c.Optimize)
	}
	if c.Model.Path != filepath.Join(filepath.Dir(p), "model.pt") {
		t.Fatalf("model path not relative to the file: %s", c.Model.Path)
	}
	if c.Bench.Runs != 200 {
		t.Fatalf("default bench.runs lost: %d", c.Bench.Runs)
	}

	// env beats the file.
	t.Setenv("TORCHSPEED_RUNTIME_THREADS", "1")
	t.Setenv("TORCHSPEED_QUANTIZE_OBSERVER", "minmax")
	c, err = Load(p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Runtime.Threads != 1 || c.Quantize.Observer != "minmax" {
		t.Fatalf("env did not override: threads %d observer %s", c.Runtime.Threads, c.Quantize.Observer)
	}

	// A flag left at its default does not beat env; a flag the user set beats everything.
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.Int("threads", 0, "")
	c, err = Load(p, fs, map[string]string{"threads": "runtime.threads"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Runtime.Threads != 1 {
		t.Fatalf("unset flag overrode env: %d", c.Runtime.Threads)
	}
	if err := fs.Parse([]string{"--threads", "3"}); err != nil {
		t.Fatal(err)
	}
	c, err = Load(p, fs, map[string]string{"threads": "runtime.threads"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Runtime.Threads != 3 {
		t.Fatalf("set flag did not win: %d", c.Runtime.Threads)
	}

	// Paths typed on the command line or in a variable are the user's, relative to the
	// working folder; only the file's own are relative to the file.
	fs = pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("model", "", "")
	if err := fs.Parse([]string{"--model", "here/m.pt"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TORCHSPEED_OUTPUT_DIR", "out/run1")
	c, err = Load(p, fs, map[string]string{"model": "model.path"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Model.Path != "here/m.pt" || c.Output.Dir != "out/run1" {
		t.Fatalf("typed paths rebased onto the config's folder: model %q, output %q", c.Model.Path, c.Output.Dir)
	}
}

func TestLoadBadConfigs(t *testing.T) {
	withCPUs(t, 8)
	oldMem := AvailableMemory
	AvailableMemory = func() (int64, string) { return 16 << 30, "test" }
	t.Cleanup(func() { AvailableMemory = oldMem })
	cases := []struct {
		name, body string
		want       []string
	}{
		{"typo key", strings.Replace(good, "threads: 2", "thraeds: 2", 1), []string{"thraeds", "invalid keys"}},
		{"typo section", good + "optimise:\n  freeze: true\n", []string{"optimise"}},
		{"wrong type", strings.Replace(good, "threads: 2", "threads: many", 1), []string{"threads", "many"}},
		{"bad toggle", strings.Replace(good, `channels_last: "false"`, "channels_last: sometimes", 1), []string{"optimize.channels_last", "sometimes", "auto, true or false"}},
		{"bad fast_linear", strings.Replace(good, `channels_last: "false"`, "channels_last: \"false\"\n  fast_linear: maybe", 1), []string{"optimize.fast_linear", "maybe", "auto, true or false"}},
		{"bad fast_conv", strings.Replace(good, `channels_last: "false"`, "channels_last: \"false\"\n  fast_conv: often", 1), []string{"optimize.fast_conv", "often", "auto, true or false"}},
		{"bad dtype", strings.Replace(good, "dtype: float32", "dtype: complex64", 1), []string{"model.inputs[0].dtype", "complex64"}},
		{"zero dim", strings.Replace(good, "[1, 3, 224, 224]", "[0, 3, 224, 224]", 1), []string{"model.inputs[0].shape", ">= 1"}},
		{"no inputs", "model:\n  path: m.pt\n", []string{"model.inputs: missing"}},
		{"bad mode", good + "quantize:\n  mode: int4\n", []string{"quantize.mode", "int4"}},
		{"static without data", good + "quantize:\n  mode: static\n", []string{"calibration", "calibration.path"}},
		{"negative threads", strings.Replace(good, "threads: 2", "threads: -2", 1), []string{"runtime.threads", "-2"}},
		{"bad yaml", "model: [unclosed\n", []string{"not valid YAML"}},
		{"bad duration", good + "bench:\n  duration: soon\n", []string{"duration", "soon"}},
		// Hostile sizes and counts: refused before anything is allocated or started.
		{"threads above CPUs", strings.Replace(good, "threads: 2", "threads: 100000", 1), []string{"runtime.threads: 100000 is not allowed", "1 to 8"}},
		{"fractional threads", strings.Replace(good, "threads: 2", "threads: 1.5", 1), []string{"runtime.threads", "1.5", "not a whole number"}},
		{"threads beyond int64", strings.Replace(good, "threads: 2", "threads: 99999999999999999999", 1), []string{"runtime.threads", "not a whole number"}},
		{"interop above CPUs", good + "  interop_threads: 9\n", []string{"runtime.interop_threads: 9 is not allowed"}},
		{"name with a folder", strings.Replace(good, "path: model.pt", "path: model.pt\n  name: x/digits", 1), []string{"model.name", "path separator"}},
		{"name dot-dot", strings.Replace(good, "path: model.pt", "path: model.pt\n  name: ..", 1), []string{"model.name", "not a file name"}},
		{"huge input", strings.Replace(good, "[1, 3, 224, 224]", "[1, 3, 100000, 100000]", 1), []string{"model.inputs", "model.inputs[0] (x) 1x3x100000x100000 float32", "is available"}},
		{"overflowing input", strings.Replace(good, "[1, 3, 224, 224]", "[4611686018427387904, 3, 1, 1]", 1), []string{"model.inputs[0] (x)", "more than 9223372036854775807 elements"}},
		{"int64 range too wide", strings.Replace(good, "dtype: float32", "dtype: int64\n      range: [-9223372036854775808, 9223372036854775807]", 1), []string{"model.inputs[0].range", "width"}},
		{"int32 range outside int32", strings.Replace(good, "dtype: float32", "dtype: int32\n      range: [0, 4294967296]", 1), []string{"model.inputs[0].range", "for int32"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := write(t, c.body)
			_, err := Load(p, nil, nil)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none.yaml"), nil, nil); err == nil || !strings.Contains(err.Error(), "file not found") {
		t.Fatalf("missing file: %v", err)
	}
}

// Every toggle takes YAML's plain true and false, as the README writes them
// (optimize_for_inference: true), not only the quoted strings.
func TestTogglesTakeYAMLBooleans(t *testing.T) {
	withCPUs(t, 8)
	var keys []string // "section.key" of every Toggle field
	cfg := reflect.TypeOf(Config{})
	for i := 0; i < cfg.NumField(); i++ {
		sec := cfg.Field(i)
		if sec.Type.Kind() != reflect.Struct {
			continue
		}
		for j := 0; j < sec.Type.NumField(); j++ {
			if f := sec.Type.Field(j); f.Type == reflect.TypeOf(Toggle("")) {
				keys = append(keys, tagName(sec)+"."+tagName(f))
			}
		}
	}
	if len(keys) < 8 {
		t.Fatalf("found only the toggles %v", keys)
	}
	for _, val := range []Toggle{On, Off} {
		sections := map[string][]string{}
		var order []string
		for _, k := range keys {
			sec, key, _ := strings.Cut(k, ".")
			if sections[sec] == nil {
				order = append(order, sec)
			}
			sections[sec] = append(sections[sec], "  "+key+": "+string(val)) // unquoted: a YAML bool
		}
		body := strings.Replace(good, "optimize:\n  channels_last: \"false\"\n", "", 1)
		for _, sec := range order {
			body += sec + ":\n" + strings.Join(sections[sec], "\n") + "\n"
		}
		if sections["runtime"] != nil { // good has a runtime section of its own
			body = strings.Replace(body, "runtime:\n  threads: 2\n", "", 1)
			body = strings.Replace(body, "runtime:\n", "runtime:\n  threads: 2\n", 1)
		}
		c, err := Load(write(t, body), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v\n%s", val, err, body)
		}
		v := reflect.ValueOf(*c)
		for _, k := range keys {
			sec, key, _ := strings.Cut(k, ".")
			if got := fieldByTag(fieldByTag(v, sec), key).Interface().(Toggle); got != val {
				t.Errorf("%s: %s, want %s", k, got, val)
			}
		}
	}
}

func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
	return name
}

func fieldByTag(v reflect.Value, name string) reflect.Value {
	for i := 0; i < v.NumField(); i++ {
		if tagName(v.Type().Field(i)) == name {
			return v.Field(i)
		}
	}
	panic("no field " + name)
}

// The example configs in configs/ must load (their model paths need not exist).
func TestExampleConfigsLoad(t *testing.T) {
	files, _ := filepath.Glob("../../configs/*.yaml")
	if len(files) < 3 {
		t.Fatalf("expected at least 3 example configs, found %v", files)
	}
	for _, f := range files {
		if _, err := Load(f, nil, nil); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
