//go:build amd64 && !purego

package sha

import "golang.org/x/sys/cpu"

// best is the fastest kernel this CPU runs: the SHA extensions need SSSE3
// and SSE4.1 beside them; the eight-lane SHA-1 runs only beside them.
var best = func() kernel {
	switch {
	case !hasSHANI() || !cpu.X86.HasSSSE3 || !cpu.X86.HasSSE41:
		return kernelGo
	case hasX8():
		return kernelX8
	}
	return kernelSHANI
}()

// hasSHANI reports CPUID.(EAX=7,ECX=0):EBX.SHA[bit 29].
func hasSHANI() bool

// sha1Blocks runs the SHA-1 compression over n blocks at p, state h[:5].
//
//go:noescape
func sha1Blocks(h *[8]uint32, p *byte, n int)

// sha1Blocks2 is sha1Blocks on two streams at once, n blocks each.
//
//go:noescape
func sha1Blocks2(h0, h1 *[8]uint32, p0, p1 *byte, n int)

// sha256Blocks runs the SHA-256 compression over n blocks at p.
//
//go:noescape
func sha256Blocks(h *[8]uint32, p *byte, n int)

// sha256Blocks2 is sha256Blocks on two streams at once, n blocks each.
//
//go:noescape
func sha256Blocks2(h0, h1 *[8]uint32, p0, p1 *byte, n int)

// sha1x8 runs n blocks of SHA-1 on each of eight lanes at once
// (AVX-512VL), the states transposed in st.h.
//
//go:noescape
func sha1x8(st *x8, n int)

// hasX8 reports whether the CPU runs sha1x8: AVX-512 F, VL and BW (the OS
// saving their state).
func hasX8() bool { return cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW }
