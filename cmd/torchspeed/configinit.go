package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/config"
)

func newConfigCmd(u *ui) *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Work with torchspeed config files"}
	ci := &configInit{ui: u}
	initCmd := &cobra.Command{
		Use:   "init -m MODEL [--input-shape 1x3x224x224]... [-o config.yaml]",
		Short: "Write a starter config for a model, with its detected inputs",
		Long: `config init reads the model's forward arguments from its graph (traced models record shapes
and dtypes; scripted ones only names) and writes a config to edit. --input-shape gives the
shapes a scripted model does not record.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return ci.run(c) },
	}
	f := initCmd.Flags()
	f.StringVarP(&ci.model, "model", "m", "", "TorchScript model")
	f.StringArrayVar(&ci.shapes, "input-shape", nil, "shape of each input, e.g. 1x3x224x224 (repeat for several inputs, in forward's order)")
	f.StringVarP(&ci.out, "output", "o", "", "file to write (default: stdout)")
	f.BoolVar(&ci.force, "force", false, "overwrite an existing file")
	f.SetNormalizeFunc(outAlias)
	c.AddCommand(initCmd)
	return c
}

type configInit struct {
	ui     *ui
	model  string
	shapes []string
	out    string
	force  bool
}

func (ci *configInit) run(c *cobra.Command) error {
	if ci.model == "" {
		return exitcode.Usagef("config init: --model is required")
	}
	toFile := ci.out != "" && ci.out != "-"
	if toFile && !ci.force {
		if _, err := os.Lstat(ci.out); err == nil {
			return exitcode.Usagef("config init: %s exists: remove it or pass --force", ci.out)
		}
	}
	var shapes [][]int64
	var checks []config.InputSpec
	for i, s := range ci.shapes {
		shape, err := config.ParseShape(s)
		if err != nil {
			return exitcode.Usagef("config init: --input-shape %q: %v", s, err)
		}
		shapes = append(shapes, shape)
		checks = append(checks, config.InputSpec{Name: fmt.Sprintf("input %d (%s)", i, s), Shape: shape})
	}
	if err := config.CheckInputs("config init: --input-shape", checks); err != nil {
		return exitcode.New(exitcode.Usage, err)
	}
	if _, err := os.Stat(ci.model); err != nil {
		return exitcode.Usagef("config init: model %q: %v", ci.model, err)
	}
	m, err := torch.Load(ci.model)
	if err != nil {
		return err
	}
	defer m.Close()
	inputs, err := detectInputs(m)
	if err != nil && len(shapes) == 0 {
		return err
	}
	if len(shapes) > 0 {
		if inputs, err = withShapes(inputs, err, shapes); err != nil {
			return err
		}
	}
	body := starterConfig(ci.model, ci.out, inputs)
	if !toFile {
		_, err := c.OutOrStdout().Write(body)
		return err
	}
	// An O_EXCL temp file beside the target, renamed over it: a link planted at a
	// predictable name cannot redirect the write.
	if err := safefile.WriteFile(ci.out, body); err != nil {
		return fmt.Errorf("config init: %w", err)
	}
	fmt.Fprintf(ci.ui.logOrDiscard(c.ErrOrStderr()), "wrote %s\n", ci.out)
	return nil
}

// withShapes puts the --input-shape shapes on the detected inputs (names and dtypes from the
// graph), or on inputs named input0, input1, ... when the graph did not give them all.
func withShapes(detected []detectedInput, detectErr error, shapes [][]int64) ([]detectedInput, error) {
	if detectErr == nil && len(detected) != len(shapes) {
		return nil, exitcode.Usagef("config init: %d --input-shape values for the model's %d inputs; give one per input, in forward's order", len(shapes), len(detected))
	}
	out := make([]detectedInput, len(shapes))
	for i, sh := range shapes {
		in := detectedInput{name: fmt.Sprintf("input%d", i), dtype: "float32"}
		if detectErr == nil {
			in = detected[i]
		}
		in.shape = strings.Split(config.FormatShape(sh), "x")
		out[i] = in
	}
	return out, nil
}

type detectedInput struct {
	name  string
	dtype string
	shape []string // empty: unknown
}

// graphInput matches a graph input with a complete type, as tracing records it:
// "%x : Float(1, 3, 224, 224, strides=[...], ...)" or "%tokens.1 : Long(1, 20, ...)".
var graphInput = regexp.MustCompile(`%([A-Za-z_][A-Za-z0-9_]*)(?:\.\d+)? : (Float|Double|Long|Int|Byte|Bool|Tensor)(?:\(([^)]*)\))?`)

// detectInputs reads forward's arguments from its graph: traced models carry shapes and
// dtypes; scripted ones only names (their shapes are left for the user to fill in).
func detectInputs(m *torch.Module) ([]detectedInput, error) {
	g, err := m.Graph()
	if err != nil {
		return nil, err
	}
	header := g
	if i := strings.Index(g, "):"); i >= 0 {
		header = g[:i]
	}
	dtypes := map[string]string{"Float": "float32", "Double": "float64", "Long": "int64", "Int": "int32", "Byte": "uint8", "Bool": "bool", "Tensor": "float32"}
	var out []detectedInput
	for i, mm := range graphInput.FindAllStringSubmatch(header, -1) {
		if i == 0 && strings.HasPrefix(mm[1], "self") {
			continue
		}
		in := detectedInput{name: mm[1], dtype: dtypes[mm[2]]}
		for _, part := range strings.Split(mm[3], ",") {
			part = strings.TrimSpace(part)
			if part == "" || strings.Contains(part, "=") {
				break
			}
			in.shape = append(in.shape, part)
		}
		out = append(out, in)
	}
	if n := m.NumInputs(); n >= 0 && len(out) != n {
		return nil, fmt.Errorf("config init: found %d of the model's %d inputs in its graph; write model.inputs by hand (see configs/)", len(out), n)
	}
	return out, nil
}

func starterConfig(model, out string, inputs []detectedInput) []byte {
	var b bytes.Buffer
	path := model
	if out != "" && out != "-" {
		absModel, _ := filepath.Abs(model)
		absOut, _ := filepath.Abs(out)
		if rel, err := filepath.Rel(filepath.Dir(absOut), absModel); err == nil {
			path = rel
		}
	}
	fmt.Fprintf(&b, "# torchspeed config for %s (torchspeed config init). Paths are relative to this file.\n", filepath.Base(model))
	fmt.Fprintf(&b, "model:\n  path: %s\n  inputs:\n", path)
	for _, in := range inputs {
		shape := "[1]   # TODO: the full shape, batch first (a TorchScript file does not record input shapes)"
		if len(in.shape) > 0 {
			shape = "[" + strings.Join(in.shape, ", ") + "]"
		}
		fmt.Fprintf(&b, "    - name: %s\n      shape: %s\n      dtype: %s   # check: int64 for token ids\n", in.name, shape, in.dtype)
	}
	b.WriteString(`
optimize:
  freeze: true
  fold_bn: true
  optimize_for_inference: auto   # keep it only if measured faster here
  channels_last: auto

quantize:
  mode: none                     # none | static | dynamic | auto
  engine: auto
  observer: histogram
  per_channel: true
  fallback: true

# calibration:                   # needed for mode: static
#   path: calib.npy              # N x ... per input, or an image folder (kind: images)
#   limit: 256

validation:
  min_cosine: 0.99
  min_top1_agreement: 0.98

runtime:
  threads: 0                     # 0: measure
  mode: latency

bench:
  runs: 200

output:
  dir: out
`)
	return b.Bytes()
}
