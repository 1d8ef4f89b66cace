package callargs

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

type builder struct {
	plan    *Plan
	opts    Options
	files   map[string]*loaded
	seqWhat string // the first sequence, for messages
}

// loaded is a data file read once: a .npy (one array) or a .npz (its members, in order).
type loaded struct {
	arrays map[string]*npy.Array
	names  []string
}

func (b *builder) own(v *torch.Value) *torch.Value {
	b.plan.owned = append(b.plan.owned, v)
	return v
}

// arg makes argument a's values from g: one value for every call, or one per call.
func (b *builder) arg(a torch.Argument, g *Given) ([]*torch.Value, error) {
	if g.Type != "" && squash(g.Type) != squash(a.Type) && !(g.Type == "Tensor" && g.Random) {
		return nil, fmt.Errorf("%s: argument %s is declared %s, but %s takes %s: fix its type", g.What, a.Name, g.Type, b.plan.Method, a.Type)
	}
	return b.value(a.Name, a.TypeInfo, g, hint(a), a.Type)
}

func squash(t string) string { return strings.ReplaceAll(t, " ", "") }

func (b *builder) one(v *torch.Value) ([]*torch.Value, error) {
	b.own(v)
	if err := v.Err(); err != nil {
		return nil, err
	}
	return []*torch.Value{v}, nil
}

// value makes a value of type t; shown is the argument's declared type, for messages.
func (b *builder) value(name string, t torch.TypeInfo, g *Given, how, shown string) ([]*torch.Value, error) {
	bad := func() error {
		got := g.Src.Text
		if got == "" {
			got = "a tensor"
		}
		return fmt.Errorf("%s: argument %s is a %s, not %q: give it with %s", g.What, name, shown, got, how)
	}
	if g.HasValue {
		raw, err := json.Marshal(g.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: argument %s: %v", g.What, name, err)
		}
		v, err := torchspeed.ConstantValue(torchspeed.InputSpec{Name: name, Type: t.Type, Value: raw})
		if err != nil {
			return nil, fmt.Errorf("%s: %v", g.What, err)
		}
		return b.one(v)
	}
	if g.Random {
		if t.Kind == "optional" {
			t = t.Elements[0]
		}
		if t.Kind != "tensor" || b.opts.Random == nil {
			return nil, bad()
		}
		dt := torch.Float32
		if g.DType != "" {
			var err error
			if dt, err = torch.ParseDType(g.DType); err != nil {
				return nil, fmt.Errorf("%s: argument %s: %v", g.What, name, err)
			}
		}
		ten, err := b.opts.Random(g.Shape, dt)
		if err != nil {
			return nil, fmt.Errorf("%s: argument %s: %v", g.What, name, err)
		}
		defer ten.Close()
		return b.one(torch.TensorValue(ten))
	}
	src := g.Src
	switch t.Kind {
	case "optional":
		if src.Kind == config.SourceNone {
			return b.one(torch.NoneValue())
		}
		return b.value(name, t.Elements[0], g, how, shown)
	case "none":
		if src.Kind == config.SourceNone {
			return b.one(torch.NoneValue())
		}
	case "int":
		if src.Kind == config.SourceInt {
			return b.one(torch.IntValue(src.Int))
		}
	case "float", "number":
		switch src.Kind {
		case config.SourceFloat:
			return b.one(torch.FloatValue(src.Float))
		case config.SourceInt:
			return b.one(torch.FloatValue(float64(src.Int)))
		}
	case "bool":
		if src.Kind == config.SourceBool {
			return b.one(torch.BoolValue(src.Bool))
		}
	case "str":
		if src.Kind == config.SourceStr {
			return b.one(torch.StrValue(src.Str))
		}
	case "tensor":
		if src.Kind == config.SourceFile {
			return b.tensors(name, g, src)
		}
	case "list", "tuple":
		return b.sequence(name, t, g, bad)
	case "dict":
		if src.Kind == config.SourceFile && src.Member == "" && strings.HasSuffix(src.Path, ".npz") &&
			len(t.Elements) == 2 && t.Elements[0].Kind == "str" && t.Elements[1].Kind == "tensor" {
			return b.dict(name, g, src)
		}
	}
	return nil, bad()
}

// sequence makes a List[Tensor] or Tuple of tensors from a list of files (or one file).
func (b *builder) sequence(name string, t torch.TypeInfo, g *Given, bad func() error) ([]*torch.Value, error) {
	items := g.Src.Items
	if g.Src.Kind == config.SourceFile {
		items = []config.Source{g.Src}
	}
	if len(items) == 0 || len(t.Elements) == 0 {
		return nil, bad()
	}
	for _, e := range t.Elements {
		if e.Kind != "tensor" {
			return nil, fmt.Errorf("%s: argument %s is a %s: a list or tuple of non-tensors is a constant; give it as value in a config", g.What, name, t.Type)
		}
	}
	if t.Kind == "tuple" && len(items) != len(t.Elements) {
		return nil, fmt.Errorf("%s: argument %s is a %s: give %d files separated by commas, not %d", g.What, name, t.Type, len(t.Elements), len(items))
	}
	per := make([][]*torch.Value, len(items))
	n := 1
	for j, it := range items {
		v, err := b.tensors(name, g, it)
		if err != nil {
			return nil, err
		}
		per[j], n = v, max(n, len(v))
	}
	out := make([]*torch.Value, n)
	for i := range out {
		row := make([]*torch.Value, len(per))
		for j, v := range per {
			row[j] = v[min(i, len(v)-1)]
		}
		if t.Kind == "tuple" {
			out[i] = torch.TupleValue(row...)
		} else {
			out[i] = torch.ListValue(row...)
		}
		b.own(out[i])
		if err := out[i].Err(); err != nil {
			return nil, fmt.Errorf("argument %s: %w", name, err)
		}
	}
	return out, nil
}

// dict makes a Dict[str, Tensor] of every member of a .npz, in the archive's order.
func (b *builder) dict(name string, g *Given, src config.Source) ([]*torch.Value, error) {
	l, err := b.load(g, name, src)
	if err != nil {
		return nil, err
	}
	per := make([][]*torch.Value, len(l.names))
	n := 1
	for j, m := range l.names {
		it := src
		it.Member = m
		if per[j], err = b.tensors(name, g, it); err != nil {
			return nil, err
		}
		n = max(n, len(per[j]))
	}
	out := make([]*torch.Value, n)
	for i := range out {
		row := make([]*torch.Value, len(per))
		for j, v := range per {
			row[j] = v[min(i, len(v)-1)]
		}
		out[i] = b.own(torch.DictValue(l.names, row))
		if err := out[i].Err(); err != nil {
			return nil, fmt.Errorf("argument %s: %w", name, err)
		}
	}
	return out, nil
}

func (b *builder) load(g *Given, name string, src config.Source) (*loaded, error) {
	if l, ok := b.files[src.Path]; ok {
		return l, nil
	}
	l := &loaded{arrays: map[string]*npy.Array{}}
	if strings.HasSuffix(src.Path, ".npz") {
		arrs, names, err := npy.ReadNPZ(src.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: argument %s: %v", g.What, name, err)
		}
		l.arrays, l.names = arrs, names
	} else {
		a, err := npy.ReadFile(src.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: argument %s: %v", g.What, name, err)
		}
		l.arrays[""], l.names = a, []string{""}
	}
	b.files[src.Path] = l
	return l, nil
}

// tensors reads one tensor file: one value, or one per call for seq:.
func (b *builder) tensors(name string, g *Given, src config.Source) ([]*torch.Value, error) {
	l, err := b.load(g, name, src)
	if err != nil {
		return nil, err
	}
	member := src.Member
	if member == "" && strings.HasSuffix(src.Path, ".npz") {
		if len(l.names) != 1 {
			names := append([]string(nil), l.names...)
			sort.Strings(names)
			return nil, fmt.Errorf("%s: argument %s: %s holds %d arrays (%s): name one with %s:MEMBER", g.What, name, src.Path, len(names), strings.Join(names, ", "), src.Path)
		}
		member = l.names[0]
	}
	a, ok := l.arrays[member]
	if !ok {
		return nil, fmt.Errorf("%s: argument %s: %s has no array %q (it has %s)", g.What, name, src.Path, member, strings.Join(l.names, ", "))
	}
	shape := a.Shape
	calls := 0
	if src.Seq {
		if len(shape) == 0 || shape[0] == 0 {
			return nil, fmt.Errorf("%s: argument %s: seq:%s has shape %v: a sequence needs dimension 0 to count its calls", g.What, name, src.Path, shape)
		}
		calls, shape = int(shape[0]), shape[1:]
		if b.plan.calls != 0 && b.plan.calls != calls {
			return nil, fmt.Errorf("%s: argument %s: seq:%s holds %d calls, but %s holds %d: sequences must be as long", g.What, name, src.Path, calls, b.seqWhat, b.plan.calls)
		}
		b.plan.calls, b.seqWhat = calls, src.Path
	}
	if err := checkShape(g, name, src, shape); err != nil {
		return nil, err
	}
	if !src.Seq {
		t, err := torch.NewTensorAny(a.Data, shape)
		if err != nil {
			return nil, fmt.Errorf("%s: argument %s: %v", g.What, name, err)
		}
		defer t.Close()
		return b.one(torch.TensorValue(t))
	}
	out := make([]*torch.Value, calls)
	for i := range out {
		data, err := npy.SplitData(a.Data, calls, i)
		if err != nil {
			return nil, fmt.Errorf("%s: argument %s: %v", g.What, name, err)
		}
		t, err := torch.NewTensorAny(data, shape)
		if err != nil {
			return nil, fmt.Errorf("%s: argument %s: %v", g.What, name, err)
		}
		out[i] = b.own(torch.TensorValue(t))
		t.Close()
		if err := out[i].Err(); err != nil {
			return nil, fmt.Errorf("%s: argument %s: %v", g.What, name, err)
		}
	}
	return out, nil
}

// checkShape checks a call's tensor shape against the declared shape (the batch dimension
// aside) and the batch dimension against its rank.
func checkShape(g *Given, name string, src config.Source, shape []int64) error {
	bd := 0
	if g.BatchDim != nil {
		bd = *g.BatchDim
	}
	if g.BatchDim != nil && bd >= len(shape) {
		return fmt.Errorf("%s: argument %s: batch_dim %d is out of range for its data %s, whose calls have shape %v (dimensions 0 to %d, or none)", g.What, name, bd, src.Text, shape, len(shape)-1)
	}
	if g.Shape == nil {
		return nil
	}
	fits := len(shape) == len(g.Shape)
	for d := 0; fits && d < len(shape); d++ {
		fits = d == bd || shape[d] == g.Shape[d]
	}
	if !fits {
		per := "holds"
		if src.Seq {
			per = "holds calls of"
		}
		return fmt.Errorf("%s: argument %s: %s %s shape %v, but the input is declared %v", g.What, name, src.Text, per, shape, g.Shape)
	}
	return nil
}
