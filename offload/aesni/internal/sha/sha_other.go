//go:build !amd64 || purego

package sha

// best is the pure-Go kernel: there is no assembly for this platform or build.
const best = kernelGo

func sha1Blocks(h *[8]uint32, p *byte, n int) {
	panic("sha: assembly called in a build without it")
}

func sha1Blocks2(h0, h1 *[8]uint32, p0, p1 *byte, n int) {
	panic("sha: assembly called in a build without it")
}

func sha256Blocks(h *[8]uint32, p *byte, n int) {
	panic("sha: assembly called in a build without it")
}

func sha256Blocks2(h0, h1 *[8]uint32, p0, p1 *byte, n int) {
	panic("sha: assembly called in a build without it")
}

func sha1x8(st *x8, n int) {
	panic("sha: assembly called in a build without it")
}
