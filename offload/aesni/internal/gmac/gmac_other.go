//go:build !amd64 || purego

package gmac

// useAsm is false: there is no assembly for this platform or build.
const useAsm = false

func encryptBlock(enc *byte, rounds int, dst, src *[16]byte) {
	panic("gmac: assembly called in a build without it")
}

func initTable(table *[16][2]uint64, h *[16]byte) {
	panic("gmac: assembly called in a build without it")
}

func ghash(table *[16][2]uint64, acc *[16]byte, head *[16]byte, p *byte, n int, tail *[16]byte, enc *byte, rounds int, j0 *[16]byte, bits uint64, tag *[16]byte) {
	panic("gmac: assembly called in a build without it")
}
