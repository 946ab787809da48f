package esp_test

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// TestReservationsStayAhead seals several reservation blocks' worth of
// packets with a slow Reserve (an fsync's worth of sleep) and checks the
// promise of Options.Reserve: no packet is numbered above a bound whose
// Reserve call has not returned, calls never overlap, the bounds only go
// up, and the later reservations are made ahead of need, off the sealing
// goroutine.
func TestReservationsStayAhead(t *testing.T) {
	cfg := testSA(t, sa.Suite{Cipher: sa.CipherAESGCM16}, sa.Tunnel, false)
	var (
		durable atomic.Uint64 // the highest bound whose Reserve returned
		running atomic.Int32
		mu      sync.Mutex
		bounds  []uint64
		// onSealing counts the calls made on the sealing goroutine.
		onSealing atomic.Int32
	)
	reserve := func(s *esp.SA, upTo uint64) error {
		if running.Add(1) != 1 {
			t.Error("Reserve calls overlap")
		}
		// On the sealing goroutine the test function is on the stack.
		stack := make([]byte, 8<<10)
		stack = stack[:runtime.Stack(stack, false)]
		if bytes.Contains(stack, []byte("TestReservationsStayAhead(")) {
			onSealing.Add(1)
		}
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		bounds = append(bounds, upTo)
		mu.Unlock()
		durable.Store(upTo)
		running.Add(-1)
		return nil
	}
	tx, err := esp.NewSA(cfg, cpu.New(), esp.Options{Reserve: reserve})
	if err != nil {
		t.Fatal(err)
	}
	pkt := udpPacket(false, 10)
	buf := make([]byte, esp.Headroom+len(pkt)+esp.Tailroom)
	const n = 4 * esp.ReserveBlock
	for i := range n {
		copy(buf[esp.Headroom:], pkt)
		p := &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(pkt), SA: tx}
		r := tx.PrepareSeal(p)
		if r != esp.OK {
			t.Fatalf("packet %d: %v", i, r)
		}
		if d := durable.Load(); p.Seq > d {
			t.Fatalf("packet %d numbered %d above the recorded bound %d", i, p.Seq, d)
		}
		if i%esp.ReserveBlock == esp.ReserveBlock/2+2 { // just after the next reservation started
			// Traffic slower than the disk: the background reservation
			// completes before the bound is reached. (A machine too
			// busy to run it in time would have the sealing goroutine
			// make it, which is allowed, not what is tested here.)
			for before, deadline := p.Seq, time.Now().Add(10*time.Second); durable.Load() <= before+esp.ReserveBlock/2; {
				if time.Now().After(deadline) {
					t.Fatalf("the reservation started at packet %d did not complete in 10 s", i)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	for running.Load() != 0 {
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bounds) < 4 {
		t.Fatalf("%d reservations for %d packets: %v", len(bounds), n, bounds)
	}
	for i := 1; i < len(bounds); i++ {
		if bounds[i] <= bounds[i-1] {
			t.Fatalf("bounds went down: %v", bounds)
		}
	}
	if n := onSealing.Load(); n != 1 {
		t.Errorf("%d of %d reservations held up the sealing goroutine, want only the first", n, len(bounds))
	}
}

// TestReservationFailureStopsSending: when the bound cannot be recorded (a
// full disk), no packet is numbered above the last bound that was — each is
// dropped as seq-unpersisted — and once a reservation succeeds again the
// packets go out. Before, the failure was only logged and the packets went
// on beyond the persisted bound, so a crash resumed below what the peer saw.
func TestReservationFailureStopsSending(t *testing.T) {
	cfg := testSA(t, sa.Suite{Cipher: sa.CipherAESGCM16}, sa.Tunnel, false)
	var full atomic.Bool
	var durable atomic.Uint64
	reserve := func(s *esp.SA, upTo uint64) error {
		if full.Load() {
			return errNoSpace
		}
		durable.Store(upTo)
		return nil
	}
	tx, err := esp.NewSA(cfg, cpu.New(), esp.Options{Reserve: reserve})
	if err != nil {
		t.Fatal(err)
	}
	pkt := udpPacket(false, 10)
	buf := make([]byte, esp.Headroom+len(pkt)+esp.Tailroom)
	seal := func() (*esp.Packet, esp.Reason) {
		copy(buf[esp.Headroom:], pkt)
		p := &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(pkt), SA: tx}
		return p, tx.PrepareSeal(p)
	}
	if _, r := seal(); r != esp.OK {
		t.Fatalf("first packet: %v", r)
	}
	full.Store(true) // the disk fills: the reservation ahead of need fails too
	sent, dropped := 0, 0
	for range 2 * esp.ReserveBlock {
		p, r := seal()
		switch r {
		case esp.OK:
			sent++
			if p.Seq > durable.Load() {
				t.Fatalf("packet numbered %d above the recorded bound %d", p.Seq, durable.Load())
			}
		case esp.SeqUnpersisted:
			dropped++
		default:
			t.Fatalf("reason %v", r)
		}
	}
	if dropped == 0 || uint64(sent+1) > durable.Load() {
		t.Fatalf("sent %d dropped %d with the bound at %d", sent, dropped, durable.Load())
	}
	if got := tx.Snapshot().Drops[esp.SeqUnpersisted.String()]; got != uint64(dropped) {
		t.Errorf("seq-unpersisted counted %d, want %d", got, dropped)
	}
	full.Store(false) // space again: after the retry pause, packets go out
	time.Sleep(esp.ReserveRetry + 10*time.Millisecond)
	if p, r := seal(); r != esp.OK || p.Seq > durable.Load() {
		t.Fatalf("after the disk recovered: %v, seq %d bound %d", r, p.Seq, durable.Load())
	}
}

var errNoSpace = errors.New("no space left on device")
