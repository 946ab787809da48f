package impair

import (
	"testing"
	"time"
)

// Any bytes from the wire, with every impairment on: no panic, the
// conservation law holds, and nothing comes out longer than it went in.
func FuzzStage(f *testing.F) {
	for _, k := range []kind{rawESP4, udpESP4, rawESP6, udpESP6} {
		f.Add(frame(f, k, 1, 40), uint8(0))
		f.Add(frame(f, k, 2, 9), uint8(1))
	}
	f.Add([]byte{}, uint8(2))
	cfg := cfgWith(func(c *Config) {
		c.Loss, c.Duplicate = 10, 10
		c.Burst = Burst{P: 5, R: 50, LossBad: 50}
		c.Corrupt = Corrupt{Percent: 30, Bytes: 3, From: 2, To: -1}
		c.Truncate = Truncate{Percent: 20, By: 5}
		c.RewriteSPI = RewriteSPI{Percent: 20, SPI: 9}
		c.Replay = Replay{Percent: 20, After: time.Millisecond, History: 4}
		c.Reorder = Reorder{Percent: 20, Depth: 2, MaxHold: time.Millisecond}
		c.Delay = Delay{Time: time.Millisecond, Jitter: time.Millisecond}
	})
	f.Fuzz(func(t *testing.T, pkt []byte, link uint8) {
		s, err := New(cfg, LinkType(link%2), 256)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(0, 0)
		for i := 0; i < 8; i++ {
			s.Push(now, pkt)
			now = now.Add(300 * time.Microsecond)
			for p := s.Pop(now); p != nil; p = s.Pop(now) {
				if len(p.Bytes()) > len(pkt) {
					t.Fatalf("%d bytes out of a %d-byte packet", len(p.Bytes()), len(pkt))
				}
				s.Release(p)
			}
		}
		for next, ok := s.Next(); ok; next, ok = s.Next() { // let time run until it holds nothing
			if next.After(now) {
				now = next
			}
			for p := s.Pop(now); p != nil; p = s.Pop(now) {
				s.Release(p)
			}
		}
		c := s.Counters()
		if c.Received+c.Duplicated+c.Replayed != c.Emitted+c.Dropped()+uint64(s.InFlight()) || s.InFlight() != 0 {
			t.Fatalf("conservation broken: %+v, in flight %d", c, s.InFlight())
		}
	})
}
