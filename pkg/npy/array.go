// Package npy reads and writes NumPy's .npy and .npz files, the usual way to hand
// calibration and validation tensors from Python to torchspeed.
//
// Supported: format versions 1.0, 2.0 and 3.0; little- and big-endian data; dtypes
// float32, float64, int64, int32, int16, int8, uint8 and bool; C order. Fortran-order
// arrays, structured dtypes and object arrays are rejected with an error that says how
// to re-save the file.
package npy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DType names accepted in Array.DType. They match torch and NumPy spellings.
const (
	Float32 = "float32"
	Float64 = "float64"
	Int64   = "int64"
	Int32   = "int32"
	Int16   = "int16"
	Int8    = "int8"
	Uint8   = "uint8"
	Bool    = "bool"
)

// Array is an n-dimensional array in C (row-major) order.
//
// Data holds the elements as a Go slice whose element type matches DType:
// []float32, []float64, []int64, []int32, []int16, []int8, []uint8 or []bool.
// An empty Shape is a 0-d (scalar) array with one element.
type Array struct {
	Shape []int64
	DType string
	Data  any
}

// itemSize returns the size in bytes of one element of dtype, or 0 if the dtype is unknown.
func itemSize(dtype string) int {
	switch dtype {
	case Float64, Int64:
		return 8
	case Float32, Int32:
		return 4
	case Int16:
		return 2
	case Int8, Uint8, Bool:
		return 1
	}
	return 0
}

// ItemSize returns the size in bytes of one element of dtype, or 0 if the dtype is not
// one of the supported names.
func ItemSize(dtype string) int { return itemSize(dtype) }

// Numel returns the number of elements the shape describes (1 for a 0-d array). It
// returns -1 if a dimension is negative or the product overflows int64.
func (a *Array) Numel() int64 { return numel(a.Shape) }

func numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > math.MaxInt64/d {
			return -1
		}
		n *= d
	}
	return n
}

// dataLen returns the length of a's Data slice and whether its type matches a.DType.
func (a *Array) dataLen() (int, bool) {
	switch d := a.Data.(type) {
	case []float32:
		return len(d), a.DType == Float32
	case []float64:
		return len(d), a.DType == Float64
	case []int64:
		return len(d), a.DType == Int64
	case []int32:
		return len(d), a.DType == Int32
	case []int16:
		return len(d), a.DType == Int16
	case []int8:
		return len(d), a.DType == Int8
	case []uint8:
		return len(d), a.DType == Uint8
	case []bool:
		return len(d), a.DType == Bool
	}
	return 0, false
}

// Validate checks that DType is supported, Data's element type matches it, and
// len(Data) equals the number of elements Shape describes.
func (a *Array) Validate() error {
	if a == nil {
		return fmt.Errorf("nil array")
	}
	if itemSize(a.DType) == 0 {
		return fmt.Errorf("unsupported dtype %q (want one of float32, float64, int64, int32, int16, int8, uint8, bool)", a.DType)
	}
	n, ok := a.dataLen()
	if !ok {
		return fmt.Errorf("dtype %s does not match data of type %T", a.DType, a.Data)
	}
	want := a.Numel()
	if want < 0 {
		return fmt.Errorf("invalid shape %s", ShapeString(a.Shape))
	}
	if int64(n) != want {
		return fmt.Errorf("shape %s needs %d elements, data has %d", ShapeString(a.Shape), want, n)
	}
	return nil
}

// Float32s returns the elements converted to float32 (bool as 0 or 1). For a float32
// array it returns the Data slice itself, not a copy.
func (a *Array) Float32s() ([]float32, error) {
	switch d := a.Data.(type) {
	case []float32:
		return d, nil
	case []float64:
		return convert(d), nil
	case []int64:
		return convert(d), nil
	case []int32:
		return convert(d), nil
	case []int16:
		return convert(d), nil
	case []int8:
		return convert(d), nil
	case []uint8:
		return convert(d), nil
	case []bool:
		out := make([]float32, len(d))
		for i, b := range d {
			if b {
				out[i] = 1
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("array data of type %T cannot be converted to float32", a.Data)
}

// Int64s returns the elements converted to int64 (bool as 0 or 1). Floating-point data
// is rejected rather than truncated, because token ids and labels must be exact. For an
// int64 array it returns the Data slice itself, not a copy.
func (a *Array) Int64s() ([]int64, error) {
	switch d := a.Data.(type) {
	case []int64:
		return d, nil
	case []int32:
		return convertInt(d), nil
	case []int16:
		return convertInt(d), nil
	case []int8:
		return convertInt(d), nil
	case []uint8:
		return convertInt(d), nil
	case []bool:
		out := make([]int64, len(d))
		for i, b := range d {
			if b {
				out[i] = 1
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("array of dtype %s cannot be read as integers; save it with .astype(np.int64)", a.DType)
}

func convert[T float64 | int64 | int32 | int16 | int8 | uint8](d []T) []float32 {
	out := make([]float32, len(d))
	for i, v := range d {
		out[i] = float32(v)
	}
	return out
}

func convertInt[T int32 | int16 | int8 | uint8](d []T) []int64 {
	out := make([]int64, len(d))
	for i, v := range d {
		out[i] = int64(v)
	}
	return out
}

// FromFloat32 returns a float32 array over d (not copied) with a copy of shape.
func FromFloat32(shape []int64, d []float32) *Array {
	return &Array{Shape: append([]int64{}, shape...), DType: Float32, Data: d}
}

// FromInt64 returns an int64 array over d (not copied) with a copy of shape.
func FromInt64(shape []int64, d []int64) *Array {
	return &Array{Shape: append([]int64{}, shape...), DType: Int64, Data: d}
}

// ShapeString formats a shape as "3x224x224" ("scalar" for a 0-d shape), the form used
// in error messages.
func ShapeString(shape []int64) string {
	if len(shape) == 0 {
		return "scalar"
	}
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return strings.Join(parts, "x")
}

// SplitData returns part i of data (an Array's Data slice) cut into parts equal parts along
// its first axis: call i of a sequence stacked along axis 0. It shares data's memory.
func SplitData(data any, parts, i int) (any, error) {
	if parts <= 0 || i < 0 || i >= parts {
		return nil, fmt.Errorf("part %d of %d", i, parts)
	}
	per := sliceLen(data) / parts
	d, err := SliceData(data, i*per, (i+1)*per)
	if err != nil {
		return nil, fmt.Errorf("arrays of %T cannot be split into calls", data)
	}
	return d, nil
}

// SliceData returns elements lo to hi (exclusive) of data (an Array's Data slice), sharing its
// memory: e.g. a batch of samples.
func SliceData(data any, lo, hi int) (any, error) {
	switch d := data.(type) {
	case []float32:
		return slice(d, lo, hi)
	case []float64:
		return slice(d, lo, hi)
	case []int64:
		return slice(d, lo, hi)
	case []int32:
		return slice(d, lo, hi)
	case []int16:
		return slice(d, lo, hi)
	case []int8:
		return slice(d, lo, hi)
	case []uint8:
		return slice(d, lo, hi)
	case []bool:
		return slice(d, lo, hi)
	}
	return nil, fmt.Errorf("unsupported array data %T", data)
}

func slice[T any](d []T, lo, hi int) (any, error) {
	if lo < 0 || hi < lo || hi > len(d) {
		return nil, fmt.Errorf("elements %d to %d of %d", lo, hi, len(d))
	}
	return d[lo:hi], nil
}

// FirstNonFinite is the index of the first NaN or infinite element of data (an Array's Data
// slice), or -1: integer and bool data have none.
func FirstNonFinite(data any) int {
	switch d := data.(type) {
	case []float32:
		for i, v := range d {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return i
			}
		}
	case []float64:
		for i, v := range d {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return i
			}
		}
	}
	return -1
}
