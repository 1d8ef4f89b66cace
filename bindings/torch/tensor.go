package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"fmt"
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

// NewTensor copies data ([]float32, []float64, []int64, []int32, []uint8, []int8, []bool) into a
// new tensor of the given shape. len(data) must equal the product of shape.
func NewTensor(data any, shape []int64) (*Tensor, error) {
	var (
		dt  DType
		ptr unsafe.Pointer
		n   int
	)
	switch d := data.(type) {
	case []float32:
		dt, n = Float32, len(d)
		if n > 0 {
			ptr = unsafe.Pointer(&d[0])
		}
	case []float64:
		dt, n = Float64, len(d)
		if n > 0 {
			ptr = unsafe.Pointer(&d[0])
		}
	case []int64:
		dt, n = Int64, len(d)
		if n > 0 {
			ptr = unsafe.Pointer(&d[0])
		}
	case []int32:
		dt, n = Int32, len(d)
		if n > 0 {
			ptr = unsafe.Pointer(&d[0])
		}
	case []uint8:
		dt, n = Uint8, len(d)
		if n > 0 {
			ptr = unsafe.Pointer(&d[0])
		}
	case []int8:
		dt, n = Int8, len(d)
		if n > 0 {
			ptr = unsafe.Pointer(&d[0])
		}
	case []int16:
		dt, n = Int16, len(d)
		if n > 0 {
			ptr = unsafe.Pointer(&d[0])
		}
	case []bool:
		dt, n = Bool, len(d)
		if n > 0 {
			ptr = unsafe.Pointer(&d[0])
		}
	default:
		return nil, fmt.Errorf("new tensor: unsupported data type %T: use []float32, []float64, []int64, []int32, []int16, []uint8, []int8 or []bool", data)
	}
	numel := int64(1)
	for _, s := range shape {
		if s < 0 {
			return nil, fmt.Errorf("new tensor: shape %v has a negative dimension", shape)
		}
		numel *= s
	}
	if numel != int64(n) {
		return nil, fmt.Errorf("new tensor: shape %v holds %d elements, data has %d", shape, numel, n)
	}
	var cshape *C.int64_t
	if len(shape) > 0 {
		cshape = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	var out *C.ts_tensor
	err := statusErr(C.ts_tensor_new(ptr, C.size_t(n*dt.Size()), C.int32_t(dt), cshape, C.size_t(len(shape)), &out))
	runtime.KeepAlive(data)
	runtime.KeepAlive(shape)
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
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

// Data copies the elements into a new Go slice of the matching type, in row-major order.
// Quantized tensors give their integer representation ([]uint8, []int8, []int32).
func (t *Tensor) Data() (any, error) {
	if err := t.acquire(); err != nil {
		return nil, err
	}
	defer t.g.release()
	dt := DType(C.ts_tensor_dtype(t.c))
	n := int(C.ts_tensor_numel(t.c))
	var out any
	var ptr unsafe.Pointer
	switch dt {
	case Float32:
		s := make([]float32, n)
		out, ptr = s, slicePtr(s)
	case Float64:
		s := make([]float64, n)
		out, ptr = s, slicePtr(s)
	case Int64:
		s := make([]int64, n)
		out, ptr = s, slicePtr(s)
	case Int32, QInt32:
		s := make([]int32, n)
		out, ptr = s, slicePtr(s)
	case Uint8, QUint8:
		s := make([]uint8, n)
		out, ptr = s, slicePtr(s)
	case Int8, QInt8:
		s := make([]int8, n)
		out, ptr = s, slicePtr(s)
	case Bool:
		s := make([]bool, n)
		out, ptr = s, slicePtr(s)
	case Int16:
		s := make([]int16, n)
		out, ptr = s, slicePtr(s)
	default:
		return nil, fmt.Errorf("tensor data: %s tensors cannot be copied to Go; convert with Float()", dt)
	}
	err := statusErr(C.ts_tensor_copy_to(t.c, ptr, C.size_t(n*dt.Size())))
	runtime.KeepAlive(out)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func slicePtr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// Float32s returns the elements as float32, converting (and dequantizing) when needed.
func (t *Tensor) Float32s() ([]float32, error) {
	if dt := t.DType(); dt == Float32 {
		d, err := t.Data()
		if err != nil {
			return nil, err
		}
		return d.([]float32), nil
	}
	f, err := t.Float()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := f.Data()
	if err != nil {
		return nil, err
	}
	return d.([]float32), nil
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
