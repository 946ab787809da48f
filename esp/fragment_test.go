package esp_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/header"
)

// udpDatagram is an IPv4 or IPv6 UDP packet from sport to dport with n
// bytes of payload: the two bytes of fill over and over.
func udpDatagram(v6 bool, sport, dport uint16, n int, fill uint16) []byte {
	hl := 20
	if v6 {
		hl = 40
	}
	pkt := make([]byte, hl+8+n)
	if v6 {
		pkt[0] = 0x60
		binary.BigEndian.PutUint16(pkt[4:], uint16(8+n))
		pkt[6], pkt[7] = 17, 64
		copy(pkt[8:], netip.MustParseAddr("2001:db8:a::10").AsSlice())
		copy(pkt[24:], netip.MustParseAddr("2001:db8:b::10").AsSlice())
	} else {
		pkt[0] = 0x45
		binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
		pkt[8], pkt[9] = 64, 17
		copy(pkt[12:], []byte{192, 0, 2, 10})
		copy(pkt[16:], []byte{203, 0, 113, 10})
		header.IPv4Header(pkt[:20])
	}
	binary.BigEndian.PutUint16(pkt[hl:], sport)
	binary.BigEndian.PutUint16(pkt[hl+2:], dport)
	binary.BigEndian.PutUint16(pkt[hl+4:], uint16(8+n))
	for i := hl + 8; i+1 < len(pkt); i += 2 {
		binary.BigEndian.PutUint16(pkt[i:], fill)
	}
	return pkt
}

// Fragment cuts an IPv4 or IPv6 packet into fragments of at most size
// bytes of payload (a multiple of 8), with IP ID / fragment ID id.
func Fragment(pkt []byte, size int, id uint32) [][]byte {
	v6 := pkt[0]>>4 == 6
	hl := 20
	if v6 {
		hl = 40
	}
	payload := pkt[hl:]
	var out [][]byte
	for off := 0; off < len(payload); off += size {
		end := min(off+size, len(payload))
		more := end < len(payload)
		var f []byte
		if v6 {
			f = make([]byte, 48+end-off)
			copy(f, pkt[:40])
			f[6] = 44 // fragment header
			binary.BigEndian.PutUint16(f[4:], uint16(8+end-off))
			f[40] = pkt[6]
			fo := uint16(off/8) << 3
			if more {
				fo |= 1
			}
			binary.BigEndian.PutUint16(f[42:], fo)
			binary.BigEndian.PutUint32(f[44:], id)
			copy(f[48:], payload[off:end])
		} else {
			f = make([]byte, 20+end-off)
			copy(f, pkt[:20])
			binary.BigEndian.PutUint16(f[2:], uint16(len(f)))
			binary.BigEndian.PutUint16(f[4:], uint16(id))
			ff := uint16(off / 8)
			if more {
				ff |= 0x2000
			}
			binary.BigEndian.PutUint16(f[6:], ff)
			header.IPv4Header(f[:20])
			copy(f[20:], payload[off:end])
		}
		out = append(out, f)
	}
	return out
}

// TestFragmentPorts: a non-initial fragment's ports are never read from
// its payload: FlowOf gives it none (OPAQUE), Fragments.FlowOf those of its
// initial fragment when that was seen.
func TestFragmentPorts(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) {
			// The payload's bytes read as ports 5000 → 5000: what a
			// non-initial fragment would claim if read.
			frags := Fragment(udpDatagram(v6, 40000, 6000, 64, 5000), 32, 7)
			if len(frags) < 3 {
				t.Fatalf("%d fragments", len(frags))
			}
			cases := []struct {
				name         string
				pkt          []byte
				fr           esp.Fragment
				sport, dport uint16
			}{
				{"initial", frags[0], esp.Fragment{Is: true, Initial: true, ID: 7}, 40000, 6000},
				{"middle", frags[1], esp.Fragment{Is: true, ID: 7}, 0, 0},
				{"last", frags[len(frags)-1], esp.Fragment{Is: true, ID: 7}, 0, 0},
				{"whole", udpDatagram(v6, 1, 2, 10, 0), esp.Fragment{}, 1, 2},
			}
			for _, tc := range cases {
				if fr := esp.FragmentOf(tc.pkt); fr != tc.fr {
					t.Errorf("%s: FragmentOf %+v, want %+v", tc.name, fr, tc.fr)
				}
				_, _, proto, sport, dport, ok := esp.FlowOf(tc.pkt)
				if !ok || proto != 17 || sport != tc.sport || dport != tc.dport {
					t.Errorf("%s: FlowOf proto %d ports %d→%d ok %v, want 17 %d→%d", tc.name, proto, sport, dport, ok, tc.sport, tc.dport)
				}
			}
			var table esp.Fragments
			// A non-initial fragment before its initial one: OPAQUE.
			if _, _, _, sp, dp, _ := table.FlowOf(frags[1]); sp != 0 || dp != 0 {
				t.Errorf("unseen initial: ports %d→%d, want 0→0", sp, dp)
			}
			for i, f := range frags {
				if _, _, _, sp, dp, _ := table.FlowOf(f); sp != 40000 || dp != 6000 {
					t.Errorf("fragment %d after the initial: ports %d→%d, want the initial's 40000→6000", i, sp, dp)
				}
			}
			// Another datagram's fragments (another ID) are not that one's.
			other := Fragment(udpDatagram(v6, 40000, 6000, 64, 5000), 32, 8)
			if _, _, _, sp, dp, _ := table.FlowOf(other[1]); sp != 0 || dp != 0 {
				t.Errorf("another ID: ports %d→%d, want 0→0", sp, dp)
			}
			if n := testing.AllocsPerRun(100, func() { table.FlowOf(frags[1]) }); n != 0 {
				t.Errorf("%v allocations per fragment", n)
			}
		})
	}
}
