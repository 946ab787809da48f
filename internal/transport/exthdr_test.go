package transport

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
)

// extChain is an IPv6 header for src→dst followed by hop-by-hop,
// destination options and a routing header (type 253, experimental, with
// no segments left), the last one naming ESP next.
func extChain(src, dst netip.Addr, espLen int) []byte {
	ext := []byte{
		60, 0, 1, 4, 0, 0, 0, 0, // hop-by-hop → destination options; PadN
		43, 0, 1, 4, 0, 0, 0, 0, // destination options → routing; PadN
		50, 0, 253, 0, 0, 0, 0, 0, // routing type 253, segments left 0 → ESP
	}
	h := make([]byte, 40, 40+len(ext))
	binary.BigEndian.PutUint32(h, 6<<28|0x2e<<20)
	binary.BigEndian.PutUint16(h[4:], uint16(len(ext)+espLen))
	h[6], h[7] = 0, 33
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, ext...)
}

// TestExtensionHeaders: an IPv6 ESP packet with hop-by-hop, destination
// options and routing headers in front leaves with them on the wire, and
// the receiver gets them back in front of the ESP packet, with the header
// it came with.
func TestExtensionHeaders(t *testing.T) {
	p := newPair(t)
	a := open(t, p.a, RawESP, p.a6, false)
	b := open(t, p.b, RawESP, p.b6, false)
	sn := sniff(t, p.b)
	data := espPacket(0x77, 9, 120)
	chain := extChain(p.a6, p.b6, len(data))
	buf := append(append([]byte{}, chain...), data...)
	out := &esp.Packet{Buf: buf, Off: len(chain), Len: len(data), HdrLen: len(chain), Peer: netip.AddrPortFrom(p.b6, 0)}
	if _, err := a.Send([]*esp.Packet{out}); err != nil {
		t.Fatalf("send: %v", err)
	}
	w := sn.next(t, 0) // the hop-by-hop header is next after IPv6
	if !bytes.Equal(w[40:40+len(chain)-40], chain[40:]) || !bytes.Equal(w[len(chain):], data) {
		t.Fatalf("on the wire:\n%x\nwant the chain and ESP:\n%x", w, buf)
	}
	b.SetReadDeadline(time.Now().Add(3 * time.Second))
	in := slots(1, 2048)
	for i := range in {
		in[i].Off = 256
	}
	n, err := b.Receive(in)
	if err != nil || n != 1 {
		t.Fatalf("receive: n=%d err=%v", n, err)
	}
	r := in[0]
	if !bytes.Equal(r.Data(), data) || r.HdrLen != len(chain) {
		t.Fatalf("received %d bytes with a %d-byte header, want %d and %d", r.Len, r.HdrLen, len(data), len(chain))
	}
	got := r.Buf[r.Off-r.HdrLen : r.Off]
	want := append([]byte{}, chain...)
	want[7] = got[7] // the hop limit as it arrived (the sender's 33)
	if !bytes.Equal(got, want) {
		t.Errorf("header given back:\n%x\nwant:\n%x", got, want)
	}
	if got[7] != 33 {
		t.Errorf("hop limit %d, sent 33", got[7])
	}
}
