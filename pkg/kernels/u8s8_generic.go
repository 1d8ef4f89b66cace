package kernels

import "encoding/binary"

// dotU8S8Impl is one implementation of the u8 x s8 -> s32 dot product; fn
// takes equal-length slices of any length. Sums wrap modulo 2^32 (they cannot
// overflow below 65793 elements).
type dotU8S8Impl struct {
	path Path
	fn   func(x []uint8, y []int8) int32
}

// packFormat is the layout of packed u8 x s8 GEMM panels.
type packFormat int

const (
	// packQuad groups k by 4: a holds, per group, mr rows x 4 u8; b holds
	// nr columns x 4 s8. This is vpdpbusd's layout (VNNI paths, generic).
	packQuad packFormat = iota
	// packPair groups k by 2 and widens to little-endian int16: a holds,
	// per group, mr rows x 2 int16 (zero-extended u8); b nr columns x 2
	// int16 (sign-extended s8). This is vpmaddwd's layout (AVX2/AVX-512
	// without VNNI), exact where vpmaddubsw would saturate.
	packPair
)

// groupK is how many k values one group of the format holds.
func (f packFormat) groupK() int {
	if f == packQuad {
		return 4
	}
	return 2
}

// elemBytes is the size of one packed value.
func (f packFormat) elemBytes() int {
	if f == packQuad {
		return 1
	}
	return 2
}

// gemmU8S8Impl is one u8 x s8 -> s32 GEMM micro-kernel. fn adds the mr x nr
// product of two packed panels of kg k-groups (format) into c:
//
//	c[i*ldc+j] += sum over k of A[i][k] * B[k][j]   (int32, wrapping)
type gemmU8S8Impl struct {
	path   Path
	mr, nr int
	format packFormat
	fn     func(kg int, a, b []byte, c []int32, ldc int)
}

func dotU8S8Impls() []dotU8S8Impl {
	return append([]dotU8S8Impl{{Generic, dotU8S8Generic}}, asmDotU8S8...)
}

func gemmU8S8Impls() []gemmU8S8Impl {
	return append([]gemmU8S8Impl{{Generic, 4, 8, packQuad, func(kg int, a, b []byte, c []int32, ldc int) {
		gemmU8S8MicroGeneric(packQuad, 4, 8, kg, a, b, c, ldc)
	}}}, asmGemmU8S8...)
}

func dotU8S8Generic(x []uint8, y []int8) int32 {
	y = y[:len(x)]
	var s int32
	for i, v := range x {
		s += int32(v) * int32(y[i])
	}
	return s
}

// gemmU8S8MicroGeneric is the reference micro-kernel for either format.
func gemmU8S8MicroGeneric(f packFormat, mr, nr, kg int, a, b []byte, c []int32, ldc int) {
	g, e := f.groupK(), f.elemBytes()
	a = a[:kg*mr*g*e]
	b = b[:kg*nr*g*e]
	for i := 0; i < mr; i++ {
		for j := 0; j < nr; j++ {
			var s int32
			for q := 0; q < kg; q++ {
				for t := 0; t < g; t++ {
					ai := ((q*mr+i)*g + t) * e
					bi := ((q*nr+j)*g + t) * e
					if f == packQuad {
						s += int32(a[ai]) * int32(int8(b[bi]))
					} else {
						s += int32(int16(binary.LittleEndian.Uint16(a[ai:]))) *
							int32(int16(binary.LittleEndian.Uint16(b[bi:])))
					}
				}
			}
			c[i*ldc+j] += s
		}
	}
}
