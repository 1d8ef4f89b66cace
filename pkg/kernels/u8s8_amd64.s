//go:build gc && !purego

#include "textflag.h"

// VNNIY(d, u, s) is the VEX-encoded (AVX-VNNI) vpdpbusd ymm<d>, ymm<u>, ymm<s>:
// ymm<d>.dword[i] += sum of 4 products u8(ymm<u>) * s8(ymm<s>). The Go
// assembler only emits the EVEX form, which needs AVX-512 VL, so the VEX
// bytes are spelled out: C4, RXB.m-mmmm(0F38), W.vvvv.L.pp(66), 50, ModRM.
#define VNNIY(d, u, s) BYTE $0xC4; BYTE $(0xE2 ^ (((d)>>3)<<7) ^ (((s)>>3)<<5)); BYTE $((((15-(u))&15)<<3)|0x05); BYTE $0x50; BYTE $(0xC0|(((d)&7)<<3)|((s)&7))

// Horizontal sum of the eight dwords of Y0 into X0's low dword.
#define HSUMD_Y0 \
	VEXTRACTI128 $1, Y0, X1; \
	VPADDD       X1, X0, X0; \
	VPSHUFD      $0x4e, X0, X1; \
	VPADDD       X1, X0, X0; \
	VPSHUFD      $0xb1, X0, X1; \
	VPADDD       X1, X0, X0; \
	VZEROUPPER

// func dotU8S8AVX2(x *uint8, y *int8, n int) int32
// n must be a multiple of 16. Both operands are widened to int16 and
// multiplied with vpmaddwd, which cannot saturate for u8 x s8.
TEXT ·dotU8S8AVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1

loop32:
	CMPQ CX, $32
	JL   loop16
	VPMOVZXBW (SI), Y2
	VPMOVSXBW (DI), Y3
	VPMADDWD  Y3, Y2, Y2
	VPADDD    Y2, Y0, Y0
	VPMOVZXBW 16(SI), Y4
	VPMOVSXBW 16(DI), Y5
	VPMADDWD  Y5, Y4, Y4
	VPADDD    Y4, Y1, Y1
	ADDQ      $32, SI
	ADDQ      $32, DI
	SUBQ      $32, CX
	JMP       loop32

loop16:
	CMPQ CX, $16
	JL   reduce
	VPMOVZXBW (SI), Y2
	VPMOVSXBW (DI), Y3
	VPMADDWD  Y3, Y2, Y2
	VPADDD    Y2, Y0, Y0
	ADDQ      $16, SI
	ADDQ      $16, DI
	SUBQ      $16, CX
	JMP       loop16

reduce:
	VPADDD Y1, Y0, Y0
	HSUMD_Y0
	MOVL X0, ret+24(FP)
	RET

// func dotU8S8AVXVNNI(x *uint8, y *int8, n int) int32
// n must be a multiple of 32.
TEXT ·dotU8S8AVXVNNI(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1

loop64:
	CMPQ CX, $64
	JL   loop32
	VMOVDQU (SI), Y2
	VMOVDQU (DI), Y3
	VNNIY(0, 2, 3)
	VMOVDQU 32(SI), Y4
	VMOVDQU 32(DI), Y5
	VNNIY(1, 4, 5)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $64, CX
	JMP     loop64

loop32:
	CMPQ CX, $32
	JL   reduce
	VMOVDQU (SI), Y2
	VMOVDQU (DI), Y3
	VNNIY(0, 2, 3)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $32, CX
	JMP     loop32

reduce:
	VPADDD Y1, Y0, Y0
	HSUMD_Y0
	MOVL X0, ret+24(FP)
	RET

// func dotU8S8AVX512(x *uint8, y *int8, n int) int32
// n must be a multiple of 32 (AVX-512 BW, widened like the AVX2 path).
TEXT ·dotU8S8AVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1

loop64:
	CMPQ CX, $64
	JL   loop32
	VPMOVZXBW (SI), Z2
	VPMOVSXBW (DI), Z3
	VPMADDWD  Z3, Z2, Z2
	VPADDD    Z2, Z0, Z0
	VPMOVZXBW 32(SI), Z4
	VPMOVSXBW 32(DI), Z5
	VPMADDWD  Z5, Z4, Z4
	VPADDD    Z4, Z1, Z1
	ADDQ      $64, SI
	ADDQ      $64, DI
	SUBQ      $64, CX
	JMP       loop64

loop32:
	CMPQ CX, $32
	JL   reduce
	VPMOVZXBW (SI), Z2
	VPMOVSXBW (DI), Z3
	VPMADDWD  Z3, Z2, Z2
	VPADDD    Z2, Z0, Z0
	ADDQ      $32, SI
	ADDQ      $32, DI
	SUBQ      $32, CX
	JMP       loop32

reduce:
	VPADDD        Z1, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD        Y1, Y0, Y0
	HSUMD_Y0
	MOVL X0, ret+24(FP)
	RET

// func dotU8S8AVX512VNNI(x *uint8, y *int8, n int) int32
// n must be a multiple of 64.
TEXT ·dotU8S8AVX512VNNI(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1

loop128:
	CMPQ CX, $128
	JL   loop64
	VMOVDQU8 (SI), Z2
	VPDPBUSD (DI), Z2, Z0
	VMOVDQU8 64(SI), Z3
	VPDPBUSD 64(DI), Z3, Z1
	ADDQ     $128, SI
	ADDQ     $128, DI
	SUBQ     $128, CX
	JMP      loop128

loop64:
	CMPQ CX, $64
	JL   reduce
	VMOVDQU8 (SI), Z2
	VPDPBUSD (DI), Z2, Z0
	ADDQ     $64, SI
	ADDQ     $64, DI
	SUBQ     $64, CX
	JMP      loop64

reduce:
	VPADDD        Z1, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD        Y1, Y0, Y0
	HSUMD_Y0
	MOVL X0, ret+24(FP)
	RET

// ---- GEMM micro-kernels ----

#define ZEROY12 \
	VPXOR Y0, Y0, Y0; VPXOR Y1, Y1, Y1; VPXOR Y2, Y2, Y2; VPXOR Y3, Y3, Y3; \
	VPXOR Y4, Y4, Y4; VPXOR Y5, Y5, Y5; VPXOR Y6, Y6, Y6; VPXOR Y7, Y7, Y7; \
	VPXOR Y8, Y8, Y8; VPXOR Y9, Y9, Y9; VPXOR Y10, Y10, Y10; VPXOR Y11, Y11, Y11

#define ZEROZ24 \
	VPXORD Z0, Z0, Z0; VPXORD Z1, Z1, Z1; VPXORD Z2, Z2, Z2; VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; VPXORD Z5, Z5, Z5; VPXORD Z6, Z6, Z6; VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; VPXORD Z9, Z9, Z9; VPXORD Z10, Z10, Z10; VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; VPXORD Z13, Z13, Z13; VPXORD Z14, Z14, Z14; VPXORD Z15, Z15, Z15; \
	VPXORD Z16, Z16, Z16; VPXORD Z17, Z17, Z17; VPXORD Z18, Z18, Z18; VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; VPXORD Z21, Z21, Z21; VPXORD Z22, Z22, Z22; VPXORD Z23, Z23, Z23

#define I32STORE2Y(acc0, acc1) \
	VPADDD  (DX), acc0, acc0; \
	VMOVDQU acc0, (DX); \
	VPADDD  32(DX), acc1, acc1; \
	VMOVDQU acc1, 32(DX); \
	ADDQ    BX, DX

#define I32STORE2Z(acc0, acc1) \
	VPADDD    (DX), acc0, acc0; \
	VMOVDQU32 acc0, (DX); \
	VPADDD    64(DX), acc1, acc1; \
	VMOVDQU32 acc1, 64(DX); \
	ADDQ      BX, DX

// Pair format, AVX2: one row = broadcast the row's two int16 (one dword),
// vpmaddwd with both column vectors, add into the accumulators.
#define PAIRROW6(off, acc0, acc1) \
	VPBROADCASTD off(SI), Y14; \
	VPMADDWD     Y12, Y14, Y15; \
	VPADDD       Y15, acc0, acc0; \
	VPMADDWD     Y13, Y14, Y15; \
	VPADDD       Y15, acc1, acc1

// func gemmU8S8AVX2(kg int, a, b *byte, c *int32, ldc int)
// 6x16, pair format (k in pairs, int16).
TEXT ·gemmU8S8AVX2(SB), NOSPLIT, $0-40
	MOVQ kg+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), BX
	SHLQ $2, BX
	ZEROY12
	TESTQ CX, CX
	JLE   store

loop:
	VMOVDQU (DI), Y12
	VMOVDQU 32(DI), Y13
	PAIRROW6(0, Y0, Y1)
	PAIRROW6(4, Y2, Y3)
	PAIRROW6(8, Y4, Y5)
	PAIRROW6(12, Y6, Y7)
	PAIRROW6(16, Y8, Y9)
	PAIRROW6(20, Y10, Y11)
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop

store:
	I32STORE2Y(Y0, Y1)
	I32STORE2Y(Y2, Y3)
	I32STORE2Y(Y4, Y5)
	I32STORE2Y(Y6, Y7)
	I32STORE2Y(Y8, Y9)
	I32STORE2Y(Y10, Y11)
	VZEROUPPER
	RET

// Quad format, AVX-VNNI: broadcast the row's four u8 (one dword), vpdpbusd
// with both s8 column vectors.
#define QUADROW6(off, bc, bcn, acc0n, acc1n) \
	VPBROADCASTD off(SI), bc; \
	VNNIY(acc0n, bcn, 12); \
	VNNIY(acc1n, bcn, 13)

// func gemmU8S8AVXVNNI(kg int, a, b *byte, c *int32, ldc int)
// 6x16, quad format (k in groups of four bytes).
TEXT ·gemmU8S8AVXVNNI(SB), NOSPLIT, $0-40
	MOVQ kg+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), BX
	SHLQ $2, BX
	ZEROY12
	TESTQ CX, CX
	JLE   store

loop:
	VMOVDQU (DI), Y12
	VMOVDQU 32(DI), Y13
	QUADROW6(0, Y14, 14, 0, 1)
	QUADROW6(4, Y15, 15, 2, 3)
	QUADROW6(8, Y14, 14, 4, 5)
	QUADROW6(12, Y15, 15, 6, 7)
	QUADROW6(16, Y14, 14, 8, 9)
	QUADROW6(20, Y15, 15, 10, 11)
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop

store:
	I32STORE2Y(Y0, Y1)
	I32STORE2Y(Y2, Y3)
	I32STORE2Y(Y4, Y5)
	I32STORE2Y(Y6, Y7)
	I32STORE2Y(Y8, Y9)
	I32STORE2Y(Y10, Y11)
	VZEROUPPER
	RET

#define PAIRROW12(off, bc, tmp, acc0, acc1) \
	VPBROADCASTD off(SI), bc; \
	VPMADDWD     Z24, bc, tmp; \
	VPADDD       tmp, acc0, acc0; \
	VPMADDWD     Z25, bc, tmp; \
	VPADDD       tmp, acc1, acc1

// func gemmU8S8AVX512(kg int, a, b *byte, c *int32, ldc int)
// 12x32, pair format, AVX-512 BW.
TEXT ·gemmU8S8AVX512(SB), NOSPLIT, $0-40
	MOVQ kg+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), BX
	SHLQ $2, BX
	ZEROZ24
	TESTQ CX, CX
	JLE   store

loop:
	VMOVDQU32 (DI), Z24
	VMOVDQU32 64(DI), Z25
	PAIRROW12(0, Z26, Z29, Z0, Z1)
	PAIRROW12(4, Z27, Z30, Z2, Z3)
	PAIRROW12(8, Z28, Z31, Z4, Z5)
	PAIRROW12(12, Z26, Z29, Z6, Z7)
	PAIRROW12(16, Z27, Z30, Z8, Z9)
	PAIRROW12(20, Z28, Z31, Z10, Z11)
	PAIRROW12(24, Z26, Z29, Z12, Z13)
	PAIRROW12(28, Z27, Z30, Z14, Z15)
	PAIRROW12(32, Z28, Z31, Z16, Z17)
	PAIRROW12(36, Z26, Z29, Z18, Z19)
	PAIRROW12(40, Z27, Z30, Z20, Z21)
	PAIRROW12(44, Z28, Z31, Z22, Z23)
	ADDQ $48, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop

store:
	I32STORE2Z(Z0, Z1)
	I32STORE2Z(Z2, Z3)
	I32STORE2Z(Z4, Z5)
	I32STORE2Z(Z6, Z7)
	I32STORE2Z(Z8, Z9)
	I32STORE2Z(Z10, Z11)
	I32STORE2Z(Z12, Z13)
	I32STORE2Z(Z14, Z15)
	I32STORE2Z(Z16, Z17)
	I32STORE2Z(Z18, Z19)
	I32STORE2Z(Z20, Z21)
	I32STORE2Z(Z22, Z23)
	VZEROUPPER
	RET

#define QUADROW12(off, bc, acc0, acc1) \
	VPBROADCASTD off(SI), bc; \
	VPDPBUSD     Z24, bc, acc0; \
	VPDPBUSD     Z25, bc, acc1

// func gemmU8S8AVX512VNNI(kg int, a, b *byte, c *int32, ldc int)
// 12x32, quad format, AVX-512 VNNI.
TEXT ·gemmU8S8AVX512VNNI(SB), NOSPLIT, $0-40
	MOVQ kg+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), BX
	SHLQ $2, BX
	ZEROZ24
	TESTQ CX, CX
	JLE   store

loop:
	VMOVDQU32 (DI), Z24
	VMOVDQU32 64(DI), Z25
	QUADROW12(0, Z26, Z0, Z1)
	QUADROW12(4, Z27, Z2, Z3)
	QUADROW12(8, Z28, Z4, Z5)
	QUADROW12(12, Z29, Z6, Z7)
	QUADROW12(16, Z30, Z8, Z9)
	QUADROW12(20, Z31, Z10, Z11)
	QUADROW12(24, Z26, Z12, Z13)
	QUADROW12(28, Z27, Z14, Z15)
	QUADROW12(32, Z28, Z16, Z17)
	QUADROW12(36, Z29, Z18, Z19)
	QUADROW12(40, Z30, Z20, Z21)
	QUADROW12(44, Z31, Z22, Z23)
	ADDQ $48, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop

store:
	I32STORE2Z(Z0, Z1)
	I32STORE2Z(Z2, Z3)
	I32STORE2Z(Z4, Z5)
	I32STORE2Z(Z6, Z7)
	I32STORE2Z(Z8, Z9)
	I32STORE2Z(Z10, Z11)
	I32STORE2Z(Z12, Z13)
	I32STORE2Z(Z14, Z15)
	I32STORE2Z(Z16, Z17)
	I32STORE2Z(Z18, Z19)
	I32STORE2Z(Z20, Z21)
	I32STORE2Z(Z22, Z23)
	VZEROUPPER
	RET
