//go:build !amd64 || purego

package cbc

// best is the pure-Go kernel: there is no assembly for this platform or build.
const best = kernelGo

func decryptBlocksAsm(dk *byte, rounds int, iv *[BlockSize]byte, dst, src *byte, n int, wide bool) {
	panic("cbc: assembly called in a build without it")
}

func encryptBlocksAsm(ek *byte, rounds int, iv *[BlockSize]byte, dst, src *byte, n int) {
	panic("cbc: assembly called in a build without it")
}

func encryptLanesAsm(st *lanes, rounds int, n int) {
	panic("cbc: assembly called in a build without it")
}

func encryptLanesAVX(st *lanes, rounds int, n int) {
	panic("cbc: assembly called in a build without it")
}

func encryptLanesVAES(st *lanes, rounds int, n int) {
	panic("cbc: assembly called in a build without it")
}
