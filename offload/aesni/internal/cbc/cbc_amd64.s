//go:build amd64 && !purego

#include "textflag.h"

// AES-CBC with AES-NI and VAES. The schedules are arrays of (rounds+1)
// 16-byte round keys; R9 holds rounds*16, the offset of the last one.

// func hasVAES() bool
TEXT ·hasVAES(SB), NOSPLIT, $0-1
	MOVL $7, AX
	XORL CX, CX
	CPUID
	SHRL $9, CX
	ANDL $1, CX
	MOVB CX, ret+0(FP)
	RET

// func decryptBlocksAsm(dk *byte, rounds int, iv *[16]byte, dst, src *byte, n int, wide bool)
//
// CBC decryption is parallel: many blocks are in flight at once, 16 in eight
// YMM registers (VAES) while wide and 16 remain, then 8 in XMM registers, then
// one by one. Each decrypted block is xored with the ciphertext block before
// it; that xor is folded into the last round's key, and the ciphertexts are
// read again from src before any block of the group is stored, so dst may be
// src. X15 carries the ciphertext block before the group.
TEXT ·decryptBlocksAsm(SB), NOSPLIT, $0-49
	MOVQ dk+0(FP), R8
	MOVQ rounds+8(FP), R9
	MOVQ iv+16(FP), AX
	MOVQ dst+24(FP), DI
	MOVQ src+32(FP), SI
	MOVQ n+40(FP), CX
	SHLQ $4, R9
	MOVOU (AX), X15
	CMPB wide+48(FP), $0
	JEQ  dec8check
	CMPQ CX, $16
	JB   dec8check

dec16:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VMOVDQU 128(SI), Y4
	VMOVDQU 160(SI), Y5
	VMOVDQU 192(SI), Y6
	VMOVDQU 224(SI), Y7
	VBROADCASTI128 (R8), Y8
	VPXOR   Y8, Y0, Y0
	VPXOR   Y8, Y1, Y1
	VPXOR   Y8, Y2, Y2
	VPXOR   Y8, Y3, Y3
	VPXOR   Y8, Y4, Y4
	VPXOR   Y8, Y5, Y5
	VPXOR   Y8, Y6, Y6
	VPXOR   Y8, Y7, Y7
	MOVQ    $16, DX

dec16round:
	VBROADCASTI128 (R8)(DX*1), Y8
	VAESDEC Y8, Y0, Y0
	VAESDEC Y8, Y1, Y1
	VAESDEC Y8, Y2, Y2
	VAESDEC Y8, Y3, Y3
	VAESDEC Y8, Y4, Y4
	VAESDEC Y8, Y5, Y5
	VAESDEC Y8, Y6, Y6
	VAESDEC Y8, Y7, Y7
	ADDQ    $16, DX
	CMPQ    DX, R9
	JB      dec16round

	VBROADCASTI128 (R8)(R9*1), Y8
	VINSERTI128 $1, (SI), Y15, Y9
	VPXOR   Y8, Y9, Y9
	VAESDECLAST Y9, Y0, Y0
	VMOVDQU 16(SI), Y9
	VPXOR   Y8, Y9, Y9
	VAESDECLAST Y9, Y1, Y1
	VMOVDQU 48(SI), Y9
	VPXOR   Y8, Y9, Y9
	VAESDECLAST Y9, Y2, Y2
	VMOVDQU 80(SI), Y9
	VPXOR   Y8, Y9, Y9
	VAESDECLAST Y9, Y3, Y3
	VMOVDQU 112(SI), Y9
	VPXOR   Y8, Y9, Y9
	VAESDECLAST Y9, Y4, Y4
	VMOVDQU 144(SI), Y9
	VPXOR   Y8, Y9, Y9
	VAESDECLAST Y9, Y5, Y5
	VMOVDQU 176(SI), Y9
	VPXOR   Y8, Y9, Y9
	VAESDECLAST Y9, Y6, Y6
	VMOVDQU 208(SI), Y9
	VPXOR   Y8, Y9, Y9
	VAESDECLAST Y9, Y7, Y7
	VMOVDQU 240(SI), X15
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	VMOVDQU Y4, 128(DI)
	VMOVDQU Y5, 160(DI)
	VMOVDQU Y6, 192(DI)
	VMOVDQU Y7, 224(DI)
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $16, CX
	CMPQ CX, $16
	JAE  dec16
	VZEROUPPER

dec8check:
	CMPQ CX, $8
	JB   dec1

dec8:
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVOU 64(SI), X4
	MOVOU 80(SI), X5
	MOVOU 96(SI), X6
	MOVOU 112(SI), X7
	MOVOU (R8), X8
	PXOR  X8, X0
	PXOR  X8, X1
	PXOR  X8, X2
	PXOR  X8, X3
	PXOR  X8, X4
	PXOR  X8, X5
	PXOR  X8, X6
	PXOR  X8, X7
	MOVQ  $16, DX

dec8round:
	MOVOU (R8)(DX*1), X8
	AESDEC X8, X0
	AESDEC X8, X1
	AESDEC X8, X2
	AESDEC X8, X3
	AESDEC X8, X4
	AESDEC X8, X5
	AESDEC X8, X6
	AESDEC X8, X7
	ADDQ  $16, DX
	CMPQ  DX, R9
	JB    dec8round

	MOVOU (R8)(R9*1), X8
	MOVOU X8, X9
	PXOR  X15, X9
	AESDECLAST X9, X0
	MOVOU 0(SI), X9
	PXOR  X8, X9
	AESDECLAST X9, X1
	MOVOU 16(SI), X9
	PXOR  X8, X9
	AESDECLAST X9, X2
	MOVOU 32(SI), X9
	PXOR  X8, X9
	AESDECLAST X9, X3
	MOVOU 48(SI), X9
	PXOR  X8, X9
	AESDECLAST X9, X4
	MOVOU 64(SI), X9
	PXOR  X8, X9
	AESDECLAST X9, X5
	MOVOU 80(SI), X9
	PXOR  X8, X9
	AESDECLAST X9, X6
	MOVOU 96(SI), X9
	PXOR  X8, X9
	AESDECLAST X9, X7
	MOVOU 112(SI), X15
	MOVOU X0, 0(DI)
	MOVOU X1, 16(DI)
	MOVOU X2, 32(DI)
	MOVOU X3, 48(DI)
	MOVOU X4, 64(DI)
	MOVOU X5, 80(DI)
	MOVOU X6, 96(DI)
	MOVOU X7, 112(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $8, CX
	CMPQ CX, $8
	JAE  dec8

dec1:
	TESTQ CX, CX
	JZ    decdone

dec1loop:
	MOVOU (SI), X0
	MOVOU X0, X10
	MOVOU (R8), X8
	PXOR  X8, X0
	MOVQ  $16, DX

dec1round:
	MOVOU  (R8)(DX*1), X8
	AESDEC X8, X0
	ADDQ   $16, DX
	CMPQ   DX, R9
	JB     dec1round

	MOVOU (R8)(R9*1), X8
	PXOR  X15, X8
	AESDECLAST X8, X0
	MOVOU X0, (DI)
	MOVOU X10, X15
	ADDQ  $16, SI
	ADDQ  $16, DI
	DECQ  CX
	JNZ   dec1loop

decdone:
	RET

// func encryptBlocksAsm(ek *byte, rounds int, iv *[16]byte, dst, src *byte, n int)
//
// One stream, one block at a time: each block needs the one before it.
TEXT ·encryptBlocksAsm(SB), NOSPLIT, $0-48
	MOVQ ek+0(FP), R8
	MOVQ rounds+8(FP), R9
	MOVQ iv+16(FP), AX
	MOVQ dst+24(FP), DI
	MOVQ src+32(FP), SI
	MOVQ n+40(FP), CX
	SHLQ $4, R9
	MOVOU (AX), X0
	TESTQ CX, CX
	JZ    encdone

enc1loop:
	MOVOU (SI), X1
	PXOR  X1, X0
	MOVOU (R8), X8
	PXOR  X8, X0
	MOVQ  $16, DX

enc1round:
	MOVOU  (R8)(DX*1), X8
	AESENC X8, X0
	ADDQ   $16, DX
	CMPQ   DX, R9
	JB     enc1round

	MOVOU (R8)(R9*1), X8
	AESENCLAST X8, X0
	MOVOU X0, (DI)
	ADDQ  $16, SI
	ADDQ  $16, DI
	DECQ  CX
	JNZ   enc1loop

encdone:
	RET

// func encryptLanesAsm(st *lanes, rounds int, n int)
//
// Eight independent CBC streams, one block of each per step, so eight AESENC
// chains are in flight. st is laid out as in lanes.go: in [8]*byte at 0,
// out [8]*byte at 64, keys [8]*Key at 128 (encryption schedule at offset 0 of
// Key), iv [8][16]byte at 192. Every lane's block is loaded before any is
// stored, so a lane may repeat another. The key pointers live in R8, R10-R15
// and BX; CX is the byte offset into every lane's buffers.
TEXT ·encryptLanesAsm(SB), NOSPLIT, $0-24
	MOVQ st+0(FP), DI
	MOVQ rounds+8(FP), R9
	MOVQ n+16(FP), DX
	SHLQ $4, R9
	SHLQ $4, DX
	TESTQ DX, DX
	JZ    lanesdone
	MOVQ  128(DI), R8
	MOVQ  136(DI), R10
	MOVQ  144(DI), R11
	MOVQ  152(DI), R12
	MOVQ  160(DI), R13
	MOVQ  168(DI), R14
	MOVQ  176(DI), R15
	MOVQ  184(DI), BX
	MOVOU 192(DI), X0
	MOVOU 208(DI), X1
	MOVOU 224(DI), X2
	MOVOU 240(DI), X3
	MOVOU 256(DI), X4
	MOVOU 272(DI), X5
	MOVOU 288(DI), X6
	MOVOU 304(DI), X7
	XORQ  CX, CX

lanesloop:
	MOVQ  0(DI), SI
	MOVOU (SI)(CX*1), X8
	PXOR  X8, X0
	MOVQ  8(DI), SI
	MOVOU (SI)(CX*1), X9
	PXOR  X9, X1
	MOVQ  16(DI), SI
	MOVOU (SI)(CX*1), X10
	PXOR  X10, X2
	MOVQ  24(DI), SI
	MOVOU (SI)(CX*1), X11
	PXOR  X11, X3
	MOVQ  32(DI), SI
	MOVOU (SI)(CX*1), X12
	PXOR  X12, X4
	MOVQ  40(DI), SI
	MOVOU (SI)(CX*1), X13
	PXOR  X13, X5
	MOVQ  48(DI), SI
	MOVOU (SI)(CX*1), X14
	PXOR  X14, X6
	MOVQ  56(DI), SI
	MOVOU (SI)(CX*1), X15
	PXOR  X15, X7
	MOVOU (R8), X8
	PXOR  X8, X0
	MOVOU (R10), X9
	PXOR  X9, X1
	MOVOU (R11), X10
	PXOR  X10, X2
	MOVOU (R12), X11
	PXOR  X11, X3
	MOVOU (R13), X12
	PXOR  X12, X4
	MOVOU (R14), X13
	PXOR  X13, X5
	MOVOU (R15), X14
	PXOR  X14, X6
	MOVOU (BX), X15
	PXOR  X15, X7
	MOVQ  $16, AX

lanesround:
	MOVOU  (R8)(AX*1), X8
	AESENC X8, X0
	MOVOU  (R10)(AX*1), X9
	AESENC X9, X1
	MOVOU  (R11)(AX*1), X10
	AESENC X10, X2
	MOVOU  (R12)(AX*1), X11
	AESENC X11, X3
	MOVOU  (R13)(AX*1), X12
	AESENC X12, X4
	MOVOU  (R14)(AX*1), X13
	AESENC X13, X5
	MOVOU  (R15)(AX*1), X14
	AESENC X14, X6
	MOVOU  (BX)(AX*1), X15
	AESENC X15, X7
	ADDQ   $16, AX
	CMPQ   AX, R9
	JB     lanesround

	MOVOU (R8)(R9*1), X8
	AESENCLAST X8, X0
	MOVOU (R10)(R9*1), X9
	AESENCLAST X9, X1
	MOVOU (R11)(R9*1), X10
	AESENCLAST X10, X2
	MOVOU (R12)(R9*1), X11
	AESENCLAST X11, X3
	MOVOU (R13)(R9*1), X12
	AESENCLAST X12, X4
	MOVOU (R14)(R9*1), X13
	AESENCLAST X13, X5
	MOVOU (R15)(R9*1), X14
	AESENCLAST X14, X6
	MOVOU (BX)(R9*1), X15
	AESENCLAST X15, X7
	MOVQ  64(DI), SI
	MOVOU X0, (SI)(CX*1)
	MOVQ  72(DI), SI
	MOVOU X1, (SI)(CX*1)
	MOVQ  80(DI), SI
	MOVOU X2, (SI)(CX*1)
	MOVQ  88(DI), SI
	MOVOU X3, (SI)(CX*1)
	MOVQ  96(DI), SI
	MOVOU X4, (SI)(CX*1)
	MOVQ  104(DI), SI
	MOVOU X5, (SI)(CX*1)
	MOVQ  112(DI), SI
	MOVOU X6, (SI)(CX*1)
	MOVQ  120(DI), SI
	MOVOU X7, (SI)(CX*1)
	ADDQ  $16, CX
	CMPQ  CX, DX
	JB    lanesloop

	MOVOU X0, 192(DI)
	MOVOU X1, 208(DI)
	MOVOU X2, 224(DI)
	MOVOU X3, 240(DI)
	MOVOU X4, 256(DI)
	MOVOU X5, 272(DI)
	MOVOU X6, 288(DI)
	MOVOU X7, 304(DI)

lanesdone:
	RET
