package callargs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/config"
)

// FromFlags reads `--input [NAME=]VALUE` flag values (flag names the flag in messages).
func FromFlags(flag string, values []string) ([]Given, error) {
	var out []Given
	for _, v := range values {
		name, text := config.SplitInput(v)
		src, err := config.ParseSource(text)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v", flag, v, err)
		}
		out = append(out, Given{Name: name, What: flag + " " + v, Src: src})
	}
	return out, nil
}

// FromConfig reads a config's model.inputs: data files, constants (value), and tensors of a
// shape and dtype without data (random data).
func FromConfig(inputs []config.Input) ([]Given, error) {
	var out []Given
	for i, in := range inputs {
		g := Given{Name: in.Name, What: fmt.Sprintf("model.inputs[%d] (%s)", i, in.Name), Type: in.Type, Shape: in.Shape, DType: in.DType}
		switch bd := in.BatchDim; {
		case strings.EqualFold(bd, "none"):
			none := -1
			g.BatchDim = &none
		case bd != "":
			d, err := strconv.Atoi(bd)
			if err != nil {
				return nil, fmt.Errorf("%s: batch_dim %q: want none or a dimension index", g.What, bd)
			}
			g.BatchDim = &d
		}
		switch {
		case in.Data != "":
			src, err := config.ParseSource(in.Data)
			if err != nil {
				return nil, fmt.Errorf("%s.data: %v", g.What, err)
			}
			g.Src = src
		case config.HoldsTensors(in.Type) && !in.IsTensor():
			if !strings.HasPrefix(in.Type, "Optional[") {
				return nil, fmt.Errorf("%s: a %s takes data (files separated by commas for a List or Tuple)", g.What, in.Type)
			}
			g.Src = config.Source{Kind: config.SourceNone, Text: "none"}
		case !in.IsTensor() || in.Value != nil:
			g.Value, g.HasValue = in.Value, true
		case len(in.Shape) > 0:
			g.Random = true
		default:
			return nil, fmt.Errorf("%s: give its shape (random data) or data (a file)", g.What)
		}
		out = append(out, g)
	}
	return out, nil
}

// Merge puts flag values over a config's: a named flag value replaces the config input of that
// name; positional flag values fill the arguments the config left out, in order.
func Merge(fromConfig, fromFlags []Given) []Given {
	named := map[string]bool{}
	for _, g := range fromFlags {
		if g.Name != "" {
			named[g.Name] = true
		}
	}
	var out []Given
	for _, g := range fromConfig {
		if !named[g.Name] {
			out = append(out, g)
		}
	}
	return append(out, fromFlags...)
}
