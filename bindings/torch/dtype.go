package torch

import (
	"fmt"
	"strings"
)

// DType is a tensor element type. Values equal the shim's TS_* codes.
type DType int32

// Element types. The quantized ones only come back from libtorch; NewTensor takes the others.
const (
	Float32  DType = 0
	Float64  DType = 1
	Int64    DType = 2
	Int32    DType = 3
	Uint8    DType = 4
	Bool     DType = 5
	Int8     DType = 6
	Int16    DType = 7
	Float16  DType = 8
	BFloat16 DType = 9
	QUint8   DType = 10
	QInt8    DType = 11
	QInt32   DType = 12
)

var dtypeNames = map[DType]string{
	Float32: "float32", Float64: "float64", Int64: "int64", Int32: "int32", Uint8: "uint8",
	Bool: "bool", Int8: "int8", Int16: "int16", Float16: "float16", BFloat16: "bfloat16",
	QUint8: "quint8", QInt8: "qint8", QInt32: "qint32",
}

func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return fmt.Sprintf("dtype(%d)", int32(d))
}

// Size is the element size in bytes (quantized types: their integer representation).
func (d DType) Size() int {
	switch d {
	case Float64, Int64:
		return 8
	case Float32, Int32, QInt32:
		return 4
	case Int16, Float16, BFloat16:
		return 2
	default:
		return 1
	}
}

// ParseDType accepts numpy/PyTorch spellings: float32, float, f4, int64, long, i8, ...
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(s, "torch."), "np.")) {
	case "float32", "float", "f4", "fp32":
		return Float32, nil
	case "float64", "double", "f8", "fp64":
		return Float64, nil
	case "int64", "long", "i8":
		return Int64, nil
	case "int32", "int", "i4":
		return Int32, nil
	case "uint8", "u1", "byte":
		return Uint8, nil
	case "bool", "b1":
		return Bool, nil
	case "int8", "i1":
		return Int8, nil
	case "int16", "short", "i2":
		return Int16, nil
	}
	return 0, fmt.Errorf("unknown dtype %q: use float32, float64, int64, int32, uint8 or bool", s)
}
