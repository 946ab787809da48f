package transport

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/lab/netns"
	"golang.org/x/sys/unix"
)

// sniffer reads every IP packet arriving on a namespace's interfaces
// (AF_PACKET, cooked), to check outer headers as they were on the wire.
type sniffer struct{ fd int }

func sniff(t *testing.T, ns *netns.Namespace) *sniffer {
	t.Helper()
	var fd int
	err := ns.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons16(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &sniffer{fd: fd}
}

func htons16(v uint16) uint16 { return v<<8 | v>>8 }

// next returns the next IP packet carrying proto (50 or 17) within 3 s.
func (s *sniffer) next(t *testing.T, proto byte) []byte {
	t.Helper()
	buf := make([]byte, 70000)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil || n < 20 {
			continue
		}
		p := buf[:n]
		switch {
		case p[0]>>4 == 4 && p[9] == proto:
			return append([]byte(nil), p...)
		case p[0]>>4 == 6 && n >= 40 && p[6] == proto:
			return append([]byte(nil), p...)
		}
	}
	t.Fatalf("no IP packet of protocol %d on the wire", proto)
	return nil
}

// TestOuterHeader: the TOS, TTL and DF a packet asks for are what the
// wire carries, for every family and encapsulation, and the receiver
// reports the TOS it arrived with.
func TestOuterHeader(t *testing.T) {
	p := newPair(t)
	for _, fam := range families {
		for _, kind := range []Kind{RawESP, UDPEncap} {
			a := open(t, p.a, kind, fam.local(p), false)
			b := open(t, p.b, kind, fam.remote(p), false)
			sn := sniff(t, p.b)
			proto := byte(50)
			if kind == UDPEncap {
				proto = 17
			}
			peer := netip.AddrPortFrom(fam.remote(p), b.LocalAddr().Port())
			cases := []struct {
				name     string
				tos, ttl uint8
				fragment bool
			}{
				{"defaults", 0, 0, false},
				{"EF and ECT(1)", 46<<2 | 1, 33, false},
				{"CE without DF", 10<<2 | 3, 200, true},
			}
			for i, tc := range cases {
				if fam.name == "ipv6" && tc.fragment {
					continue // no DF bit in IPv6
				}
				data := espPacket(9, uint32(i+1), 200)
				pkt := out(data, peer)
				pkt.TOS, pkt.TTL, pkt.Fragment = tc.tos, tc.ttl, tc.fragment
				if _, err := a.Send([]*esp.Packet{pkt}); err != nil {
					t.Fatalf("%s/%s %s: send: %v", kind, fam.name, tc.name, err)
				}
				w := sn.next(t, proto)
				wantTTL := tc.ttl
				if wantTTL == 0 {
					wantTTL = 64
				}
				var tos, ttl uint8
				df := false
				if fam.name == "ipv4" {
					tos, ttl, df = w[1], w[8], w[6]&0x40 != 0
				} else {
					tos, ttl = uint8(binary.BigEndian.Uint16(w[0:2])>>4), w[7]
				}
				if tos != tc.tos || ttl != wantTTL {
					t.Errorf("%s/%s %s: wire TOS %#x TTL %d, want %#x %d", kind, fam.name, tc.name, tos, ttl, tc.tos, wantTTL)
				}
				if fam.name == "ipv4" && df == tc.fragment {
					t.Errorf("%s/%s %s: wire DF %v, want %v", kind, fam.name, tc.name, df, !tc.fragment)
				}
				b.SetReadDeadline(time.Now().Add(3 * time.Second))
				in := slots(1, 2048)
				if n, err := b.Receive(in); err != nil || n != 1 || string(in[0].Data()) != string(data) {
					t.Fatalf("%s/%s %s: receive: n=%d err=%v", kind, fam.name, tc.name, n, err)
				}
				if in[0].TOS != tc.tos {
					t.Errorf("%s/%s %s: received TOS %#x, want %#x", kind, fam.name, tc.name, in[0].TOS, tc.tos)
				}
			}
		}
	}
}

// TestOwnFragments: an IPv4 packet without DF larger than its FragMTU
// leaves as fragments of at most FragMTU bytes with one ID, and the
// receiving kernel reassembles them before the socket sees the packet.
func TestOwnFragments(t *testing.T) {
	p := newPair(t)
	for _, kind := range []Kind{RawESP, UDPEncap} {
		a := open(t, p.a, kind, p.a4, false)
		b := open(t, p.b, kind, p.b4, false)
		sn := sniff(t, p.b)
		peer := netip.AddrPortFrom(p.b4, b.LocalAddr().Port())
		big := espPacket(7, 1, 2500)
		pkt := out(big, peer)
		pkt.Fragment, pkt.FragMTU, pkt.TOS = true, 1000, 0x02
		if _, err := a.Send([]*esp.Packet{pkt}); err != nil {
			t.Fatalf("%s: send 2500 bytes in fragments: %v", kind, err)
		}
		proto := byte(50)
		if kind == UDPEncap {
			proto = 17
		}
		var id uint16
		total := 0
		for k := 0; ; k++ {
			f := sn.next(t, proto)
			if len(f) > 1000 {
				t.Errorf("%s: fragment %d is %d bytes, over the fragment MTU 1000", kind, k, len(f))
			}
			if f[1] != 0x02 || f[6]&0x40 != 0 {
				t.Errorf("%s: fragment %d TOS %#x flags %#x, want TOS 0x02 and no DF", kind, k, f[1], f[6])
			}
			fid := binary.BigEndian.Uint16(f[4:])
			if k == 0 {
				id = fid
			} else if fid != id {
				t.Errorf("%s: fragment %d ID %d, first had %d", kind, k, fid, id)
			}
			total += len(f) - 20
			if binary.BigEndian.Uint16(f[6:])&0x2000 == 0 {
				break
			}
		}
		udp := 0
		if kind == UDPEncap {
			udp = 8
		}
		if total != len(big)+udp {
			t.Errorf("%s: fragments carry %d bytes, want %d", kind, total, len(big)+udp)
		}
		b.SetReadDeadline(time.Now().Add(3 * time.Second))
		in := slots(1, 4096)
		if n, err := b.Receive(in); err != nil || n != 1 || string(in[0].Data()) != string(big) {
			t.Fatalf("%s: reassembled packet: n=%d err=%v len=%d", kind, n, err, in[0].Len)
		}
		if s := a.Stats(); s.Fragmented != 1 || s.FragmentsOut != 3 {
			t.Errorf("%s: stats %d fragmented into %d, want 1 into 3", kind, s.Fragmented, s.FragmentsOut)
		}
	}
}
