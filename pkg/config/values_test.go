package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTypedInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write(`model:
  path: m.pt
  method: forward
  reset_method: reset_states
  preserve_methods: [stats]
  inputs:
    - {name: x, shape: [1, 512], dtype: float32}
    - {name: sr, type: int, value: 16000}
    - {name: h, shape: [2, 1, 64], batch_dim: none}
    - {name: w, type: "Optional[float]"}
    - {name: ks, type: "List[int]", value: [1, 2, 3]}
    - {name: y, data: "seq:chunks.npy", batch_dim: 1}
`)
	c, err := Load(good, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := c.Model.Inputs
	if c.Model.ResetMethod != "reset_states" || len(c.Model.PreserveMethods) != 1 {
		t.Errorf("model keys: %+v", c.Model)
	}
	if d, ok := in[0].Batch(); !ok || d != 0 {
		t.Errorf("x batch = %d %v, want 0 true", d, ok)
	}
	if _, ok := in[1].Batch(); ok || in[1].IsTensor() {
		t.Errorf("sr: a constant has no batch dimension")
	}
	if _, ok := in[2].Batch(); ok {
		t.Errorf("h: batch_dim none")
	}
	if d, ok := in[5].Batch(); !ok || d != 1 {
		t.Errorf("y batch = %d %v, want 1 true", d, ok)
	}
	if v, ok := in[1].Value.(int); !ok || v != 16000 {
		t.Errorf("sr value = %#v", in[1].Value)
	}

	for _, tc := range []struct{ input, want string }{
		{`{name: sr, type: int, value: 1.5}`, "sr"},
		{`{name: sr, type: int, value: "16k"}`, "not a int"},
		{`{name: sr, type: int}`, "needs a value"},
		{`{name: f, type: bool, value: 3}`, "not a bool"},
		{`{name: l, type: "List[int]", value: [1, x]}`, "item 1"},
		{`{name: q, type: "Dict[int, str]", value: 1}`, "not one torchspeed passes"},
		{`{name: sr, type: int, value: 1, shape: [1]}`, "shape and data are for tensors"},
		{`{name: x, shape: [1, 3], batch_dim: 2}`, "batch_dim"},
		{`{name: x, shape: [1, 3], batch_dim: first}`, "batch_dim"},
		{`{name: x, shape: [1, 3], value: 4}`, ".value"},
	} {
		_, err := Load(write("model:\n  path: m.pt\n  inputs:\n    - "+tc.input+"\n"), nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.input, err, tc.want)
		}
	}
}
