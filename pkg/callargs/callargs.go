// Package callargs turns what a user gives for a method's arguments (`--input [NAME=]VALUE`
// flags, a config's model.inputs, an artifact's manifest) into the TorchScript values of each
// call, checked against the method's schema: every argument by its declared type (Tensor, int,
// float, bool, str, None, Optional, List and Tuple of tensors, Dict[str, Tensor]), schema
// defaults for arguments left out, and `seq:` files replayed one slice per call, in order.
// run and bench use it, so a config input and a command-line input resolve to the same values.
//
// Every error is the caller's input that cannot be used (a missing argument, a value of the
// wrong type, a file whose shape does not fit): it names the argument, and the commands exit
// with their usage code for it.
package callargs

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// Given is one argument as the user gave it.
type Given struct {
	Name string // "" for a positional value
	What string // where it came from, for messages: "--input sr=int:16000", "model.inputs[1]"
	// Src is the value (Kind 0 when the argument is a constant or a random tensor).
	Src config.Source
	// Type is the TorchScript type the user declared ("" when not declared).
	Type string
	// Value is a constant from a config (JSON-like, as YAML decodes it).
	Value    any
	HasValue bool
	// Shape and DType: a random tensor's (Random), else the shape data must have (batch
	// dimension aside; nil: any).
	Shape  []int64
	DType  string
	Random bool
	// BatchDim is the tensor's batch dimension (nil: 0; negative: none).
	BatchDim *int
}

// Options adjust Build.
type Options struct {
	// Random makes a random tensor for a Given with Random set.
	Random func(shape []int64, dt torch.DType) (*torch.Tensor, error)
	// Manifest lists an artifact's arguments: constants (Value) for arguments not given.
	Manifest []torchspeed.InputSpec
}

// Plan is the arguments of every call of one method, ready to pass. Its values are shared by
// every caller (TorchScript values are immutable): do not close them; Close the Plan.
type Plan struct {
	Method string
	// Names are the arguments passed, in order (trailing defaults are left to the method).
	Names []string
	// Types are their declared types.
	Types []string
	calls int // length of the sequences; 0: no argument is a sequence
	rows  [][]*torch.Value
	owned []*torch.Value
}

// Calls is the number of calls the sequences hold (0 when no argument is a sequence).
func (p *Plan) Calls() int { return p.calls }

// Args are call i's arguments; past the end of the sequences they start over.
func (p *Plan) Args(i int) []*torch.Value { return p.rows[i%len(p.rows)] }

// Close frees the values.
func (p *Plan) Close() {
	torch.CloseValues(p.owned...)
	p.owned, p.rows = nil, nil
}

// Build matches given to the method's schema and makes every call's values. Named values go
// to their argument; positional ones fill the others in order.
func Build(schema *torch.MethodSchema, given []Given, opts Options) (p *Plan, err error) {
	b := &builder{plan: &Plan{Method: schema.Name}, opts: opts, files: map[string]*loaded{}}
	defer func() {
		if err != nil {
			b.plan.Close()
			p = nil
		}
	}()
	names := make([]string, len(schema.Arguments))
	for i, a := range schema.Arguments {
		names[i] = a.Name
	}
	byArg := make([]*Given, len(schema.Arguments))
	var positional []*Given
	for i := range given {
		g := &given[i]
		if g.Name == "" {
			positional = append(positional, g)
			continue
		}
		k := indexOf(names, g.Name)
		if k < 0 {
			return nil, fmt.Errorf("%s: %s has no argument %q (it takes %s)", g.What, schema.Name, g.Name, describe(schema))
		}
		if byArg[k] != nil {
			return nil, fmt.Errorf("%s: argument %s is given twice (also by %s)", g.What, g.Name, byArg[k].What)
		}
		byArg[k] = g
	}
	next := 0
	for k := range byArg {
		if byArg[k] == nil && next < len(positional) {
			byArg[k] = positional[next]
			next++
		}
	}
	if next < len(positional) {
		return nil, fmt.Errorf("%s: %d positional value(s) for %s, which takes %s", positional[next].What, len(positional), schema.Name, describe(schema))
	}
	// What each argument gets: a value per call, or nil for the schema default.
	vals := make([][]*torch.Value, len(schema.Arguments))
	last := -1
	for k, a := range schema.Arguments {
		g := byArg[k]
		if g == nil {
			if spec, ok := b.manifestConstant(a.Name); ok {
				g = &spec
			}
		}
		if g == nil {
			if !a.HasDefault {
				return nil, fmt.Errorf("missing argument %s (%s) of %s: give it with %s", a.Name, a.Type, schema.Name, hint(a))
			}
			continue
		}
		if vals[k], err = b.arg(a, g); err != nil {
			return nil, err
		}
		last = k
	}
	rows := max(b.plan.calls, 1)
	b.plan.rows = make([][]*torch.Value, rows)
	for k := 0; k <= last; k++ {
		a := schema.Arguments[k]
		v := vals[k]
		if v == nil { // a default before an argument that is given
			d, err := torchspeed.ConstantValue(torchspeed.InputSpec{Name: a.Name, Type: a.Type, Value: a.Default})
			if err != nil {
				return nil, fmt.Errorf("argument %s (%s): its default %s cannot be passed from here; give it with %s", a.Name, a.Type, a.Default, hint(a))
			}
			b.own(d)
			v = []*torch.Value{d}
		}
		b.plan.Names = append(b.plan.Names, a.Name)
		b.plan.Types = append(b.plan.Types, a.Type)
		for i := range b.plan.rows {
			b.plan.rows[i] = append(b.plan.rows[i], v[min(i, len(v)-1)])
		}
	}
	return b.plan, nil
}

// manifestConstant is the artifact's constant for an argument not given.
func (b *builder) manifestConstant(name string) (Given, bool) {
	for _, s := range b.opts.Manifest {
		if s.Name == name && len(s.Value) > 0 {
			var v any
			if json.Unmarshal(s.Value, &v) != nil {
				return Given{}, false
			}
			return Given{Name: name, What: "the artifact's manifest", Type: s.Type, Value: v, HasValue: true}, true
		}
	}
	return Given{}, false
}

func indexOf(names []string, n string) int {
	for i, s := range names {
		if s == n {
			return i
		}
	}
	return -1
}

// describe lists a method's arguments with their types.
func describe(s *torch.MethodSchema) string {
	parts := make([]string, len(s.Arguments))
	for i, a := range s.Arguments {
		parts[i] = a.Name + ": " + a.Type
		if a.HasDefault {
			parts[i] += " = " + string(a.Default)
		}
	}
	if len(parts) == 0 {
		return "no arguments"
	}
	return strings.Join(parts, ", ")
}

// hint says how to give an argument of a's type on the command line.
func hint(a torch.Argument) string {
	v := "FILE.npy (or seq:CHUNKS.npy)"
	switch a.Kind {
	case "int":
		v = "int:N"
	case "float", "number":
		v = "float:X"
	case "bool":
		v = "bool:true|false"
	case "str":
		v = "str:TEXT"
	case "none":
		v = "none"
	case "optional":
		v = "FILE.npy or none"
	case "list", "tuple":
		v = "A.npy,B.npy"
	case "dict":
		v = "FILE.npz"
	}
	return "--input " + a.Name + "=" + v + " (or model.inputs in a config)"
}
