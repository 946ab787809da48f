//go:build amd64 && !purego

package cbc

import "golang.org/x/sys/cpu"

// best is the fastest kernel this CPU runs. VAES needs AVX2 (which x/sys/cpu
// reports only when the OS saves YMM state) and the VAES CPUID bit, which
// x/sys/cpu reports only on AVX-512 CPUs, hence hasVAES.
var best = func() kernel {
	switch {
	case !cpu.X86.HasAES:
		return kernelGo
	case cpu.X86.HasAVX2 && hasVAES():
		return kernelVAES
	case cpu.X86.HasAVX:
		return kernelAVX
	}
	return kernelXMM
}()

// hasVAES reports CPUID.(EAX=7,ECX=0):ECX.VAES[bit 9].
func hasVAES() bool

// decryptBlocksAsm decrypts n blocks from src to dst in CBC mode from iv with
// the AESDEC schedule dk: 16 blocks at a time on YMM registers if wide, then
// 8 at a time on XMM registers, then 4, 2 and 1.
//
//go:noescape
func decryptBlocksAsm(dk *byte, rounds int, iv *[BlockSize]byte, dst, src *byte, n int, wide bool)

// encryptBlocksAsm encrypts n blocks from src to dst in CBC mode from iv with
// the AESENC schedule ek, one block at a time.
//
//go:noescape
func encryptBlocksAsm(ek *byte, rounds int, iv *[BlockSize]byte, dst, src *byte, n int)

// encryptLanesAsm encrypts n blocks of every lane of st in CBC mode, one block
// per lane per step on XMM registers, and leaves each lane's last ciphertext
// block in st.iv.
//
//go:noescape
func encryptLanesAsm(st *lanes, rounds int, n int)

// encryptLanesAVX is encryptLanesAsm in VEX encoding, with the round keys and
// plaintext blocks as memory operands.
//
//go:noescape
func encryptLanesAVX(st *lanes, rounds int, n int)

// encryptLanesVAES is encryptLanesAVX with the lanes in pairs on YMM
// registers (VAES), the round keys taken from st.pair.
//
//go:noescape
func encryptLanesVAES(st *lanes, rounds int, n int)
