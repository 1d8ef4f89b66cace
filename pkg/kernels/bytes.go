package kernels

import "unsafe"

// int8Bytes views an []int8 as []byte (same size, no copy): the kernels
// write the two's complement low byte, which is the int8.
func int8Bytes(s []int8) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s))
}
