package gateway

import "time"

// Expect, ReleaseHeld and ExpireHeld are, for tests, the IKE daemon's
// calls around a CHILD_SA it asks a peer for (held.go), and the end of
// the wait for one that never comes.
func (g *Gateway) Expect(spi uint32)      { g.expect(spi) }
func (g *Gateway) ReleaseHeld(spi uint32) { g.releaseHeld(spi) }
func (g *Gateway) ExpireHeld(spi uint32) {
	g.held.mu.Lock()
	if _, ok := g.held.until[spi]; ok {
		g.held.until[spi] = time.Now().Add(-time.Second)
	}
	g.held.mu.Unlock()
	g.expire(spi)
}
