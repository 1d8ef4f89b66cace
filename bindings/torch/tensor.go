package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Tensor is a CPU tensor owned by libtorch. Close it when done; a finalizer is only a backstop.
type Tensor struct {
	g guard
	c *C.ts_tensor
}

// acquire takes the read side of t's guard; it refuses nil and zero-value tensors.
func (t *Tensor) acquire() error {
	if t == nil {
		return ErrNilHandle
	}
	if err := t.g.acquire(); err != nil {
		return err
	}
	if t.c == nil {
		t.g.release()
		return ErrNilHandle
	}
	return nil
}

func wrapTensor(c *C.ts_tensor) *Tensor {
	t := &Tensor{c: c}
	runtime.SetFinalizer(t, (*Tensor).Close)
	return t
}

// Element is a Go type a tensor can hold; each maps to one DType.
type Element interface {
	float32 | float64 | int64 | int32 | int16 | uint8 | int8 | bool
}

// dtypeOf is the DType of T.
func dtypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int64:
		return Int64
	case int32:
		return Int32
	case int16:
		return Int16
	case uint8:
		return Uint8
	case int8:
		return Int8
	default: // bool
		return Bool
	}
}

// NewTensor copies data into a new tensor of the given shape, of T's dtype. len(data) must
// equal the product of shape.
func NewTensor[T Element](data []T, shape []int64) (*Tensor, error) {
	if err := checkShim(); err != nil {
		return nil, err
	}
	dt := dtypeOf[T]()
	numel := int64(1)
	for _, s := range shape {
		if s < 0 {
			return nil, &Error{Op: "new tensor", Code: InvalidArgument, Msg: fmt.Sprintf("shape %v has a negative dimension", clipShape(shape))}
		}
		if s != 0 && numel > math.MaxInt64/s {
			return nil, &Error{Op: "new tensor", Code: InvalidArgument, Msg: fmt.Sprintf("shape %v holds more elements than fit in memory", clipShape(shape))}
		}
		numel *= s
	}
	if numel != int64(len(data)) {
		return nil, &Error{Op: "new tensor", Code: InvalidArgument, Msg: fmt.Sprintf("shape %v holds %d elements, data has %d", clipShape(shape), numel, len(data))}
	}
	var cshape *C.int64_t
	if len(shape) > 0 {
		cshape = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	var out *C.ts_tensor
	err := statusErr(C.ts_tensor_new(slicePtr(data), C.size_t(len(data)*dt.Size()), C.int32_t(dt), cshape, C.size_t(len(shape)), &out))
	runtime.KeepAlive(data)
	runtime.KeepAlive(shape)
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// NewTensorAny is NewTensor for data whose element type is known only at run time (an npy
// array's): data is one of the []T of Element. It is the bindings' one untyped way in.
func NewTensorAny(data any, shape []int64) (*Tensor, error) {
	switch d := data.(type) {
	case []float32:
		return NewTensor(d, shape)
	case []float64:
		return NewTensor(d, shape)
	case []int64:
		return NewTensor(d, shape)
	case []int32:
		return NewTensor(d, shape)
	case []int16:
		return NewTensor(d, shape)
	case []uint8:
		return NewTensor(d, shape)
	case []int8:
		return NewTensor(d, shape)
	case []bool:
		return NewTensor(d, shape)
	}
	return nil, &Error{Op: "new tensor", Code: InvalidArgument, Msg: fmt.Sprintf("unsupported data type %T: use []float32, []float64, []int64, []int32, []int16, []uint8, []int8 or []bool", data)}
}

// Close frees the tensor. It is idempotent and waits for calls that use the tensor.
func (t *Tensor) Close() error {
	if t == nil {
		return nil
	}
	t.g.close(func() {
		C.ts_tensor_free(t.c)
		t.c = nil
		runtime.SetFinalizer(t, nil)
	})
	return nil
}

// Shape returns the tensor's sizes (nil after Close).
func (t *Tensor) Shape() []int64 {
	if t.acquire() != nil {
		return nil
	}
	defer t.g.release()
	return t.shapeLocked()
}

func (t *Tensor) shapeLocked() []int64 {
	nd := int(C.ts_tensor_ndim(t.c))
	s := make([]int64, nd)
	if nd > 0 {
		C.ts_tensor_shape(t.c, (*C.int64_t)(unsafe.Pointer(&s[0])), C.size_t(nd))
	}
	return s
}

// DType returns the element type (-1 after Close).
func (t *Tensor) DType() DType {
	if t.acquire() != nil {
		return -1
	}
	defer t.g.release()
	return t.dtypeLocked()
}

func (t *Tensor) dtypeLocked() DType { return DType(C.ts_tensor_dtype(t.c)) }

// Numel is the number of elements.
func (t *Tensor) Numel() int64 {
	if t.acquire() != nil {
		return 0
	}
	defer t.g.release()
	return int64(C.ts_tensor_numel(t.c))
}

// Data copies t's elements into a new []T, in row-major order. T must be t's element type;
// a quantized tensor gives its integer representation (quint8 as uint8, qint8 as int8, qint32
// as int32). Float32s converts any dtype.
func Data[T Element](t *Tensor) ([]T, error) {
	if err := t.acquire(); err != nil {
		return nil, err
	}
	defer t.g.release()
	return dataLocked[T](t)
}

func dataLocked[T Element](t *Tensor) ([]T, error) {
	dt := t.dtypeLocked()
	if want := dtypeOf[T](); reprOf(dt) != want {
		return nil, &Error{Op: "tensor data", Code: InvalidArgument, Msg: fmt.Sprintf("a %s tensor read as %s: read it with its own type, or use Float32s", dt, want)}
	}
	n := int(C.ts_tensor_numel(t.c))
	out := make([]T, n)
	err := statusErr(C.ts_tensor_copy_to(t.c, slicePtr(out), C.size_t(n*dt.Size())))
	runtime.KeepAlive(out)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// reprOf is the plain type a quantized dtype's integer representation has.
func reprOf(dt DType) DType {
	switch dt {
	case QUint8:
		return Uint8
	case QInt8:
		return Int8
	case QInt32:
		return Int32
	}
	return dt
}

// DataAny is Data for callers that learn the element type at run time (to write an npy
// array): it returns the []T of t's dtype. With NewTensorAny it is the bindings' one untyped
// way in and out.
func DataAny(t *Tensor) (any, error) {
	if err := t.acquire(); err != nil {
		return nil, err
	}
	defer t.g.release()
	switch dt := t.dtypeLocked(); reprOf(dt) {
	case Float32:
		return dataLocked[float32](t)
	case Float64:
		return dataLocked[float64](t)
	case Int64:
		return dataLocked[int64](t)
	case Int32:
		return dataLocked[int32](t)
	case Int16:
		return dataLocked[int16](t)
	case Uint8:
		return dataLocked[uint8](t)
	case Int8:
		return dataLocked[int8](t)
	case Bool:
		return dataLocked[bool](t)
	default:
		return nil, &Error{Op: "tensor data", Code: Unsupported, Msg: fmt.Sprintf("%s tensors cannot be copied to Go; convert with Float()", dt)}
	}
}

func slicePtr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// Float32s returns the elements as float32, converting (and dequantizing) when needed.
func (t *Tensor) Float32s() ([]float32, error) {
	if err := t.acquire(); err != nil {
		return nil, err
	}
	if t.dtypeLocked() == Float32 {
		defer t.g.release()
		return dataLocked[float32](t)
	}
	t.g.release()
	f, err := t.Float()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Data[float32](f)
}

// Float returns a float32 copy; quantized tensors are dequantized.
func (t *Tensor) Float() (*Tensor, error) {
	if err := t.acquire(); err != nil {
		return nil, err
	}
	defer t.g.release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_tensor_to_float(t.c, &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// ChannelsLast returns a copy in channels-last memory format (4-D or 5-D tensors).
func (t *Tensor) ChannelsLast() (*Tensor, error) {
	if err := t.acquire(); err != nil {
		return nil, err
	}
	defer t.g.release()
	var out *C.ts_tensor
	if err := statusErr(C.ts_tensor_channels_last(t.c, &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// QParams are a quantized tensor's scales and zero points. Axis is -1 for per-tensor.
type QParams struct {
	Scales     []float64
	ZeroPoints []int64
	Axis       int64
}

// QParams returns the quantization parameters of a quantized tensor.
func (t *Tensor) QParams() (QParams, error) {
	if err := t.acquire(); err != nil {
		return QParams{}, err
	}
	defer t.g.release()
	var (
		sc   *C.double
		zp   *C.int64_t
		n    C.size_t
		axis C.int64_t
	)
	if err := statusErr(C.ts_tensor_qparams(t.c, &sc, &zp, &n, &axis)); err != nil {
		return QParams{}, err
	}
	defer C.ts_free(unsafe.Pointer(sc))
	defer C.ts_free(unsafe.Pointer(zp))
	q := QParams{Axis: int64(axis)}
	q.Scales = append([]float64(nil), unsafe.Slice((*float64)(unsafe.Pointer(sc)), int(n))...)
	q.ZeroPoints = append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(zp)), int(n))...)
	return q, nil
}

// String is the dtype and shape, e.g. "float32[1 3 224 224]"; "closed" after Close.
func (t *Tensor) String() string {
	if t.acquire() != nil {
		return "closed"
	}
	defer t.g.release()
	return t.stringLocked()
}

func (t *Tensor) stringLocked() string { return fmt.Sprintf("%s%v", t.dtypeLocked(), t.shapeLocked()) }

// clipShape keeps a hostile shape's echo short.
func clipShape(shape []int64) string { return Clip(fmt.Sprint(shape)) }
