package esp_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/espgw/espgw/esp"
)

// TestWindowAgainstModel drives windows of every ring shape (inline and
// separate rings, sizes at and across word boundaries) with sequence numbers
// that move forward, jump, repeat and fall behind, and checks each verdict
// against the set model.
func TestWindowAgainstModel(t *testing.T) {
	for _, size := range []int{1, 32, 63, 64, 65, 128, 192, 193, 256, 1024, 4095, 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(size), 7))
			var w esp.Window
			w.Reset(size)
			m := newWindowModel(size)
			seq := uint64(0)
			for i := range 20000 {
				switch r := rng.IntN(10); {
				case r < 5:
					seq += uint64(rng.IntN(3)) + 1
				case r < 6:
					seq += uint64(rng.IntN(4 * size))
				case r < 9:
					seq -= min(seq, uint64(rng.IntN(size+70)))
				}
				want := m.verdict(seq)
				if got := w.Check(seq); got != want {
					t.Fatalf("step %d: Check(%d) = %v, want %v (highest %d)", i, seq, got, want, m.highest)
				}
				if got := w.Accept(seq); got != want {
					t.Fatalf("step %d: Accept(%d) = %v, want %v", i, seq, got, want)
				}
				if want == esp.OK {
					m.accept(seq)
				}
				if w.Last() != m.highest {
					t.Fatalf("step %d: Last %d, want %d", i, w.Last(), m.highest)
				}
				seq = max(seq, m.highest-min(m.highest, uint64(size)))
			}
		})
	}
}

// TestWindowResizeKeepsWhatItSaw: a window resized (an SA continued under
// another replay-window setting) still refuses what it accepted, as far as
// the new size spans, and keeps its highest.
func TestWindowResizeKeepsWhatItSaw(t *testing.T) {
	for _, c := range []struct{ from, to int }{{64, 1024}, {1024, 64}, {64, 16}, {100, 4096}} {
		var w esp.Window
		w.Reset(c.from)
		for seq := uint64(1); seq <= 300; seq += 2 {
			w.Accept(seq)
		}
		w.Resize(c.to)
		if w.Last() != 299 {
			t.Fatalf("%d→%d: highest %d, want 299", c.from, c.to, w.Last())
		}
		span := uint64(min(c.from, c.to))
		for seq := uint64(300 - span); seq <= 299; seq++ {
			want := esp.OK
			if seq%2 == 1 {
				want = esp.Replay
			}
			if got := w.Check(seq); got != want {
				t.Errorf("%d→%d: seq %d: %v, want %v", c.from, c.to, seq, got, want)
			}
		}
	}
}
