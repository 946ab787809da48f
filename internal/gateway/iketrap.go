package gateway

import (
	"net/netip"

	"github.com/espgw/espgw/sa"
)

// Trap is a selector of outbound traffic that, while no policy matches
// it, starts IKE on its first packet (swanctl's start_action = trap):
// Fire is called for each such packet, which is dropped and counted as
// acquire. Fire must not block.
type Trap struct {
	Selector sa.Selector
	Fire     func()
}

// SetTraps replaces the gateway's traps (none: nil).
func (g *Gateway) SetTraps(traps []Trap) { g.traps.Store(&traps) }

// acquire fires the first trap matching an outbound packet no policy
// took, and reports whether one did.
func (g *Gateway) acquire(src, dst netip.Addr, proto uint8, sport, dport uint16) bool {
	ts := g.traps.Load()
	if ts == nil {
		return false
	}
	for i := range *ts {
		if t := &(*ts)[i]; t.Selector.Matches(src, dst, proto, sport, dport) {
			t.Fire()
			return true
		}
	}
	return false
}
