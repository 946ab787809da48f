package testbed

import (
	"net/netip"
	"testing"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/capture"
)

// The output of a ping that had its 8 replies before the reply to request
// 7 (held back on the WAN) and those to 9 and 10 arrived.
const reorderedPing = `PING 203.0.113.10 (203.0.113.10) 512(540) bytes of data.
520 bytes from 203.0.113.10: icmp_seq=1 ttl=62 time=0.305 ms
520 bytes from 203.0.113.10: icmp_seq=2 ttl=62 time=0.432 ms
520 bytes from 203.0.113.10: icmp_seq=5 ttl=62 time=0.342 ms
520 bytes from 203.0.113.10: icmp_seq=6 ttl=62 time=0.406 ms
520 bytes from 203.0.113.10: icmp_seq=3 ttl=62 time=80.5 ms
520 bytes from 203.0.113.10: icmp_seq=4 ttl=62 time=52.5 ms
520 bytes from 203.0.113.10: icmp_seq=8 ttl=62 time=0.331 ms
520 bytes from 203.0.113.10: icmp_seq=8 ttl=62 time=0.331 ms (DUP!)
520 bytes from 203.0.113.10: icmp_seq=11 ttl=62 time=0.376 ms

--- 203.0.113.10 ping statistics ---
11 packets transmitted, 8 received, +1 duplicates, 27.2727% packet loss, time 257ms
`

func TestCountReplies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sniffed []int
		want    int
	}{
		{"ping's lines alone", nil, 8},
		{"late replies sniffed", []int{7, 9, 10}, 11},
		{"sniffed twice what ping printed", []int{1, 2, 3, 11}, 8},
		{"a reply to nothing sent", []int{12}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := map[int]bool{}
			for _, s := range tc.sniffed {
				m[s] = true
			}
			if got := countReplies([]byte(reorderedPing), 11, m); got != tc.want {
				t.Fatalf("%d replies, want %d", got, tc.want)
			}
		})
	}
}

// echo builds an IPv4 echo request or reply of n payload bytes, split into
// fragments of at most mtu bytes when mtu > 0.
func echo(src, dst netip.Addr, reply bool, id, seq uint16, n, mtu int) [][]byte {
	icmp := make([]byte, header.ICMPLen+n)
	m := header.ICMP{Rest: uint32(id)<<16 | uint32(seq)}
	if !reply {
		m.Type = 8
	}
	m.Marshal(icmp)
	header.ICMPChecksum(icmp)
	step := len(icmp)
	if mtu > 0 {
		step = (mtu - header.IPv4Len) &^ 7
	}
	var out [][]byte
	for off := 0; off < len(icmp); off += step {
		end := min(off+step, len(icmp))
		p := make([]byte, header.IPv4Len+end-off)
		h := header.IPv4{TotalLen: uint16(len(p)), ID: 77, MF: end < len(icmp), FragOff: uint16(off), TTL: 64, Protocol: 1, Src: src, Dst: dst}
		h.Marshal(p)
		copy(p[header.IPv4Len:], icmp[off:end])
		out = append(out, p)
	}
	return out
}

func TestPingWatch(t *testing.T) {
	me, peer, other := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("203.0.113.99")
	w := newPingWatch(peer)
	see := func(out bool, pkts ...[]byte) {
		for _, p := range pkts {
			w.see(capture.Sniffed{Data: p, Outgoing: out})
		}
	}
	see(true, echo(me, peer, false, 5, 1, 56, 0)...)
	see(true, echo(me, peer, false, 5, 2, 3000, 1500)...)
	see(false, echo(peer, me, true, 5, 1, 56, 0)...)
	f := echo(peer, me, true, 5, 2, 3000, 1500)
	see(false, f[2], f[0], f[0]) // a duplicated fragment, one missing
	if got := w.replied(); len(got) != 1 || !got[1] {
		t.Fatalf("before the last fragment: %v", got)
	}
	see(false, f[1])
	see(false, echo(peer, me, true, 6, 3, 56, 0)...)  // another ping's reply
	see(false, echo(other, me, true, 5, 4, 56, 0)...) // from another host
	see(true, echo(me, peer, true, 5, 5, 56, 0)...)   // a reply this host sent
	if got := w.replied(); len(got) != 2 || !got[1] || !got[2] {
		t.Fatalf("replies %v, want 1 and 2", got)
	}
}
