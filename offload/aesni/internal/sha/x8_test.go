//go:build amd64 && !purego

package sha

import (
	"math/rand/v2"
	"testing"
)

// TestSHA1x8 holds the eight-lane kernel against the Go compression on
// eight lanes of different states and inputs, 1 to 5 blocks.
func TestSHA1x8(t *testing.T) {
	if !hasX8() {
		t.Skip("no AVX-512VL, AVX-512BW on this CPU")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for n := 1; n <= 5; n++ {
		var st x8
		var want [8][8]uint32
		bufs := make([][]byte, 8)
		for l := range 8 {
			bufs[l] = make([]byte, n*BlockSize)
			for i := range bufs[l] {
				bufs[l][i] = byte(rng.Uint32())
			}
			for i := range 5 {
				want[l][i] = rng.Uint32()
				st.h[i][l] = want[l][i]
			}
			st.p[l] = &bufs[l][0]
			sha1BlocksGo(&want[l], &bufs[l][0], n)
		}
		sha1x8(&st, n)
		for l := range 8 {
			for i := range 5 {
				if st.h[i][l] != want[l][i] {
					t.Fatalf("%d blocks, lane %d word %d: %08x, want %08x", n, l, i, st.h[i][l], want[l][i])
				}
			}
		}
	}
}
