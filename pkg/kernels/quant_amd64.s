//go:build gc && !purego

#include "textflag.h"

// The float clamp bounds ±2^30 (see clampF in quant_generic.go).
#define NEG2P30 $0xce800000
#define POS2P30 $0x4e800000

// Y0 holds eight float32 to round: clamp to ±2^30 (NaN -> -2^30: vmaxps
// returns its second source when either is NaN), round half to even
// (MXCSR default), add the zero point (Y11), clamp to [qmin, qmax]
// (Y12, Y13), keep the low byte of each dword (Y14 = 0xff), pack to bytes and
// store eight bytes at (DI).
#define ROUNDPACK8 \
	VMAXPS       Y9, Y0, Y0; \
	VMINPS       Y10, Y0, Y0; \
	VCVTPS2DQ    Y0, Y0; \
	VPADDD       Y11, Y0, Y0; \
	VPMAXSD      Y12, Y0, Y0; \
	VPMINSD      Y13, Y0, Y0; \
	VPAND        Y14, Y0, Y0; \
	VEXTRACTI128 $1, Y0, X1; \
	VPACKUSDW    X1, X0, X0; \
	VPACKUSWB    X0, X0, X0; \
	VMOVQ        X0, (DI)

// Constants for ROUNDPACK8; zp, qmin, qmax are loaded by the caller.
#define ROUNDCONSTS8 \
	MOVL         NEG2P30, AX; \
	VMOVD        AX, X9; \
	VPBROADCASTD X9, Y9; \
	MOVL         POS2P30, AX; \
	VMOVD        AX, X10; \
	VPBROADCASTD X10, Y10; \
	VPCMPEQD     Y14, Y14, Y14; \
	VPSRLD       $24, Y14, Y14

// func quantizeAVX2(dst *byte, src *float32, n int, inv float32, zp, qmin, qmax int32)
// n must be a multiple of 8.
TEXT ·quantizeAVX2(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS inv+24(FP), Y8
	MOVL         zp+28(FP), AX
	VMOVD        AX, X11
	VPBROADCASTD X11, Y11
	MOVL         qmin+32(FP), AX
	VMOVD        AX, X12
	VPBROADCASTD X12, Y12
	MOVL         qmax+36(FP), AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Y13
	ROUNDCONSTS8

loop:
	CMPQ   CX, $8
	JL     done
	VMULPS (SI), Y8, Y0
	ROUNDPACK8
	ADDQ   $32, SI
	ADDQ   $8, DI
	SUBQ   $8, CX
	JMP    loop

done:
	VZEROUPPER
	RET

// func requantAVX2(dst *byte, acc *int32, mult, off *float32, n int, zp, qmin, qmax int32)
// n must be a multiple of 8.
TEXT ·requantAVX2(SB), NOSPLIT, $0-52
	MOVQ         dst+0(FP), DI
	MOVQ         acc+8(FP), SI
	MOVQ         mult+16(FP), BX
	MOVQ         off+24(FP), DX
	MOVQ         n+32(FP), CX
	MOVL         zp+40(FP), AX
	VMOVD        AX, X11
	VPBROADCASTD X11, Y11
	MOVL         qmin+44(FP), AX
	VMOVD        AX, X12
	VPBROADCASTD X12, Y12
	MOVL         qmax+48(FP), AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Y13
	ROUNDCONSTS8

loop:
	CMPQ      CX, $8
	JL        done
	VCVTDQ2PS (SI), Y0
	VMULPS    (BX), Y0, Y0
	VADDPS    (DX), Y0, Y0
	ROUNDPACK8
	ADDQ      $32, SI
	ADDQ      $32, BX
	ADDQ      $32, DX
	ADDQ      $8, DI
	SUBQ      $8, CX
	JMP       loop

done:
	VZEROUPPER
	RET

// func dequantU8AVX2(dst *float32, src *uint8, n int, scale float32, zp int32)
// n must be a multiple of 8.
TEXT ·dequantU8AVX2(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y8
	MOVL         zp+28(FP), AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Y9

loop:
	CMPQ      CX, $8
	JL        done
	VPMOVZXBD (SI), Y0
	VPSUBD    Y9, Y0, Y0
	VCVTDQ2PS Y0, Y0
	VMULPS    Y8, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $8, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       loop

done:
	VZEROUPPER
	RET

// func dequantS8AVX2(dst *float32, src *int8, n int, scale float32, zp int32)
// n must be a multiple of 8.
TEXT ·dequantS8AVX2(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y8
	MOVL         zp+28(FP), AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Y9

loop:
	CMPQ      CX, $8
	JL        done
	VPMOVSXBD (SI), Y0
	VPSUBD    Y9, Y0, Y0
	VCVTDQ2PS Y0, Y0
	VMULPS    Y8, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $8, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       loop

done:
	VZEROUPPER
	RET

// AVX-512 versions: sixteen values per step; vpmovdb truncates the clamped
// dwords to bytes.
#define ROUNDPACK16 \
	VMAXPS    Z9, Z0, Z0; \
	VMINPS    Z10, Z0, Z0; \
	VCVTPS2DQ Z0, Z0; \
	VPADDD    Z11, Z0, Z0; \
	VPMAXSD   Z12, Z0, Z0; \
	VPMINSD   Z13, Z0, Z0; \
	VPMOVDB   Z0, X0; \
	VMOVDQU   X0, (DI)

#define ROUNDCONSTS16 \
	MOVL         NEG2P30, AX; \
	VMOVD        AX, X9; \
	VPBROADCASTD X9, Z9; \
	MOVL         POS2P30, AX; \
	VMOVD        AX, X10; \
	VPBROADCASTD X10, Z10

// func quantizeAVX512(dst *byte, src *float32, n int, inv float32, zp, qmin, qmax int32)
// n must be a multiple of 16.
TEXT ·quantizeAVX512(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS inv+24(FP), Z8
	MOVL         zp+28(FP), AX
	VMOVD        AX, X11
	VPBROADCASTD X11, Z11
	MOVL         qmin+32(FP), AX
	VMOVD        AX, X12
	VPBROADCASTD X12, Z12
	MOVL         qmax+36(FP), AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Z13
	ROUNDCONSTS16

loop:
	CMPQ   CX, $16
	JL     done
	VMULPS (SI), Z8, Z0
	ROUNDPACK16
	ADDQ   $64, SI
	ADDQ   $16, DI
	SUBQ   $16, CX
	JMP    loop

done:
	VZEROUPPER
	RET

// func requantAVX512(dst *byte, acc *int32, mult, off *float32, n int, zp, qmin, qmax int32)
// n must be a multiple of 16.
TEXT ·requantAVX512(SB), NOSPLIT, $0-52
	MOVQ         dst+0(FP), DI
	MOVQ         acc+8(FP), SI
	MOVQ         mult+16(FP), BX
	MOVQ         off+24(FP), DX
	MOVQ         n+32(FP), CX
	MOVL         zp+40(FP), AX
	VMOVD        AX, X11
	VPBROADCASTD X11, Z11
	MOVL         qmin+44(FP), AX
	VMOVD        AX, X12
	VPBROADCASTD X12, Z12
	MOVL         qmax+48(FP), AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Z13
	ROUNDCONSTS16

loop:
	CMPQ      CX, $16
	JL        done
	VCVTDQ2PS (SI), Z0
	VMULPS    (BX), Z0, Z0
	VADDPS    (DX), Z0, Z0
	ROUNDPACK16
	ADDQ      $64, SI
	ADDQ      $64, BX
	ADDQ      $64, DX
	ADDQ      $16, DI
	SUBQ      $16, CX
	JMP       loop

done:
	VZEROUPPER
	RET

// func dequantU8AVX512(dst *float32, src *uint8, n int, scale float32, zp int32)
// n must be a multiple of 16.
TEXT ·dequantU8AVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Z8
	MOVL         zp+28(FP), AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Z9

loop:
	CMPQ      CX, $16
	JL        done
	VPMOVZXBD (SI), Z0
	VPSUBD    Z9, Z0, Z0
	VCVTDQ2PS Z0, Z0
	VMULPS    Z8, Z0, Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $16, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       loop

done:
	VZEROUPPER
	RET

// func dequantS8AVX512(dst *float32, src *int8, n int, scale float32, zp int32)
// n must be a multiple of 16.
TEXT ·dequantS8AVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Z8
	MOVL         zp+28(FP), AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Z9

loop:
	CMPQ      CX, $16
	JL        done
	VPMOVSXBD (SI), Z0
	VPSUBD    Z9, Z0, Z0
	VCVTDQ2PS Z0, Z0
	VMULPS    Z8, Z0, Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $16, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       loop

done:
	VZEROUPPER
	RET
