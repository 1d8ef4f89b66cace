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
		Use:   "init -m MODEL [--input [NAME=]VALUE]... [--input-shape S]... [-o FILE]",
		Short: "Write a starter config for a model, with every argument of its method and its state",
		Long: `config init reads the arguments of the model's method (forward, or --method) from its schema,
each with its declared type (Tensor, int, float, bool, str, Optional, List, Tuple, Dict),
and writes a config to edit: tensors with the shapes and dtypes a traced graph records,
constants with their schema default, and a TODO only where a value is truly unknown.
--input (as run takes it: x=seq:chunks.npy, sr=int:16000, ...) and --input-shape fill in
what the model does not record. A model whose method assigns attributes is marked stateful
(the attributes in a comment) with its reset method.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return ci.run(c) },
	}
	f := initCmd.Flags()
	f.StringVarP(&ci.model, "model", "m", "", "TorchScript model")
	f.StringArrayVar(&ci.shapes, "input-shape", nil, "shape of each tensor argument, e.g. 1x3x224x224 (repeat for several, in order)")
	f.StringArrayVar(&ci.values, "input", nil, "an argument's value as run takes it ([NAME=]FILE.npy, seq:CHUNKS.npy, int:N, ...), written into the config")
	f.StringVar(&ci.method, "method", "forward", "method whose arguments to write")
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
	values []string
	method string
	out    string
	force  bool
}

func (ci *configInit) run(c *cobra.Command) error {
	if ci.model == "" {
		return exitcode.Usagef("config init: --model is required")
	}
	toFile := ci.out != "" && ci.out != "-"
	if toFile {
		// --force replaces an earlier config, never the model or data it describes.
		if err := checkNotInput("config init", named("-o", ci.out), append(named("the model", ci.model), valueFiles(ci.values, nil)...)); err != nil {
			return err
		}
	}
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
	if err := safefile.CheckInputFile(ci.model); err != nil {
		return exitcode.Usagef("config init: model: %v", err)
	}
	m, err := torch.Load(ci.model)
	if err != nil {
		return err
	}
	defer m.Close()
	args, err := ci.describe(m, shapes)
	if err != nil {
		return err
	}
	body := starterConfig(ci.model, ci.out, args)
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

type detectedInput struct {
	name  string
	dtype string
	shape []string // empty: unknown
}

// graphInput matches a graph input with a complete type, as tracing records it:
// "%x : Float(1, 3, 224, 224, strides=[...], ...)" or "%tokens.1 : Long(1, 20, ...)".
var graphInput = regexp.MustCompile(`%([A-Za-z_][A-Za-z0-9_]*)(?:\.\d+)? : (Float|Double|Long|Int|Byte|Bool|Tensor)(?:\(([^)]*)\))?`)

// detectInputs reads forward's arguments from its graph where it records complete types (a
// module traced in this process); a file saved by torch.jit.save, traced or scripted, loads
// with plain Tensor inputs on libtorch 1.13, and their shapes are left for the user to fill in.
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

func starterConfig(model, out string, args *initArgs) []byte {
	var b bytes.Buffer
	path := relTo(out, model)
	fmt.Fprintf(&b, "# torchspeed config for %s (torchspeed config init). Paths are relative to this file.\n", filepath.Base(model))
	fmt.Fprintf(&b, "model:\n  path: %s\n", path)
	args.write(&b, out)
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
