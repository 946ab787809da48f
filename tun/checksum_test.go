package tun

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/header"
)

// zeroSumPayload is a UDP payload of n bytes (n even) whose datagram from
// src:sport to dst:dport has a checksum that computes to zero, which RFC
// 768 says is sent as 0xffff: 0 in the field means "no checksum" over IPv4
// and is refused over IPv6 (RFC 8200 §8.1).
func zeroSumPayload(src, dst netip.Addr, sport, dport uint16, n int) []byte {
	p := make([]byte, n)
	for i := range p[:n-2] {
		p[i] = byte(i*7 + 3)
	}
	seg := make([]byte, 8+n)
	binary.BigEndian.PutUint16(seg[0:], sport)
	binary.BigEndian.PutUint16(seg[2:], dport)
	binary.BigEndian.PutUint16(seg[4:], uint16(8+n))
	copy(seg[8:], p)
	sum := header.Add(header.Pseudo(src.AsSlice(), dst.AsSlice(), 17, len(seg)), seg)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	// The last word makes the one's complement sum 0xffff.
	binary.BigEndian.PutUint16(p[n-2:], uint16(0xffff-sum))
	return p
}

// TestUDPChecksumNeverZero sends, from a socket in the TUN's namespace,
// UDP datagrams whose checksum computes to zero, alone and as one UDP GSO
// super-packet: the kernel leaves their checksums to the TUN's reader
// (vnet-hdr NEEDS_CSUM), and every one Read returns must carry 0xffff, a
// checksum that verifies, never 0 — which an IPv6 receiver counts as a
// checksum error and an IPv4 one as no checksum at all.
func TestUDPChecksumNeverZero(t *testing.T) {
	for _, mode := range []OffloadMode{OffloadAuto, OffloadOff} {
		ns := newBed(t)
		dev := newTUN(t, ns, mode)
		for _, fam := range []struct {
			name     string
			src, dst netip.Addr
		}{
			{"ipv4", netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")},
			{"ipv6", netip.MustParseAddr("2001:db8:a::1"), netip.MustParseAddr("2001:db8:a::2")},
		} {
			for _, gso := range []bool{false, true} {
				t.Run(fmt.Sprintf("offloads=%v/%s/gso=%v", dev.Offloads(), fam.name, gso), func(t *testing.T) {
					const sport, dport, segLen = 7100, 9100, 600
					payload := zeroSumPayload(fam.src, fam.dst, sport, dport, segLen)
					var oob []byte
					segs := 1
					if gso {
						segs = 4
						one := payload
						payload = nil
						for range segs {
							payload = append(payload, one...)
						}
						oob = make([]byte, unix.CmsgSpace(2))
						h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
						h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
						h.SetLen(unix.CmsgLen(2))
						binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], segLen)
					}
					err := ns.Do(func() error {
						c, err := net.ListenUDP("udp", &net.UDPAddr{IP: fam.src.AsSlice(), Port: sport})
						if err != nil {
							return err
						}
						defer c.Close()
						_, _, err = c.WriteMsgUDP(payload, oob, &net.UDPAddr{IP: fam.dst.AsSlice(), Port: dport})
						return err
					})
					if err != nil {
						t.Fatalf("send: %v", err)
					}
					isOurs := func(b []byte) bool {
						hl, proto, _, _, ok := header.Header(b)
						return ok && proto == 17 && len(b) >= hl+8 && binary.BigEndian.Uint16(b[hl+2:]) == dport
					}
					for i, pkt := range readN(t, dev, segs, isOurs) {
						hl, _, _, _, _ := header.Header(pkt)
						src, dst := header.Addrs(pkt)
						seg := pkt[hl:]
						got := binary.BigEndian.Uint16(seg[6:])
						if got != 0xffff || !header.Valid(header.Pseudo(src.AsSlice(), dst.AsSlice(), 17, len(seg)), seg) {
							t.Errorf("datagram %d of %d: UDP checksum %#04x, want 0xffff (verifying)", i+1, segs, got)
						}
					}
				})
			}
		}
	}
}

// readN reads batches from dev until n packets match, and returns copies of
// them.
func readN(t *testing.T, dev *Device, n int, match func([]byte) bool) [][]byte {
	t.Helper()
	bufs, sizes := buffers(dev.BatchSize(), headroom+MaxSegment)
	if err := dev.File().SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatalf("set read deadline: %v", err)
	}
	defer dev.File().SetReadDeadline(time.Time{})
	var got [][]byte
	for len(got) < n {
		k, err := dev.Read(bufs, sizes, headroom)
		if err != nil {
			t.Fatalf("read after %d of %d packets: %v", len(got), n, err)
		}
		for i := range k {
			if pkt := bufs[i][headroom : headroom+sizes[i]]; match(pkt) {
				got = append(got, append([]byte(nil), pkt...))
			}
		}
	}
	return got
}
