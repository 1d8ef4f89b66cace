package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"unsafe"
)

// ValueKind is what a Value holds.
type ValueKind int

// Value kinds; the codes match the shim's TS_VALUE_* constants.
const (
	KindNone   ValueKind = C.TS_VALUE_NONE
	KindBool   ValueKind = C.TS_VALUE_BOOL
	KindInt    ValueKind = C.TS_VALUE_INT
	KindFloat  ValueKind = C.TS_VALUE_DOUBLE
	KindStr    ValueKind = C.TS_VALUE_STRING
	KindTensor ValueKind = C.TS_VALUE_TENSOR
	KindList   ValueKind = C.TS_VALUE_LIST
	KindTuple  ValueKind = C.TS_VALUE_TUPLE
	KindDict   ValueKind = C.TS_VALUE_DICT
	// KindOther is anything else TorchScript can return (a device, an object): Type names it.
	KindOther ValueKind = C.TS_VALUE_OTHER
)

var kindNames = map[ValueKind]string{
	KindNone: "None", KindBool: "bool", KindInt: "int", KindFloat: "float", KindStr: "str",
	KindTensor: "Tensor", KindList: "list", KindTuple: "tuple", KindDict: "dict", KindOther: "other",
}

func (k ValueKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is a TorchScript value (an IValue) owned by libtorch: None, bool, int, float, str,
// Tensor, or a list, tuple or dict of values. It is what methods of real models take and
// return beyond plain tensors (forward(x, sr: int), Optional[Tensor], Dict[str, Tensor] ...).
//
// The constructors (NoneValue, BoolValue, IntValue, FloatValue, StrValue, TensorValue, ListValue,
// TupleValue, DictValue) never return nil: a value that could not be made carries the error, which
// Err reports and every call that uses the value returns. Values are immutable; they are safe to
// share between goroutines. Close each one when done (a finalizer is only a backstop); List,
// Tuple and Dict copy their items, which stay the caller's to close.
type Value struct {
	g   guard
	c   *C.ts_value
	err error
}

func wrapValue(c *C.ts_value) *Value {
	v := &Value{c: c}
	runtime.SetFinalizer(v, (*Value).Close)
	return v
}

func failedValue(err error) *Value { return &Value{err: err} }

func newValue(what string, f func(**C.ts_value) *C.ts_status) *Value {
	if err := checkShim(); err != nil {
		return failedValue(err)
	}
	var out *C.ts_value
	if err := statusErr(f(&out)); err != nil {
		return failedValue(fmt.Errorf("new %s value: %w", what, err))
	}
	return wrapValue(out)
}

// NoneValue is TorchScript's None (for Optional arguments left out).
func NoneValue() *Value {
	return newValue("None", func(o **C.ts_value) *C.ts_status { return C.ts_value_new_none(o) })
}

// BoolValue is a TorchScript bool.
func BoolValue(b bool) *Value {
	var i C.int32_t
	if b {
		i = 1
	}
	return newValue("bool", func(o **C.ts_value) *C.ts_status { return C.ts_value_new_bool(i, o) })
}

// IntValue is a TorchScript int (64-bit).
func IntValue(i int64) *Value {
	return newValue("int", func(o **C.ts_value) *C.ts_status { return C.ts_value_new_int(C.int64_t(i), o) })
}

// FloatValue is a TorchScript float (a double).
func FloatValue(f float64) *Value {
	return newValue("float", func(o **C.ts_value) *C.ts_status { return C.ts_value_new_double(C.double(f), o) })
}

// StrValue is a TorchScript str.
func StrValue(s string) *Value {
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	return newValue("str", func(o **C.ts_value) *C.ts_status { return C.ts_value_new_string(cs, C.size_t(len(s)), o) })
}

// TensorValue wraps a tensor as a value. It shares the tensor's data (no copy); the tensor and
// the value are closed separately.
func TensorValue(t *Tensor) *Value {
	if t == nil {
		return failedValue(errors.New("new Tensor value: tensor is nil"))
	}
	if err := t.acquire(); err != nil {
		return failedValue(fmt.Errorf("new Tensor value: %w", err))
	}
	defer t.g.release()
	return newValue("Tensor", func(o **C.ts_value) *C.ts_status { return C.ts_value_new_tensor(t.c, o) })
}

// ListValue is a TorchScript list of items (copied). Its element type is the items' common type
// (List[Tensor], List[int], ...); an empty list takes the type the method declares.
func ListValue(items ...*Value) *Value {
	return withValues("List", items, func(arr **C.ts_value, o **C.ts_value) *C.ts_status {
		return C.ts_value_new_list(arr, C.size_t(len(items)), o)
	})
}

// TupleValue is a TorchScript tuple of items (copied).
func TupleValue(items ...*Value) *Value {
	return withValues("Tuple", items, func(arr **C.ts_value, o **C.ts_value) *C.ts_status {
		return C.ts_value_new_tuple(arr, C.size_t(len(items)), o)
	})
}

// DictValue is a TorchScript Dict[str, V] with keys[i] -> values[i] (copied), in that order.
func DictValue(keys []string, values []*Value) *Value {
	if len(keys) != len(values) {
		return failedValue(fmt.Errorf("new Dict value: %d keys for %d values", len(keys), len(values)))
	}
	ck := make([]*C.char, len(keys))
	for i, k := range keys {
		ck[i] = C.CString(k)
	}
	defer func() {
		for _, p := range ck {
			C.free(unsafe.Pointer(p))
		}
	}()
	var kp **C.char
	if len(ck) > 0 {
		kp = &ck[0]
	}
	return withValues("Dict", values, func(arr **C.ts_value, o **C.ts_value) *C.ts_status {
		return C.ts_value_new_dict(kp, arr, C.size_t(len(values)), o)
	})
}

// withValues holds every item's guard for one C call that reads their handles.
func withValues(what string, items []*Value, f func(**C.ts_value, **C.ts_value) *C.ts_status) *Value {
	arr, release, err := cValues(items, "item")
	if err != nil {
		return failedValue(fmt.Errorf("new %s value: %w", what, err))
	}
	defer release()
	return newValue(what, func(o **C.ts_value) *C.ts_status { return f(arr, o) })
}

// cValues borrows values for one C call: it holds each one's guard (so Close waits) and
// returns the C array of handles. The array holds C pointers only, so C may read it. release
// must run after the call.
func cValues(vals []*Value, what string) (arr **C.ts_value, release func(), err error) {
	cv := make([]*C.ts_value, len(vals))
	held := 0
	release = func() {
		for _, v := range vals[:held] {
			v.g.release()
		}
	}
	for i, v := range vals {
		switch {
		case v == nil:
			err = fmt.Errorf("%s %d is nil", what, i)
		case v.err != nil:
			err = fmt.Errorf("%s %d: %w", what, i, v.err)
		default:
			if gerr := v.g.acquire(); gerr != nil {
				err = fmt.Errorf("%s %d: %w", what, i, gerr)
			} else if v.c == nil {
				v.g.release()
				err = fmt.Errorf("%s %d: %w", what, i, ErrNilHandle)
			}
		}
		if err != nil {
			release()
			return nil, nil, err
		}
		held++
		cv[i] = v.c
	}
	if len(cv) > 0 {
		arr = &cv[0]
	}
	return arr, release, nil
}

// Err is the error that kept a constructor from making the value, or nil; ErrNilHandle for a
// nil or zero-value Value, which no constructor made.
func (v *Value) Err() error {
	if v == nil {
		return ErrNilHandle
	}
	if v.err != nil {
		return v.err
	}
	v.g.mu.RLock()
	defer v.g.mu.RUnlock()
	if v.c == nil && !v.g.closed {
		return ErrNilHandle
	}
	return nil
}

// Close frees the value. It is idempotent and waits for calls that use the value.
func (v *Value) Close() error {
	if v == nil || v.err != nil {
		return nil
	}
	v.g.close(func() {
		C.ts_value_free(v.c)
		v.c = nil
		runtime.SetFinalizer(v, nil)
	})
	return nil
}

// CloseValues closes every value of vs (nil entries are skipped).
func CloseValues(vs ...*Value) {
	for _, v := range vs {
		v.Close()
	}
}

// use runs f with the value's handle while holding its guard.
func (v *Value) use(f func(*C.ts_value) error) error {
	if v == nil {
		return errors.New("value is nil")
	}
	if v.err != nil {
		return v.err
	}
	if err := v.g.acquire(); err != nil {
		return err
	}
	defer v.g.release()
	if v.c == nil {
		return ErrNilHandle
	}
	return f(v.c)
}

// Kind is what the value holds (KindNone after Close or for a failed value).
func (v *Value) Kind() ValueKind {
	k := KindNone
	_ = v.use(func(c *C.ts_value) error { k = ValueKind(C.ts_value_kind(c)); return nil })
	return k
}

// Type is TorchScript's spelling of the value's type, e.g. "Dict[str, Tensor]".
func (v *Value) Type() (string, error) {
	var s string
	err := v.use(func(c *C.ts_value) error {
		var p *C.char
		if err := statusErr(C.ts_value_type(c, &p)); err != nil {
			return err
		}
		s = takeString(p)
		return nil
	})
	return s, err
}

// ToBool returns a bool value's content; any other kind is an error.
func (v *Value) ToBool() (bool, error) {
	var b C.int32_t
	err := v.use(func(c *C.ts_value) error { return statusErr(C.ts_value_to_bool(c, &b)) })
	return b != 0, err
}

// ToInt returns an int value's content; any other kind is an error.
func (v *Value) ToInt() (int64, error) {
	var i C.int64_t
	err := v.use(func(c *C.ts_value) error { return statusErr(C.ts_value_to_int(c, &i)) })
	return int64(i), err
}

// ToFloat returns a float value's content; any other kind (an int too) is an error.
func (v *Value) ToFloat() (float64, error) {
	var f C.double
	err := v.use(func(c *C.ts_value) error { return statusErr(C.ts_value_to_double(c, &f)) })
	return float64(f), err
}

// ToStr returns a str value's content; any other kind is an error.
func (v *Value) ToStr() (string, error) {
	var s string
	err := v.use(func(c *C.ts_value) error {
		var p *C.char
		var n C.size_t
		if err := statusErr(C.ts_value_to_string(c, &p, &n)); err != nil {
			return err
		}
		s = C.GoStringN(p, C.int(n))
		C.ts_free(unsafe.Pointer(p))
		return nil
	})
	return s, err
}

// ToTensor returns a Tensor value's tensor as a new handle (sharing its data): close it too.
func (v *Value) ToTensor() (*Tensor, error) {
	var t *Tensor
	err := v.use(func(c *C.ts_value) error {
		var out *C.ts_tensor
		if err := statusErr(C.ts_value_to_tensor(c, &out)); err != nil {
			return err
		}
		t = wrapTensor(out)
		return nil
	})
	return t, err
}

// Len is the number of elements of a list or tuple, or of entries of a dict.
func (v *Value) Len() (int, error) {
	var n C.size_t
	err := v.use(func(c *C.ts_value) error { return statusErr(C.ts_value_len(c, &n)) })
	return int(n), err
}

// Item is element i of a list or tuple, or the value of entry i of a dict (in order), as a new
// value to close.
func (v *Value) Item(i int) (*Value, error) {
	if i < 0 {
		return nil, fmt.Errorf("value item: negative index %d", i)
	}
	var item *Value
	err := v.use(func(c *C.ts_value) error {
		var out *C.ts_value
		if err := statusErr(C.ts_value_item(c, C.size_t(i), &out)); err != nil {
			return err
		}
		item = wrapValue(out)
		return nil
	})
	return item, err
}

// Key is the key of dict entry i, as text.
func (v *Value) Key(i int) (string, error) {
	if i < 0 {
		return "", fmt.Errorf("value key: negative index %d", i)
	}
	var s string
	err := v.use(func(c *C.ts_value) error {
		var p *C.char
		if err := statusErr(C.ts_value_key(c, C.size_t(i), &p)); err != nil {
			return err
		}
		s = takeString(p)
		return nil
	})
	return s, err
}

// String describes the value for messages: "int 16000", "Tensor float32[1 256]",
// "Dict[str, Tensor]".
func (v *Value) String() string {
	if v == nil {
		return "<nil value>"
	}
	if v.err != nil {
		return "<invalid value: " + v.err.Error() + ">"
	}
	switch v.Kind() {
	case KindNone:
		return "None"
	case KindBool:
		b, _ := v.ToBool()
		return "bool " + strconv.FormatBool(b)
	case KindInt:
		i, _ := v.ToInt()
		return "int " + strconv.FormatInt(i, 10)
	case KindFloat:
		f, _ := v.ToFloat()
		return "float " + strconv.FormatFloat(f, 'g', -1, 64)
	case KindStr:
		s, _ := v.ToStr()
		return "str " + strconv.Quote(s)
	case KindTensor:
		if t, err := v.ToTensor(); err == nil {
			defer t.Close()
			return "Tensor " + t.String()
		}
	}
	s, err := v.Type()
	if err != nil {
		return "<value: " + err.Error() + ">"
	}
	return s
}

// Outputs flattens the value into named tensors the way Forward names its outputs: "0" for a
// single tensor, "0", "1", ... for tuple and list elements, dict keys, nested names joined by
// ".". int, float and bool leaves become 0-d int64, float64 and bool tensors; None leaves are
// left out; a str leaf is an error. Close the tensors (CloseOutputs).
func (v *Value) Outputs() ([]Output, error) {
	var outs []Output
	if err := v.flatten("", &outs); err != nil {
		CloseOutputs(outs)
		return nil, err
	}
	return outs, nil
}

// TextOutput is a str output, or a list of str (a classifier's get_classes), by the name
// Outputs would give it.
type TextOutput struct {
	Name   string
	Values []string
	List   bool // a List[str] (Values may hold one item or none), not a lone str
}

// OutputsAndText is Outputs, with str leaves and lists of str returned as text rather than
// refused.
func (v *Value) OutputsAndText() ([]Output, []TextOutput, error) {
	var outs []Output
	var text []TextOutput
	if err := v.flattenText("", &outs, &text); err != nil {
		CloseOutputs(outs)
		return nil, nil, err
	}
	return outs, text, nil
}

func (v *Value) flatten(path string, outs *[]Output) error {
	return v.flattenText(path, outs, nil)
}

// strItems returns the items of a list whose items are all str; ok is false otherwise (an
// empty list too, unless its type says List[str]).
func (v *Value) strItems() (items []string, ok bool, err error) {
	n, err := v.Len()
	if err != nil {
		return nil, false, err
	}
	if n == 0 {
		typ, _ := v.Type()
		return nil, typ == "List[str]", nil
	}
	items = make([]string, 0, n)
	for i := 0; i < n; i++ {
		item, err := v.Item(i)
		if err != nil {
			return nil, false, err
		}
		if item.Kind() != KindStr {
			item.Close()
			return nil, false, nil
		}
		s, err := item.ToStr()
		item.Close()
		if err != nil {
			return nil, false, err
		}
		items = append(items, s)
	}
	return items, true, nil
}

// flattenText is flatten; with text non-nil, str leaves and lists of str go there.
func (v *Value) flattenText(path string, outs *[]Output, text *[]TextOutput) error {
	name := path
	if name == "" {
		name = "0"
	}
	child := func(key string) string {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	scalar := func(data any) error {
		t, err := NewTensorAny(data, []int64{})
		if err != nil {
			return err
		}
		*outs = append(*outs, Output{Name: name, Tensor: t})
		return nil
	}
	switch k := v.Kind(); k {
	case KindTensor:
		t, err := v.ToTensor()
		if err != nil {
			return err
		}
		*outs = append(*outs, Output{Name: name, Tensor: t})
		return nil
	case KindNone:
		return v.use(func(*C.ts_value) error { return nil }) // a closed value is an error
	case KindInt:
		i, err := v.ToInt()
		if err != nil {
			return err
		}
		return scalar([]int64{i})
	case KindFloat:
		f, err := v.ToFloat()
		if err != nil {
			return err
		}
		return scalar([]float64{f})
	case KindBool:
		b, err := v.ToBool()
		if err != nil {
			return err
		}
		return scalar([]bool{b})
	case KindStr:
		if text == nil {
			return fmt.Errorf("output %s is a str, which has no tensor form", name)
		}
		str, err := v.ToStr()
		if err != nil {
			return err
		}
		*text = append(*text, TextOutput{Name: name, Values: []string{str}})
		return nil
	case KindList, KindTuple, KindDict:
		if k == KindList && text != nil {
			items, ok, err := v.strItems()
			if err != nil {
				return err
			}
			if ok {
				*text = append(*text, TextOutput{Name: name, Values: items, List: true})
				return nil
			}
		}
		n, err := v.Len()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			key := strconv.Itoa(i)
			if k == KindDict {
				if key, err = v.Key(i); err != nil {
					return err
				}
			}
			item, err := v.Item(i)
			if err != nil {
				return err
			}
			err = item.flattenText(child(key), outs, text)
			item.Close()
			if err != nil {
				return err
			}
		}
		return nil
	default:
		typ, _ := v.Type()
		return fmt.Errorf("output %s is a %s, which has no tensor form", name, typ)
	}
}
