package xdp

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"golang.org/x/sys/unix"
)

// syncBuffer is a log sink the flusher's goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRefusedKickIsRetried: when the kernel takes no frames from the TX
// ring through a whole kick (its sendto says EAGAIN, as it does when the
// device's queue is stopped), the frames still go out without another Send;
// a refusal that lasts past stallAfter is counted and logged as a stall.
func TestRefusedKickIsRetried(t *testing.T) {
	p := newBed(t)
	for _, tc := range []struct {
		name    string
		refuse  time.Duration // how long every sendto fails
		stalled uint64
	}{
		{"brief", 20 * time.Millisecond, 0},
		{"lasting", stallAfter + time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			raw := rawConn(t, p.b, netip.IPv4Unspecified())
			var c *Conn
			err := p.b.Do(func() error {
				var err error
				c, err = Open(Config{Device: "veth0", Local: p.b4, Fallback: raw, Mode: ModeAuto,
					Log: slog.New(slog.NewTextHandler(&logs, nil))})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			a := rawConn(t, p.a, netip.IPv4Unspecified())
			// The first packet resolves the next hop (through the raw socket).
			if _, err := c.Send([]*esp.Packet{out(espPacket(0x3003, 1, 80), p.a4)}); err != nil {
				t.Fatal(err)
			}
			receive(t, a, 1, 5*time.Second)
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				if _, ok := (*c.hops.Load())[p.a4]; ok {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, ok := (*c.hops.Load())[p.a4]; !ok {
				t.Fatal("next hop of a not resolved in 3 s")
			}

			var calls atomic.Int64
			until := time.Now().Add(tc.refuse)
			c.sendMu.Lock()
			c.sockets[0].sendto = func(fd int) unix.Errno {
				calls.Add(1)
				if time.Now().Before(until) {
					return unix.EAGAIN
				}
				return wakeTX(fd)
			}
			c.sendMu.Unlock()

			var batch []*esp.Packet
			for i := range 50 {
				batch = append(batch, out(espPacket(0x3003, uint32(i+2), 100+i), p.a4))
			}
			n, err := c.Send(batch)
			if n != len(batch) || err == nil {
				t.Fatalf("send with the kicks refused: %d, %v; want %d queued and the refusal reported", n, err, len(batch))
			}
			// No further Send: the frames in the ring must come out anyway.
			got := receive(t, a, len(batch), tc.refuse+5*time.Second)
			for i, g := range got {
				if string(g) != string(batch[i].Data()) {
					t.Fatalf("packet %d differs", i)
				}
			}
			st := c.Stats()
			if st.KickRetries == 0 || st.SendErrors == 0 || st.KickStalls != tc.stalled {
				t.Errorf("stats %+v: want kick retries and send errors counted, %d stalls", st, tc.stalled)
			}
			warned := strings.Contains(logs.String(), "takes no frames from the TX ring")
			if warned != (tc.stalled > 0) {
				t.Errorf("stall logged %v, want %v; log:\n%s", warned, tc.stalled > 0, logs.String())
			}
			// The backoff bounds the kicks: at most one a retryMost once it
			// is reached, a few hundred in all.
			if max := int64(64 * (2 + 12 + int(tc.refuse/retryMost))); calls.Load() > max {
				t.Errorf("%d sendto calls in %v, want at most %d", calls.Load(), tc.refuse, max)
			}
			t.Logf("%d sendto calls; stats %+v", calls.Load(), st)
		})
	}
}
