// GHASH on PCLMULQDQ. The table layout, the doubling of H, the Karatsuba
// products and the reduction follow crypto/internal/fips140/aes/gcm's
// gcm_amd64.s (Copyright 2015 The Go Authors; BSD-style license, Go's
// LICENSE file): the hash is kept byte-reflected, so that PCLMULQDQ's
// bit order is GCM's.

//go:build amd64 && !purego

#include "textflag.h"

DATA bswapMask<>+0(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+8(SB)/8, $0x0001020304050607
GLOBL bswapMask<>(SB), RODATA|NOPTR, $16

DATA gcmPoly<>+0(SB)/8, $0x0000000000000001
DATA gcmPoly<>+8(SB)/8, $0xc200000000000000
GLOBL gcmPoly<>(SB), RODATA|NOPTR, $16

// func encryptBlock(enc *byte, rounds int, dst, src *[16]byte)
// Requires: AES, SSE2
TEXT ·encryptBlock(SB), NOSPLIT, $0-32
	MOVQ  enc+0(FP), AX
	MOVQ  rounds+8(FP), CX
	MOVQ  dst+16(FP), DX
	MOVQ  src+24(FP), BX
	MOVOU (BX), X0
	MOVOU (AX), X1
	PXOR  X1, X0
	LEAQ  16(AX), AX
	DECQ  CX

encRound:
	MOVOU  (AX), X1
	AESENC X1, X0
	LEAQ   16(AX), AX
	DECQ   CX
	JNE    encRound
	MOVOU      (AX), X1
	AESENCLAST X1, X0
	MOVOU      X0, (DX)
	RET

// func initTable(table *[16][2]uint64, h *[16]byte)
// Requires: PCLMULQDQ, SSE2, SSSE3
TEXT ·initTable(SB), NOSPLIT, $0-16
	MOVQ   table+0(FP), DI
	MOVQ   h+8(FP), SI
	MOVOU  bswapMask<>+0(SB), X15
	MOVOU  gcmPoly<>+0(SB), X14
	MOVOU  (SI), X0
	PSHUFB X15, X0

	// H * 2
	PSHUFD $0xff, X0, X11
	MOVOU  X0, X12
	PSRAL  $0x1f, X11
	PAND   X14, X11
	PSRLL  $0x1f, X12
	PSLLDQ $0x04, X12
	PSLLL  $0x01, X0
	PXOR   X11, X0
	PXOR   X12, X0

	// H^1 and its Karatsuba half at the end of the table
	MOVOU  X0, 224(DI)
	PSHUFD $0x4e, X0, X1
	PXOR   X0, X1
	MOVOU  X1, 240(DI)
	MOVOU  X0, X2
	MOVOU  X1, X3

	// H^2 … H^8 towards the start
	MOVQ $0x00000007, AX

initLoop:
	MOVOU     X2, X11
	MOVOU     X2, X12
	MOVOU     X3, X13
	PCLMULQDQ $0x00, X0, X11
	PCLMULQDQ $0x11, X0, X12
	PCLMULQDQ $0x00, X1, X13
	PXOR      X11, X13
	PXOR      X12, X13
	MOVOU     X13, X4
	PSLLDQ    $0x08, X4
	PSRLDQ    $0x08, X13
	PXOR      X4, X11
	PXOR      X13, X12
	MOVOU     X14, X2
	PCLMULQDQ $0x01, X11, X2
	PSHUFD    $0x4e, X11, X11
	PXOR      X2, X11
	MOVOU     X14, X2
	PCLMULQDQ $0x01, X11, X2
	PSHUFD    $0x4e, X11, X11
	PXOR      X11, X2
	PXOR      X12, X2
	MOVOU     X2, 192(DI)
	PSHUFD    $0x4e, X2, X3
	PXOR      X2, X3
	MOVOU     X3, 208(DI)
	DECQ      AX
	LEAQ      -32(DI), DI
	JNE       initLoop
	RET

// func ghash(table *[16][2]uint64, acc *[16]byte, head *[16]byte, p *byte, n int, tail *[16]byte, enc *byte, rounds int, j0 *[16]byte, bits uint64, tag *[16]byte)
// Requires: AES, PCLMULQDQ, SSE2, SSE4.1, SSSE3
//
// Groups of eight blocks, then one of the last one to seven: a group's
// first block (with the hash so far) is multiplied by H^k, its last by
// H^1, and the k products are summed unreduced, then reduced once.
TEXT ·ghash(SB), NOSPLIT, $0-88
	MOVQ  table+0(FP), DI
	MOVQ  acc+8(FP), CX
	MOVOU bswapMask<>+0(SB), X15
	MOVOU gcmPoly<>+0(SB), X14
	MOVOU (CX), X8

	// R11 is the part being hashed: 1 head, 2 the n blocks at p, 3 tail.
	MOVQ  $0x01, R11
	MOVQ  head+16(FP), SI
	MOVQ  $0x01, DX
	TESTQ SI, SI
	JNE   octa

middle:
	MOVQ $0x02, R11
	MOVQ p+24(FP), SI
	MOVQ n+32(FP), DX
	JMP  octa

last:
	MOVQ  $0x03, R11
	MOVQ  tail+40(FP), SI
	MOVQ  $0x01, DX
	TESTQ SI, SI
	JNE   octa
	JMP   hashed

octa:
	CMPQ DX, $0x08
	JB   rest
	SUBQ $0x08, DX
	MOVOU     (SI), X0
	MOVOU     16(SI), X1
	MOVOU     32(SI), X2
	MOVOU     48(SI), X3
	MOVOU     64(SI), X4
	MOVOU     80(SI), X5
	MOVOU     96(SI), X6
	MOVOU     112(SI), X7
	LEAQ      128(SI), SI
	PSHUFB    X15, X0
	PSHUFB    X15, X1
	PSHUFB    X15, X2
	PSHUFB    X15, X3
	PSHUFB    X15, X4
	PSHUFB    X15, X5
	PSHUFB    X15, X6
	PSHUFB    X15, X7
	PXOR      X8, X0
	MOVOU     (DI), X8
	MOVOU     16(DI), X10
	MOVOU     X8, X9
	PSHUFD    $0x4e, X0, X12
	PXOR      X0, X12
	PCLMULQDQ $0x00, X0, X8
	PCLMULQDQ $0x11, X0, X9
	PCLMULQDQ $0x00, X12, X10
	MOVOU     32(DI), X12
	MOVOU     X12, X13
	PCLMULQDQ $0x00, X1, X12
	PXOR      X12, X8
	PCLMULQDQ $0x11, X1, X13
	PXOR      X13, X9
	PSHUFD    $0x4e, X1, X12
	PXOR      X12, X1
	MOVOU     48(DI), X12
	PCLMULQDQ $0x00, X1, X12
	PXOR      X12, X10
	MOVOU     64(DI), X12
	MOVOU     X12, X13
	PCLMULQDQ $0x00, X2, X12
	PXOR      X12, X8
	PCLMULQDQ $0x11, X2, X13
	PXOR      X13, X9
	PSHUFD    $0x4e, X2, X12
	PXOR      X12, X2
	MOVOU     80(DI), X12
	PCLMULQDQ $0x00, X2, X12
	PXOR      X12, X10
	MOVOU     96(DI), X12
	MOVOU     X12, X13
	PCLMULQDQ $0x00, X3, X12
	PXOR      X12, X8
	PCLMULQDQ $0x11, X3, X13
	PXOR      X13, X9
	PSHUFD    $0x4e, X3, X12
	PXOR      X12, X3
	MOVOU     112(DI), X12
	PCLMULQDQ $0x00, X3, X12
	PXOR      X12, X10
	MOVOU     128(DI), X12
	MOVOU     X12, X13
	PCLMULQDQ $0x00, X4, X12
	PXOR      X12, X8
	PCLMULQDQ $0x11, X4, X13
	PXOR      X13, X9
	PSHUFD    $0x4e, X4, X12
	PXOR      X12, X4
	MOVOU     144(DI), X12
	PCLMULQDQ $0x00, X4, X12
	PXOR      X12, X10
	MOVOU     160(DI), X12
	MOVOU     X12, X13
	PCLMULQDQ $0x00, X5, X12
	PXOR      X12, X8
	PCLMULQDQ $0x11, X5, X13
	PXOR      X13, X9
	PSHUFD    $0x4e, X5, X12
	PXOR      X12, X5
	MOVOU     176(DI), X12
	PCLMULQDQ $0x00, X5, X12
	PXOR      X12, X10
	MOVOU     192(DI), X12
	MOVOU     X12, X13
	PCLMULQDQ $0x00, X6, X12
	PXOR      X12, X8
	PCLMULQDQ $0x11, X6, X13
	PXOR      X13, X9
	PSHUFD    $0x4e, X6, X12
	PXOR      X12, X6
	MOVOU     208(DI), X12
	PCLMULQDQ $0x00, X6, X12
	PXOR      X12, X10
	MOVOU     224(DI), X12
	MOVOU     X12, X13
	PCLMULQDQ $0x00, X7, X12
	PXOR      X12, X8
	PCLMULQDQ $0x11, X7, X13
	PXOR      X13, X9
	PSHUFD    $0x4e, X7, X12
	PXOR      X12, X7
	MOVOU     240(DI), X12
	PCLMULQDQ $0x00, X7, X12
	PXOR      X12, X10
	PXOR      X8, X10
	PXOR      X9, X10
	MOVOU     X10, X11
	PSRLDQ    $0x08, X10
	PSLLDQ    $0x08, X11
	PXOR      X10, X9
	PXOR      X11, X8
	MOVOU     X14, X11
	PCLMULQDQ $0x01, X8, X11
	PSHUFD    $0x4e, X8, X8
	PXOR      X11, X8
	MOVOU     X14, X11
	PCLMULQDQ $0x01, X8, X11
	PSHUFD    $0x4e, X8, X8
	PXOR      X11, X8
	PXOR      X9, X8
	JMP       octa

rest:
	// The last 1 to 7 blocks: AX = their count, BX = &table[H^AX]
	TESTQ DX, DX
	JEQ   done
	MOVQ  DX, AX
	MOVQ $0x08, BX
	SUBQ AX, BX
	SHLQ $0x05, BX
	ADDQ DI, BX

	MOVOU     (SI), X0
	PSHUFB    X15, X0
	PXOR      X8, X0
	MOVOU     (BX), X8
	MOVOU     X8, X9
	MOVOU     16(BX), X10
	PSHUFD    $0x4e, X0, X12
	PXOR      X0, X12
	PCLMULQDQ $0x00, X0, X8
	PCLMULQDQ $0x11, X0, X9
	PCLMULQDQ $0x00, X12, X10
	LEAQ      16(SI), SI
	LEAQ      32(BX), BX
	DECQ      AX
	JEQ       reduce

more:
	MOVOU     (SI), X0
	PSHUFB    X15, X0
	MOVOU     (BX), X12
	MOVOU     X12, X13
	PCLMULQDQ $0x00, X0, X12
	PXOR      X12, X8
	PCLMULQDQ $0x11, X0, X13
	PXOR      X13, X9
	PSHUFD    $0x4e, X0, X12
	PXOR      X0, X12
	MOVOU     16(BX), X13
	PCLMULQDQ $0x00, X12, X13
	PXOR      X13, X10
	LEAQ      16(SI), SI
	LEAQ      32(BX), BX
	DECQ      AX
	JNE       more

reduce:
	PXOR      X8, X10
	PXOR      X9, X10
	MOVOU     X10, X11
	PSRLDQ    $0x08, X10
	PSLLDQ    $0x08, X11
	PXOR      X10, X9
	PXOR      X11, X8
	MOVOU     X14, X11
	PCLMULQDQ $0x01, X8, X11
	PSHUFD    $0x4e, X8, X8
	PXOR      X11, X8
	MOVOU     X14, X11
	PCLMULQDQ $0x01, X8, X11
	PSHUFD    $0x4e, X8, X8
	PXOR      X11, X8
	PXOR      X9, X8

done:
	CMPQ R11, $0x01
	JEQ  middle
	CMPQ R11, $0x02
	JEQ  last

hashed:
	MOVQ  tag+80(FP), R10
	TESTQ R10, R10
	JNE   finish
	MOVOU X8, (CX)
	RET

finish:
	MOVQ enc+48(FP), R8
	MOVQ rounds+56(FP), R9
	MOVQ j0+64(FP), SI
	MOVQ bits+72(FP), CX

	// X13 = E(K, J0)
	MOVOU (SI), X13
	MOVOU (R8), X1
	PXOR  X1, X13
	LEAQ  16(R8), R8
	DECQ  R9

maskRound:
	MOVOU  (R8), X1
	AESENC X1, X13
	LEAQ   16(R8), R8
	DECQ   R9
	JNE    maskRound
	MOVOU      (R8), X1
	AESENCLAST X1, X13

	// (hash ^ length block) * H
	PXOR      X0, X0
	PINSRQ    $0x01, CX, X0
	PXOR      X8, X0
	MOVOU     224(DI), X8
	MOVOU     240(DI), X10
	MOVOU     X8, X9
	PCLMULQDQ $0x00, X0, X8
	PCLMULQDQ $0x11, X0, X9
	PSHUFD    $0x4e, X0, X11
	PXOR      X0, X11
	PCLMULQDQ $0x00, X11, X10
	PXOR      X8, X10
	PXOR      X9, X10
	MOVOU     X10, X11
	PSRLDQ    $0x08, X10
	PSLLDQ    $0x08, X11
	PXOR      X10, X9
	PXOR      X11, X8
	MOVOU     X14, X11
	PCLMULQDQ $0x01, X8, X11
	PSHUFD    $0x4e, X8, X8
	PXOR      X11, X8
	MOVOU     X14, X11
	PCLMULQDQ $0x01, X8, X11
	PSHUFD    $0x4e, X8, X8
	PXOR      X11, X8
	PXOR      X9, X8
	PSHUFB    X15, X8
	PXOR      X13, X8
	MOVOU     X8, (R10)
	RET
