package gateway

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// A peer may send on a CHILD_SA as soon as it has answered the request
// that made it (RFC 7296 §2.8), so its first packets can arrive before this
// side has read the answer and put the SA in force. heldESP keeps such
// packets, for SPIs the IKE daemon said it is asking a peer to send with
// (expect), until the SA goes in force (releaseHeld opens them, in arrival
// order) or the wait ends (they are counted unknown-spi). Nothing is held
// for any other SPI, and the data path only reads an atomic while nothing
// is expected.
type heldESP struct {
	expecting atomic.Int32 // len(until)
	held      atomic.Uint64

	mu    sync.Mutex
	until map[uint32]time.Time
	pkts  []heldPacket
	// run opens released packets, built on the first release and used
	// under runMu alone: the data path takes mu inside the tables' read
	// lock, so releaseHeld must not take that lock with mu held.
	runMu sync.Mutex
	run   *batch
}

// heldPacket is an ESP packet kept as it arrived: its bytes from the IP
// header the receive left in front of it (HdrLen) to its end.
type heldPacket struct {
	spi    uint32
	data   []byte
	hdrLen int
	local  netip.Addr
	peer   netip.AddrPort
	tos    uint8
	encap  sa.Encap
}

const (
	// maxHeld bounds the packets held at once, for all SPIs together.
	maxHeld = 256
	// heldWait is how long packets for an expected SPI are kept: past the
	// IKE retransmissions a lost answer needs.
	heldWait = 3 * time.Second
)

// expect holds packets for spi until releaseHeld or heldWait: the IKE daemon
// is about to ask a peer to send with it.
func (g *Gateway) expect(spi uint32) {
	h := &g.held
	h.mu.Lock()
	if h.until == nil {
		h.until = map[uint32]time.Time{}
	}
	h.until[spi] = time.Now().Add(heldWait)
	h.expecting.Store(int32(len(h.until)))
	h.mu.Unlock()
	time.AfterFunc(heldWait, func() { g.expire(spi) })
}

// heldSize is the largest ESP packet held: one of the outer MTU.
func (g *Gateway) heldSize() int { return g.opts.OuterMTU }

// hold keeps p if its SPI is expected and there is room.
func (g *Gateway) hold(spi uint32, p *esp.Packet, encap sa.Encap) bool {
	h := &g.held
	if h.expecting.Load() == 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.until[spi]
	if !ok || time.Now().After(until) || len(h.pkts) == maxHeld || p.HdrLen > rxOffset || p.Len > g.heldSize() {
		return false
	}
	data := append([]byte(nil), p.Buf[p.Off-p.HdrLen:p.Off+p.Len]...)
	h.pkts = append(h.pkts, heldPacket{spi: spi, data: data, hdrLen: p.HdrLen, local: p.Local, peer: p.Peer, tos: p.TOS, encap: encap})
	h.held.Add(1)
	return true
}

// expire counts what is still held for spi as unknown-spi, unless the
// SPI was expected again meanwhile.
func (g *Gateway) expire(spi uint32) {
	h := &g.held
	h.mu.Lock()
	defer h.mu.Unlock()
	if until, ok := h.until[spi]; !ok || time.Now().Before(until) {
		return
	}
	delete(h.until, spi)
	h.expecting.Store(int32(len(h.until)))
	g.counters.Drops[UnknownSPI].Add(uint64(h.take(spi)))
}

// take removes the packets held for spi and returns how many there were;
// h.mu is held.
func (h *heldESP) take(spi uint32) int {
	n := 0
	keep := h.pkts[:0]
	for _, hp := range h.pkts {
		if hp.spi == spi {
			n++
			continue
		}
		keep = append(keep, hp)
	}
	clear(h.pkts[len(keep):])
	h.pkts = keep
	return n
}

// releaseHeld opens the packets held for spi, whose SA is now in force, and
// writes them to the TUN device; packets are no longer held for it.
func (g *Gateway) releaseHeld(spi uint32) {
	h := &g.held
	h.mu.Lock()
	if _, ok := h.until[spi]; !ok {
		h.mu.Unlock()
		return
	}
	delete(h.until, spi)
	h.expecting.Store(int32(len(h.until)))
	var mine []heldPacket
	for _, hp := range h.pkts {
		if hp.spi == spi {
			mine = append(mine, hp)
		}
	}
	h.take(spi)
	h.mu.Unlock()
	if len(mine) == 0 {
		return
	}
	h.runMu.Lock()
	defer h.runMu.Unlock()
	if h.run == nil {
		h.run = newBatch(g.engine, maxHeld, rxOffset+g.heldSize()+esp.Tailroom)
	}
	b := h.run
	st := g.view()
	for i, hp := range mine {
		p := b.ptrs[i]
		start := rxOffset - hp.hdrLen
		copy(p.Buf[start:], hp.data)
		p.Reset(p.Buf, rxOffset, len(hp.data)-hp.hdrLen)
		p.HdrLen, p.Local, p.Peer, p.TOS = hp.hdrLen, hp.local, hp.peer, hp.tos
		s, miss := st.receiver(spi, sa.Arrival{Dst: hp.local, Src: hp.peer.Addr(), Encap: hp.encap, SrcPort: hp.peer.Port()})
		if s == nil {
			g.drop(missReason(miss))
		}
		p.SA = s
	}
	g.release()
	b.n = len(mine)
	g.prepareOpen(b)
	b.run.Run(context.Background(), b.ops)
	g.writeTUN(b)
	b.reset()
}
