package esp_test

import (
	"sync"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// An SA counts its drops by reason from its first drop on, also when its
// first drops come at once from several goroutines.
func TestDropCounts(t *testing.T) {
	out, _ := newPair(t, testSA(t, sa.Suite{Cipher: sa.CipherAESGCM16}, sa.Tunnel, false))
	if n := out.Counters.Dropped(esp.Replay); n != 0 || len(out.Snapshot().Drops) != 0 {
		t.Fatalf("a new SA: %d replay drops, snapshot %v", n, out.Snapshot().Drops)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				out.Drop(esp.Replay)
			}
			out.Drop(esp.BadICV)
		}()
	}
	wg.Wait()
	if r, b := out.Counters.Dropped(esp.Replay), out.Counters.Dropped(esp.BadICV); r != 800 || b != 8 {
		t.Errorf("%d replay and %d bad-icv drops counted, want 800 and 8", r, b)
	}
	if got := out.Snapshot().Drops; len(got) != 2 || got[esp.Replay.String()] != 800 || got[esp.BadICV.String()] != 8 {
		t.Errorf("snapshot drops %v", got)
	}
}
