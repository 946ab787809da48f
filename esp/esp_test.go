package esp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// newPair returns a sealing and an opening SA sharing one configuration.
func newPair(t testing.TB, cfg *sa.SA) (*esp.SA, *esp.SA) {
	t.Helper()
	eng := cpu.New()
	out, err := esp.NewSA(cfg, eng, esp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := esp.NewSA(cfg, eng, esp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return out, in
}

func randomKey(t testing.TB, n int) sa.Key {
	k := make(sa.Key, n)
	rand.Read(k)
	return k
}

func testSA(t testing.TB, suite sa.Suite, mode sa.Mode, v6 bool) *sa.SA {
	cfg := &sa.SA{SPI: 0x1001, Mode: mode, Suite: suite, ReplayWindow: 64,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
	if v6 {
		cfg.Src, cfg.Dst = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	}
	cfg.EncKey = randomKey(t, suite.EncKeyLens()[0])
	cfg.AuthKey = randomKey(t, suite.AuthKeyLen())
	return cfg
}

// udpPacket builds an IPv4 or IPv6 UDP packet with n payload bytes.
func udpPacket(v6 bool, n int) []byte {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i)
	}
	var hdr []byte
	if v6 {
		hdr = make([]byte, 40)
		hdr[0] = 0x60
		hdr[4], hdr[5] = byte((8+n)>>8), byte(8+n)
		hdr[6], hdr[7] = 17, 64
		a := netip.MustParseAddr("2001:db8:1::1").As16()
		b := netip.MustParseAddr("2001:db8:2::1").As16()
		copy(hdr[8:], a[:])
		copy(hdr[24:], b[:])
	} else {
		hdr = make([]byte, 20)
		hdr[0] = 0x45
		tot := 28 + n
		hdr[2], hdr[3] = byte(tot>>8), byte(tot)
		hdr[8], hdr[9] = 64, 17
		copy(hdr[12:], []byte{198, 51, 100, 1})
		copy(hdr[16:], []byte{203, 0, 113, 1})
	}
	udp := []byte{0x12, 0x34, 0x56, 0x78, byte((8 + n) >> 8), byte(8 + n), 0, 0}
	return append(append(hdr, udp...), payload...)
}

func TestSealOpenRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, suite := range cpu.Suites() {
		for _, mode := range []sa.Mode{sa.Tunnel, sa.Transport} {
			for _, v6 := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/v6=%v", suite, mode, v6), func(t *testing.T) {
					out, in := newPair(t, testSA(t, suite, mode, v6))
					pr := esp.NewProcessor(out.Engine())
					for _, n := range []int{0, 1, 13, 100, 1400} {
						inner := udpPacket(v6, n)
						buf := make([]byte, esp.Headroom+len(inner)+esp.Tailroom)
						copy(buf[esp.Headroom:], inner)
						p := &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(inner), SA: out}
						if err := pr.Seal(ctx, []*esp.Packet{p}); err != nil || p.Drop != esp.OK {
							t.Fatalf("seal %d: %v %v", n, err, p.Drop)
						}
						// Open: strip the transport IP header the way a raw socket delivers it.
						hdr := 0
						if mode == sa.Transport {
							hdr = 20
							if v6 {
								hdr = 40
							}
						}
						q := &esp.Packet{Buf: buf, Off: p.Off + hdr, Len: p.Len - hdr, HdrLen: hdr, SA: in}
						if err := pr.Open(ctx, []*esp.Packet{q}); err != nil || q.Drop != esp.OK {
							t.Fatalf("open %d: %v %v", n, err, q.Drop)
						}
						got := q.Data()
						if mode == sa.Transport && !v6 {
							// the checksum and length are rewritten; compare the rest
							got = append([]byte(nil), got...)
							got[10], got[11] = inner[10], inner[11]
						}
						if !bytes.Equal(got, inner) {
							t.Fatalf("size %d: inner packet differs:\n got %x\nwant %x", n, got, inner)
						}
					}
				})
			}
		}
	}
}
