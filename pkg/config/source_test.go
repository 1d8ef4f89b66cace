package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSource(t *testing.T) {
	for _, tc := range []struct {
		text string
		want Source
	}{
		{"x.npy", Source{Kind: SourceFile, Path: "x.npy"}},
		{"d/x.npz", Source{Kind: SourceFile, Path: "d/x.npz"}},
		{"x.npz:h0", Source{Kind: SourceFile, Path: "x.npz", Member: "h0"}},
		{"seq:c.npy", Source{Kind: SourceFile, Path: "c.npy", Seq: true}},
		{"seq:c.npz:x", Source{Kind: SourceFile, Path: "c.npz", Member: "x", Seq: true}},
		{"int:16000", Source{Kind: SourceInt, Int: 16000}},
		{"int:-3", Source{Kind: SourceInt, Int: -3}},
		{"float:0.25", Source{Kind: SourceFloat, Float: 0.25}},
		{"float:2", Source{Kind: SourceFloat, Float: 2}},
		{"bool:true", Source{Kind: SourceBool, Bool: true}},
		{"bool:False", Source{Kind: SourceBool}},
		{"str:a,b:c", Source{Kind: SourceStr, Str: "a,b:c"}},
		{"str:", Source{Kind: SourceStr}},
		{"none", Source{Kind: SourceNone}},
	} {
		got, err := ParseSource(tc.text)
		tc.want.Text = tc.text
		if err != nil || got.Kind != tc.want.Kind || got.Path != tc.want.Path || got.Member != tc.want.Member || got.Seq != tc.want.Seq ||
			got.Int != tc.want.Int || got.Float != tc.want.Float || got.Bool != tc.want.Bool || got.Str != tc.want.Str {
			t.Errorf("ParseSource(%q) = %+v, %v; want %+v", tc.text, got, err, tc.want)
		}
		if err == nil && got.Kind == SourceFile && got.String() != tc.text {
			t.Errorf("%q written back as %q", tc.text, got.String())
		}
	}
	l, err := ParseSource("a.npy, seq:b.npy")
	if err != nil || l.Kind != SourceList || len(l.Items) != 2 || !l.Items[1].Seq || l.String() != "a.npy,seq:b.npy" {
		t.Errorf("list: %+v %v", l, err)
	}
	if r := l.Rebase("/cfg"); r.Items[0].Path != "/cfg/a.npy" || r.String() != "/cfg/a.npy,seq:/cfg/b.npy" {
		t.Errorf("rebased list: %+v", r)
	}
	for _, bad := range []struct{ text, want string }{
		{"int:1.5", "whole number"}, {"int:", "whole number"}, {"float:x", "not a number"}, {"bool:yes", "bool:true"},
		{"16000", "int:N"}, {"x.txt", "seq:CHUNKS.npy"}, {"x.npz:", "name the member"}, {"a.npy,int:3", "list items"},
	} {
		if _, err := ParseSource(bad.text); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseSource(%q): %v, want it to mention %q", bad.text, err, bad.want)
		}
	}
}

func TestSplitInput(t *testing.T) {
	for _, tc := range []struct{ in, name, value string }{
		{"x.npy", "", "x.npy"}, {"sr=int:16000", "sr", "int:16000"}, {"x=seq:a=b.npy", "x", "seq:a=b.npy"},
		{"dir/a=b.npy", "", "dir/a=b.npy"}, {"_h0=none", "_h0", "none"}, {"int:3", "", "int:3"},
	} {
		if n, v := SplitInput(tc.in); n != tc.name || v != tc.value {
			t.Errorf("SplitInput(%q) = %q, %q; want %q, %q", tc.in, n, v, tc.name, tc.value)
		}
	}
}

// A config's data goes through the same parser, relative to the config file.
func TestConfigInputData(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	write := func(inputs string) error {
		if err := os.WriteFile(p, []byte("model:\n  path: m.pt\n  inputs:\n"+inputs), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(p, nil, nil)
		return err
	}
	if err := write("    - {name: x, data: \"seq:d/c.npy\"}\n    - {name: e, type: \"List[Tensor]\", data: \"a.npy,b.npy\"}\n    - {name: m, type: \"Optional[Tensor]\"}\n"); err != nil {
		t.Fatal(err)
	}
	c, _ := Load(p, nil, nil)
	if got := c.Model.Inputs[0].Data; got != "seq:"+filepath.Join(dir, "d/c.npy") {
		t.Errorf("data relative to the config: %q", got)
	}
	for _, tc := range []struct{ inputs, want string }{
		{"    - {name: x, data: \"int:3\"}\n", "not a data file"},
		{"    - {name: x, data: \"x.csv\"}\n", "x.csv"},
		{"    - {name: x, data: \"a.npy,b.npy\"}\n", "only a List or Tuple"},
		{"    - {name: m, type: \"Optional[Tensor]\", value: 3}\n", "takes data"},
	} {
		if err := write(tc.inputs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to mention %q", tc.inputs, err, tc.want)
		}
	}
}
