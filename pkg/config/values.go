package config

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// checkConstant checks a non-tensor input: its type is one torchspeed passes as a constant
// (int, float, bool, str, None, Optional[T] and List[T] of those) and its value has that type.
// The same types and values are what torchspeed.ConstantValue turns into TorchScript values.
func checkConstant(in Input) error {
	if in.Shape != nil || in.Data != "" {
		return fmt.Errorf("type %s: shape and data are for tensors; give a value", in.Type)
	}
	if in.BatchDim != "" && !strings.EqualFold(in.BatchDim, "none") {
		return fmt.Errorf("batch_dim %s: a %s has no batch dimension", in.BatchDim, in.Type)
	}
	return CheckConstantValue(in.Type, in.Value)
}

// HoldsTensors reports whether a TorchScript type holds tensors (Optional[Tensor],
// List[Tensor], Tuple[Tensor, Tensor], Dict[str, Tensor]): such arguments take data, not a value.
func HoldsTensors(typ string) bool { return strings.Contains(typ, "Tensor") }

// checkValues checks an input's data source and, for a non-tensor, its value.
func checkValues(in Input) error {
	if in.Data != "" {
		if err := checkData(in); err != nil {
			return fmt.Errorf("data: %w", err)
		}
	}
	switch {
	case in.IsTensor():
		return nil
	case HoldsTensors(in.Type) && in.Value != nil:
		return fmt.Errorf("value %v: a %s takes data (or nothing for an Optional left out), not a value", in.Value, in.Type)
	case HoldsTensors(in.Type):
		return nil
	}
	return checkConstant(in)
}

// rebaseData makes the inputs' data files relative to the config file's folder.
func (c *Config) rebaseData(base string) {
	for i, in := range c.Model.Inputs {
		if src, err := ParseSource(in.Data); in.Data != "" && err == nil {
			c.Model.Inputs[i].Data = src.Rebase(base).String()
		}
	}
}

// checkData checks an input's data source: a file (or a list of files for a List or Tuple),
// in the syntax --input takes.
func checkData(in Input) error {
	src, err := ParseSource(in.Data)
	if err != nil {
		return err
	}
	if src.Kind != SourceFile && src.Kind != SourceList {
		return fmt.Errorf("%q is not a data file: constants take value (e.g. value: %s)", in.Data, example(in.Type))
	}
	if src.Kind == SourceList && !strings.HasPrefix(in.Type, "List[") && !strings.HasPrefix(in.Type, "Tuple[") {
		return fmt.Errorf("%q lists several files; only a List or Tuple argument takes several (type: List[Tensor])", in.Data)
	}
	return nil
}

// CheckConstantValue reports whether v (as decoded from YAML or JSON) is a value of the
// TorchScript type typ, naming what was expected when it is not.
func CheckConstantValue(typ string, v any) error {
	if v == nil {
		if typ == "None" || strings.HasPrefix(typ, "Optional[") {
			return nil
		}
		return fmt.Errorf("type %s needs a value, e.g. %s", typ, example(typ))
	}
	if inner, ok := strings.CutPrefix(typ, "Optional["); ok && strings.HasSuffix(inner, "]") {
		typ = strings.TrimSuffix(inner, "]")
	}
	bad := func() error {
		return fmt.Errorf("value %v is not a %s: give e.g. %s", v, typ, example(typ))
	}
	switch typ {
	case "int":
		switch x := v.(type) {
		case int, int8, int16, int32, int64, uint8, uint16, uint32:
			return nil
		case uint:
			if uint64(x) <= math.MaxInt64 {
				return nil
			}
		case uint64:
			if x <= math.MaxInt64 {
				return nil
			}
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
				return nil
			}
		}
		return bad()
	case "float":
		switch v.(type) {
		case int, int8, int16, int32, int64, uint8, uint16, uint32, uint, uint64, float32, float64:
			return nil
		}
		return bad()
	case "bool":
		if _, ok := v.(bool); ok {
			return nil
		}
		return bad()
	case "str":
		if _, ok := v.(string); ok {
			return nil
		}
		return bad()
	case "None":
		return bad()
	}
	if inner, ok := strings.CutPrefix(typ, "List["); ok && strings.HasSuffix(inner, "]") {
		items, ok := v.([]any)
		if !ok {
			return bad()
		}
		elem := strings.TrimSuffix(inner, "]")
		for i, it := range items {
			if it == nil {
				return fmt.Errorf("item %d of %s is empty", i, typ)
			}
			if err := CheckConstantValue(elem, it); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
		}
		return nil
	}
	return errors.New("type " + typ + " is not one torchspeed passes as a constant (int, float, bool, str, None, Optional[T] or List[T] of those); tensors take shape and dtype, or data")
}

func example(typ string) string {
	switch {
	case strings.Contains(typ, "List["):
		return "[1, 2]"
	case strings.Contains(typ, "int"):
		return "16000"
	case strings.Contains(typ, "float"):
		return "0.5"
	case strings.Contains(typ, "bool"):
		return "true"
	case strings.Contains(typ, "str"):
		return `"text"`
	}
	return "null"
}
