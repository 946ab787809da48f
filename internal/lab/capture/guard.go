package capture

import (
	"encoding/binary"
	"fmt"
	"io"
)

// maxSnaplen bounds the capture length of one frame, as tcpdump's
// MAXIMUM_SNAPLEN does. pcapgo allocates whatever length a record declares
// before reading it, so a corrupt length would otherwise ask for gigabytes.
const maxSnaplen = 262144

// pcapng block types whose bodies start with a capture length pcapgo
// allocates.
const (
	ngSectionHeader  = 0x0a0d0d0a
	ngPacket         = 2 // obsolete Packet Block
	ngSimplePacket   = 3
	ngEnhancedPacket = 6
)

// ngGuard passes a pcapng stream through unchanged while it walks the block
// headers, and fails the read that would hand pcapgo a block whose packet
// length is beyond maxSnaplen or beyond the block itself.
type ngGuard struct {
	r     io.Reader
	pos   uint32 // bytes seen of the current block
	len   uint32 // the current block's total length, once known
	hdr   [28]byte
	order binary.ByteOrder
	block int
}

func newNgGuard(r io.Reader) *ngGuard {
	return &ngGuard{r: r, order: binary.LittleEndian}
}

func (g *ngGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	for i := 0; i < n; i++ {
		if e := g.observe(p[i]); e != nil {
			return i, e
		}
	}
	return n, err
}

func (g *ngGuard) observe(b byte) error {
	if g.pos < uint32(len(g.hdr)) {
		g.hdr[g.pos] = b
	}
	g.pos++
	typ := binary.LittleEndian.Uint32(g.hdr[0:4]) // the SHB type reads the same both ways
	switch {
	case g.pos == 8 && typ != ngSectionHeader, g.pos == 12 && typ == ngSectionHeader:
		if typ == ngSectionHeader {
			g.order = binary.LittleEndian
			if binary.BigEndian.Uint32(g.hdr[8:12]) == 0x1a2b3c4d {
				g.order = binary.BigEndian
			}
		}
		g.block++
		g.len = g.order.Uint32(g.hdr[4:8])
		if g.len < 12 || g.len%4 != 0 {
			return fmt.Errorf("pcapng block %d: length %d is not a multiple of 4 of at least 12", g.block, g.len)
		}
	case g.pos == 12 && g.order.Uint32(g.hdr[0:4]) == ngSimplePacket:
		if n := g.order.Uint32(g.hdr[8:12]); n > maxSnaplen {
			return fmt.Errorf("pcapng block %d: packet length %d over %d", g.block, n, maxSnaplen)
		}
	case g.pos == 28 && (g.order.Uint32(g.hdr[0:4]) == ngEnhancedPacket || g.order.Uint32(g.hdr[0:4]) == ngPacket):
		if n := g.order.Uint32(g.hdr[20:24]); n > maxSnaplen || n > g.len-32 {
			return fmt.Errorf("pcapng block %d: capture length %d does not fit the block (%d bytes)", g.block, n, g.len)
		}
	}
	if g.len != 0 && g.pos == g.len {
		g.pos, g.len = 0, 0
	}
	return nil
}
