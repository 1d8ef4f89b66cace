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
)

func init() { extraCommands = append(extraCommands, newConfigCmd) }

func newConfigCmd() *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Work with torchspeed config files"}
	var model, out string
	var force bool
	initCmd := &cobra.Command{
		Use:   "init -m MODEL [-o config.yaml]",
		Short: "Write a starter config for a model, with its detected inputs",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if model == "" {
				return usageErrorf("config init: --model is required")
			}
			m, err := torch.Load(model)
			if err != nil {
				return err
			}
			defer m.Close()
			inputs, err := detectInputs(m)
			if err != nil {
				return err
			}
			body := starterConfig(model, out, inputs)
			if out == "" || out == "-" {
				_, err := c.OutOrStdout().Write(body)
				return err
			}
			if _, err := os.Stat(out); err == nil && !force {
				return usageErrorf("config init: %s exists: remove it or pass --force", out)
			}
			tmp := out + ".tmp"
			if err := os.WriteFile(tmp, body, 0o644); err != nil {
				return err
			}
			if err := os.Rename(tmp, out); err != nil {
				os.Remove(tmp)
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "wrote %s\n", out)
			return nil
		},
	}
	initCmd.Flags().StringVarP(&model, "model", "m", "", "TorchScript model")
	initCmd.Flags().StringVarP(&out, "out", "o", "", "file to write (default: stdout)")
	initCmd.Flags().BoolVar(&force, "force", false, "overwrite an existing file")
	c.AddCommand(initCmd)
	return c
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
