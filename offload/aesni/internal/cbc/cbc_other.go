//go:build !amd64 || purego

package cbc

// useAsm is false: there is no assembly for this platform or build.
const useAsm = false

func decryptBlocksAsm(dk *byte, rounds int, iv *[BlockSize]byte, dst, src *byte, n int) {
	panic("cbc: assembly called in a build without it")
}

func encryptBlocksAsm(ek *byte, rounds int, iv *[BlockSize]byte, dst, src *byte, n int) {
	panic("cbc: assembly called in a build without it")
}

func encryptLanesAsm(st *lanes, rounds int, n int) {
	panic("cbc: assembly called in a build without it")
}
