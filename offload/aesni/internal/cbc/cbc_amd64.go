//go:build amd64 && !purego

package cbc

import "golang.org/x/sys/cpu"

// useAsm says whether this CPU runs the assembly: it needs AES-NI.
var useAsm = cpu.X86.HasAES

// decryptBlocksAsm decrypts n blocks from src to dst in CBC mode from iv with
// the AESDEC schedule dk, 8 blocks at a time.
//
//go:noescape
func decryptBlocksAsm(dk *byte, rounds int, iv *[BlockSize]byte, dst, src *byte, n int)

// encryptBlocksAsm encrypts n blocks from src to dst in CBC mode from iv with
// the AESENC schedule ek, one block at a time.
//
//go:noescape
func encryptBlocksAsm(ek *byte, rounds int, iv *[BlockSize]byte, dst, src *byte, n int)

// encryptLanesAsm encrypts n blocks of every lane of st in CBC mode, one block
// per lane per step, and leaves each lane's last ciphertext block in st.iv.
//
//go:noescape
func encryptLanesAsm(st *lanes, rounds int, n int)
