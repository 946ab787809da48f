package gateway_test

import (
	"testing"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// ESP that arrives for an SPI the IKE daemon has asked a peer to send
// with, before its SA is in force, is held: opened and delivered, in
// order, once the SA goes in force; counted unknown-spi when it never
// does; and an SPI nobody expects is unknown-spi at once, as before.
func TestHeldUntilTheSAIsInForce(t *testing.T) {
	for _, c := range []struct {
		name            string
		expect, install bool
		delivered       int
		held, unknown   uint64
	}{
		{"expected, then in force", true, true, 10, 10, 0},
		{"expected, never in force", true, false, 0, 10, 10},
		{"not expected", false, true, 0, 0, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			wire := &wireLog{}
			sas := pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64)
			r := &reloadBed{e1: &closeCounter{Engine: cpu.New()}, e2: &closeCounter{Engine: cpu.New()}, sas: sas}
			r.bed = newBedTapped(t, [2]offload.Engine{r.e1, r.e2}, sas, 0, wire.sent)
			r.got = newSink(r.dev2)
			r.send(t, hostB, 10, 10)
			// gw2 forgets the SA, as if it had never been negotiated, and
			// the peer's first packets under it arrive.
			if err := r.gw2.Apply(gateway.Change{Del: []gateway.SAID{{SPI: 0x1001, Dst: gw2Addr}}}); err != nil {
				t.Fatal(err)
			}
			if c.expect {
				r.gw2.Expect(0x1001)
			}
			before := r.got.count()
			n := wire.replay(t, r.wire1)
			waitFor(t, "the packets held or counted", func() bool {
				st := r.gw2.Stats()
				return st.Held+st.Drops["unknown-spi"] == uint64(n)
			})
			if c.install {
				if err := r.gw2.Apply(gateway.Change{Add: clone(sas[:1])}); err != nil {
					t.Fatal(err)
				}
				r.gw2.ReleaseHeld(0x1001)
			} else {
				r.gw2.ExpireHeld(0x1001)
			}
			waitFor(t, "the held packets delivered", func() bool { return r.got.count()-before == c.delivered })
			st := r.gw2.Stats()
			if st.Held != c.held || st.Drops["unknown-spi"] != c.unknown {
				t.Errorf("held %d, unknown-spi %d; want %d and %d", st.Held, st.Drops["unknown-spi"], c.held, c.unknown)
			}
			if c.install {
				in := findSA(r.gw2, 0x1001)
				if h := in.HighestAccepted(); h != uint64(c.delivered) {
					t.Errorf("highest accepted %d, want %d", h, c.delivered)
				}
				// Released once: a second release opens nothing again.
				r.gw2.ReleaseHeld(0x1001)
				if got := r.got.count() - before; got != c.delivered {
					t.Errorf("%d delivered after a second release, want %d", got, c.delivered)
				}
			}
		})
	}
}
