//go:build gc && !purego

#include "textflag.h"

// func dotF32AVX2(x, y *float32, n int) float32
// n must be a multiple of 8.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ CX, $32
	JL   loop8
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         loop32

loop8:
	CMPQ CX, $8
	JL   reduce
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         loop8

reduce:
	VADDPS       Y2, Y0, Y0
	VADDPS       Y3, Y1, Y1
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VADDPS       X1, X0, X0
	VMOVSHDUP    X0, X1
	VADDSS       X1, X0, X0
	VZEROUPPER
	MOVSS        X0, ret+24(FP)
	RET

// func dotF32AVX512(x, y *float32, n int) float32
// n must be a multiple of 16.
TEXT ·dotF32AVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3

loop64:
	CMPQ CX, $64
	JL   loop16
	VMOVUPS     (SI), Z4
	VMOVUPS     64(SI), Z5
	VMOVUPS     128(SI), Z6
	VMOVUPS     192(SI), Z7
	VFMADD231PS (DI), Z4, Z0
	VFMADD231PS 64(DI), Z5, Z1
	VFMADD231PS 128(DI), Z6, Z2
	VFMADD231PS 192(DI), Z7, Z3
	ADDQ        $256, SI
	ADDQ        $256, DI
	SUBQ        $64, CX
	JMP         loop64

loop16:
	CMPQ CX, $16
	JL   reduce
	VMOVUPS     (SI), Z4
	VFMADD231PS (DI), Z4, Z0
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JMP         loop16

reduce:
	VADDPS        Z2, Z0, Z0
	VADDPS        Z3, Z1, Z1
	VADDPS        Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VADDPS        X1, X0, X0
	VMOVSHDUP     X0, X1
	VADDSS        X1, X0, X0
	VZEROUPPER
	MOVSS         X0, ret+24(FP)
	RET

// One k step of the 6x16 AVX2 kernel for row r: broadcast a[r], two FMAs.
#define F32ROW6(off, bc, acc0, acc1) \
	VBROADCASTSS off(SI), bc; \
	VFMADD231PS  Y12, bc, acc0; \
	VFMADD231PS  Y13, bc, acc1

// Add an accumulator pair into one row of c and step to the next row.
#define F32STORE2Y(acc0, acc1) \
	VADDPS  (DX), acc0, acc0; \
	VMOVUPS acc0, (DX); \
	VADDPS  32(DX), acc1, acc1; \
	VMOVUPS acc1, 32(DX); \
	ADDQ    BX, DX

// func gemmF32AVX2(kc int, a, b, c *float32, ldc int)
// 6x16 micro-kernel: twelve ymm accumulators; per k, two loads of b, six
// broadcasts of a, twelve FMAs.
TEXT ·gemmF32AVX2(SB), NOSPLIT, $0-40
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), BX
	SHLQ $2, BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JLE   store

loop:
	VMOVUPS (DI), Y12
	VMOVUPS 32(DI), Y13
	F32ROW6(0, Y14, Y0, Y1)
	F32ROW6(4, Y15, Y2, Y3)
	F32ROW6(8, Y14, Y4, Y5)
	F32ROW6(12, Y15, Y6, Y7)
	F32ROW6(16, Y14, Y8, Y9)
	F32ROW6(20, Y15, Y10, Y11)
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop

store:
	F32STORE2Y(Y0, Y1)
	F32STORE2Y(Y2, Y3)
	F32STORE2Y(Y4, Y5)
	F32STORE2Y(Y6, Y7)
	F32STORE2Y(Y8, Y9)
	F32STORE2Y(Y10, Y11)
	VZEROUPPER
	RET

#define F32ROW12(off, bc, acc0, acc1) \
	VBROADCASTSS off(SI), bc; \
	VFMADD231PS  Z24, bc, acc0; \
	VFMADD231PS  Z25, bc, acc1

#define F32STORE2Z(acc0, acc1) \
	VADDPS  (DX), acc0, acc0; \
	VMOVUPS acc0, (DX); \
	VADDPS  64(DX), acc1, acc1; \
	VMOVUPS acc1, 64(DX); \
	ADDQ    BX, DX

// func gemmF32AVX512(kc int, a, b, c *float32, ldc int)
// 12x32 micro-kernel: 24 zmm accumulators; per k, two loads of b, twelve
// broadcasts of a, 24 FMAs.
TEXT ·gemmF32AVX512(SB), NOSPLIT, $0-40
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), BX
	SHLQ $2, BX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	TESTQ CX, CX
	JLE   store

loop:
	VMOVUPS (DI), Z24
	VMOVUPS 64(DI), Z25
	F32ROW12(0, Z26, Z0, Z1)
	F32ROW12(4, Z27, Z2, Z3)
	F32ROW12(8, Z28, Z4, Z5)
	F32ROW12(12, Z29, Z6, Z7)
	F32ROW12(16, Z30, Z8, Z9)
	F32ROW12(20, Z31, Z10, Z11)
	F32ROW12(24, Z26, Z12, Z13)
	F32ROW12(28, Z27, Z14, Z15)
	F32ROW12(32, Z28, Z16, Z17)
	F32ROW12(36, Z29, Z18, Z19)
	F32ROW12(40, Z30, Z20, Z21)
	F32ROW12(44, Z31, Z22, Z23)
	ADDQ $48, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop

store:
	F32STORE2Z(Z0, Z1)
	F32STORE2Z(Z2, Z3)
	F32STORE2Z(Z4, Z5)
	F32STORE2Z(Z6, Z7)
	F32STORE2Z(Z8, Z9)
	F32STORE2Z(Z10, Z11)
	F32STORE2Z(Z12, Z13)
	F32STORE2Z(Z14, Z15)
	F32STORE2Z(Z16, Z17)
	F32STORE2Z(Z18, Z19)
	F32STORE2Z(Z20, Z21)
	F32STORE2Z(Z22, Z23)
	VZEROUPPER
	RET
