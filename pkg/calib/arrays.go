package calib

import "fmt"

// sampleNumel is the number of elements in one sample of an [n, ...] array.
func sampleNumel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape[1:] {
		n *= d
	}
	return n
}

// numelOf is the number of elements of an array of the given shape.
func numelOf(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

func nonFiniteName(data any, i int) string {
	switch d := data.(type) {
	case []float32:
		return fmt.Sprint(d[i])
	case []float64:
		return fmt.Sprint(d[i])
	}
	return "non-finite"
}

func sliceOf(data any, lo, hi int) any {
	switch d := data.(type) {
	case []float32:
		return d[lo:hi:hi]
	case []float64:
		return d[lo:hi:hi]
	case []int64:
		return d[lo:hi:hi]
	case []int32:
		return d[lo:hi:hi]
	case []int16:
		return d[lo:hi:hi]
	case []int8:
		return d[lo:hi:hi]
	case []uint8:
		return d[lo:hi:hi]
	case []bool:
		return d[lo:hi:hi]
	}
	return nil
}

// copyAt copies src into dst starting at element off; both must have the same type.
func copyAt(dst any, off int, src any) {
	switch d := dst.(type) {
	case []float32:
		copy(d[off:], src.([]float32))
	case []float64:
		copy(d[off:], src.([]float64))
	case []int64:
		copy(d[off:], src.([]int64))
	case []int32:
		copy(d[off:], src.([]int32))
	case []int16:
		copy(d[off:], src.([]int16))
	case []int8:
		copy(d[off:], src.([]int8))
	case []uint8:
		copy(d[off:], src.([]uint8))
	case []bool:
		copy(d[off:], src.([]bool))
	}
}
