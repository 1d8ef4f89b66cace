package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/callargs"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/npy"
)

// initArgs is what config init writes about the method: its arguments and its state.
type initArgs struct {
	method  string
	args    []initArg
	state   []string // attributes the method assigns
	reset   string
	methods []string
}

// initArg is one argument as config init writes it.
type initArg struct {
	name, typ string
	kind      string // the schema's normalized kind
	shape     []string
	dtype     string
	data      *config.Source
	dataShape []int64 // the shape of a --input file's array (nil: a dict, or unknown)
	value     string  // a YAML literal
	todo      string  // the comment of a value left to fill in
	note      string
}

// describe reads the method's schema, its state and reset method, the shapes a traced graph
// records, and the values --input and --input-shape give.
func (ci *configInit) describe(m *torch.Module, shapes [][]int64) (*initArgs, error) {
	methods, err := m.Methods()
	if err != nil {
		return nil, err
	}
	if !slices.Contains(methods, ci.method) {
		return nil, exitcode.Usagef("config init: --method %s: the model has no method %q (it has %s)", ci.method, ci.method, strings.Join(methods, ", "))
	}
	schema, err := m.MethodSchema(ci.method)
	if err != nil {
		return nil, err
	}
	ia := &initArgs{method: ci.method, methods: methods}
	if ia.state, err = m.State(ci.method); err != nil {
		return nil, err
	}
	for _, r := range []string{"reset_states", "reset"} {
		if slices.Contains(methods, r) {
			ia.reset = r
			break
		}
	}
	traced := map[string]detectedInput{}
	if ci.method == "forward" {
		detected, _ := detectInputs(m) // best effort: scripted graphs record no shapes
		for _, d := range detected {
			traced[d.name] = d
		}
	}
	given, err := callargs.FromFlags("--input", ci.values)
	if err != nil {
		return nil, exitcode.Usagef("config init: %v", err)
	}
	byName := map[string]config.Source{}
	var positional []config.Source
	for _, g := range given {
		if g.Name == "" {
			positional = append(positional, g.Src)
			continue
		}
		if _, ok := schema.Argument(g.Name); !ok {
			return nil, exitcode.Usagef("config init: %s: %s has no argument %q", g.What, ci.method, g.Name)
		}
		byName[g.Name] = g.Src
	}
	nTensors := 0
	for _, a := range schema.Arguments {
		src, ok := byName[a.Name]
		if !ok && len(positional) > 0 {
			src, positional, ok = positional[0], positional[1:], true
		}
		arg := initArg{name: a.Name, typ: a.Type, kind: a.Kind, dtype: "float32"}
		if a.Kind == "tensor" {
			if d, ok := traced[a.Name]; ok {
				arg.shape, arg.dtype = d.shape, d.dtype
			}
			if nTensors < len(shapes) {
				arg.shape = strings.Split(config.FormatShape(shapes[nTensors]), "x")
			}
			nTensors++
		}
		if ok {
			if err := arg.set(src); err != nil {
				return nil, exitcode.Usagef("config init: --input %s: argument %s (%s): %v", src.Text, a.Name, a.Type, err)
			}
			if a.Kind == "tensor" && src.Kind == config.SourceFile {
				// The config's dtype defaults to float32, and optimize refuses data of another.
				if arg.dtype, arg.dataShape, err = sourceDType(src); err != nil {
					return nil, exitcode.Usagef("config init: --input %s: argument %s: %v", src.Text, a.Name, err)
				}
			}
		} else {
			arg.fill(a)
		}
		ia.args = append(ia.args, arg)
	}
	if len(positional) > 0 {
		return nil, exitcode.Usagef("config init: %d more --input value(s) than %s takes (%d arguments)", len(positional), ci.method, len(schema.Arguments))
	}
	if len(shapes) > nTensors {
		return nil, exitcode.Usagef("config init: %d --input-shape values for %s's %d tensor argument(s); give one per tensor, in order", len(shapes), ci.method, nTensors)
	}
	return ia, nil
}

// sourceDType is the dtype and shape of the data a tensor file source holds (a .npy, or one
// member of a .npz; a whole .npz holds a dict and keeps float32, with no one shape).
func sourceDType(src config.Source) (string, []int64, error) {
	if strings.HasSuffix(src.Path, ".npz") {
		if src.Member == "" {
			return "float32", nil, nil
		}
		arrays, _, err := npy.ReadNPZ(src.Path)
		if err != nil {
			return "", nil, err
		}
		a, ok := arrays[src.Member]
		if !ok {
			return "", nil, fmt.Errorf("%s has no member %q", src.Path, src.Member)
		}
		return a.DType, a.Shape, nil
	}
	a, err := npy.ReadFile(src.Path)
	if err != nil {
		return "", nil, err
	}
	return a.DType, a.Shape, nil
}

// set takes a value given with --input.
func (a *initArg) set(src config.Source) error {
	switch src.Kind {
	case config.SourceFile, config.SourceList:
		a.data = &src
		return nil
	case config.SourceInt:
		a.value = strconv.FormatInt(src.Int, 10)
	case config.SourceFloat:
		a.value = strconv.FormatFloat(src.Float, 'g', -1, 64)
	case config.SourceBool:
		a.value = strconv.FormatBool(src.Bool)
	case config.SourceStr:
		a.value = strconv.Quote(src.Str)
	case config.SourceNone:
		a.value = "null"
	}
	if a.kind == "tensor" {
		return fmt.Errorf("a tensor takes a file")
	}
	return config.CheckConstantValue(a.typ, yamlValue(a.value))
}

// yamlValue is the Go value a YAML literal written by set decodes to, for the check.
func yamlValue(lit string) any {
	if lit == "null" {
		return nil
	}
	if b, err := strconv.ParseBool(lit); err == nil {
		return b
	}
	if i, err := strconv.ParseInt(lit, 10, 64); err == nil {
		return int(i)
	}
	if f, err := strconv.ParseFloat(lit, 64); err == nil {
		return f
	}
	if s, err := strconv.Unquote(lit); err == nil {
		return s
	}
	return lit
}

// fill writes what the schema knows of an argument not given: its default, else a TODO.
func (a *initArg) fill(s torch.Argument) {
	holds := config.HoldsTensors(a.typ) && a.kind != "tensor"
	switch {
	case s.HasDefault && (!holds || string(s.Default) == "null"):
		a.value, a.note = string(s.Default), "the schema's default"
	case a.kind == "tensor":
		if len(a.shape) == 0 {
			a.todo = "TODO shape: libtorch does not save a model's input shapes (traced or scripted).\n" +
				"Write the full shape, batch first, e.g. [1, 3, 224, 224], or replace shape with\n" +
				"data: FILE.npy; or run config init again with --input-shape 1x3x224x224 or\n" +
				"--input " + a.name + "=FILE.npy."
		}
	case a.kind == "optional" && holds:
		a.value, a.note = "null", "None; or give data: FILE.npy"
	case holds:
		a.todo = "one file per item, separated by commas (a.npy,b.npy; seq: for streams)"
	default:
		a.todo = fmt.Sprintf("the %s to pass", a.typ)
	}
}

func (ia *initArgs) write(b *bytes.Buffer, out string) {
	if ia.method != "forward" {
		fmt.Fprintf(b, "  method: %s\n", ia.method)
	}
	if len(ia.state) > 0 {
		fmt.Fprintf(b, "  # stateful: yes (%s assigns %s): run and bench reset it before each stream\n", ia.method, strings.Join(ia.state, ", "))
		if ia.reset != "" {
			fmt.Fprintf(b, "  reset_method: %s\n", ia.reset)
		} else {
			b.WriteString("  # no reset_states or reset method: name one with reset_method if it has another\n")
		}
	} else {
		fmt.Fprintf(b, "  # stateful: no (%s assigns no attribute)\n", ia.method)
	}
	if others := slices.DeleteFunc(slices.Clone(ia.methods), func(m string) bool { return m == "forward" || m == ia.method || m == ia.reset }); len(others) > 0 {
		fmt.Fprintf(b, "  # other methods: %s (preserve_methods: [...] keeps them through freezing)\n", strings.Join(others, ", "))
	}
	b.WriteString("  inputs:\n")
	for _, a := range ia.args {
		fmt.Fprintf(b, "    - name: %s\n", a.name)
		if a.kind != "tensor" {
			fmt.Fprintf(b, "      type: %q\n", a.typ)
		}
		switch {
		case a.data != nil:
			d := *a.data
			fmt.Fprintf(b, "      data: %q\n", relSource(out, d).String())
			if a.kind == "tensor" && d.Kind == config.SourceFile {
				fmt.Fprintf(b, "      dtype: %s   # the data's\n", a.dtype)
				if a.dataShape != nil {
					what := "each call's input"
					if d.Seq && len(a.dataShape) > 0 {
						what = fmt.Sprintf("%d calls, one slice each", a.dataShape[0])
					}
					fmt.Fprintf(b, "      # shape from the data: [%s] (%s)\n", strings.Join(strings.Split(config.FormatShape(a.dataShape), "x"), ", "), what)
				}
			}
		case a.kind == "tensor" && len(a.shape) > 0:
			fmt.Fprintf(b, "      shape: [%s]\n      dtype: %s   # check: int64 for token ids\n", strings.Join(a.shape, ", "), a.dtype)
		case a.kind == "tensor":
			// An empty shape, not a guess: optimize refuses it with the key and what to write,
			// where a made-up [1] ran until the model rejected it.
			for _, l := range strings.Split(a.todo, "\n") {
				fmt.Fprintf(b, "      # %s\n", l)
			}
			fmt.Fprintf(b, "      shape: []\n      dtype: %s\n", a.dtype)
		case a.value != "":
			fmt.Fprintf(b, "      value: %s", a.value)
			if a.note != "" {
				fmt.Fprintf(b, "   # %s", a.note)
			}
			b.WriteString("\n")
		case config.HoldsTensors(a.typ):
			fmt.Fprintf(b, "      data: \"\"   # TODO: %s\n", a.todo)
		default:
			fmt.Fprintf(b, "      value: null   # TODO: %s\n", a.todo)
		}
	}
}

// relTo writes path relative to the folder of the config file out ("" or "-": as it is).
func relTo(out, path string) string {
	if out == "" || out == "-" {
		return path
	}
	absPath, _ := filepath.Abs(path)
	absOut, _ := filepath.Abs(out)
	if rel, err := filepath.Rel(filepath.Dir(absOut), absPath); err == nil {
		return rel
	}
	return path
}

// relSource makes a data source's files relative to the config file.
func relSource(out string, s config.Source) config.Source {
	switch s.Kind {
	case config.SourceFile:
		s.Path = relTo(out, s.Path)
	case config.SourceList:
		items := make([]config.Source, len(s.Items))
		for i, it := range s.Items {
			items[i] = relSource(out, it)
		}
		s.Items = items
	}
	return s
}
