package gateway_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/sa"
)

// fragmentedUDP is a UDP datagram to dport cut into IP fragments of 64
// payload bytes, its payload the bytes of the port lure over and over: read
// as ports, any non-initial fragment claims lure → lure.
func fragmentedUDP(v6 bool, dport, lure uint16, id uint32) [][]byte {
	hl := 20
	if v6 {
		hl = 40
	}
	pkt := make([]byte, hl+8+300)
	if v6 {
		pkt[0], pkt[6], pkt[7] = 0x60, 17, 64
		binary.BigEndian.PutUint16(pkt[4:], uint16(len(pkt)-40))
		copy(pkt[8:], netip.MustParseAddr("2001:db8:a::10").AsSlice())
		copy(pkt[24:], netip.MustParseAddr("2001:db8:b::10").AsSlice())
	} else {
		pkt[0], pkt[8], pkt[9] = 0x45, 64, 17
		copy(pkt[12:], []byte{192, 0, 2, 10})
		copy(pkt[16:], []byte{203, 0, 113, 10})
	}
	binary.BigEndian.PutUint16(pkt[hl:], 40000)
	binary.BigEndian.PutUint16(pkt[hl+2:], dport)
	binary.BigEndian.PutUint16(pkt[hl+4:], uint16(len(pkt)-hl))
	for i := hl + 8; i+1 < len(pkt); i += 2 {
		binary.BigEndian.PutUint16(pkt[i:], lure)
	}
	var out [][]byte
	payload := pkt[hl:]
	for off := 0; off < len(payload); off += 64 {
		end := min(off+64, len(payload))
		more := end < len(payload)
		var f []byte
		if v6 {
			f = append(append([]byte(nil), pkt[:40]...), make([]byte, 8)...)
			f[6] = 44
			binary.BigEndian.PutUint16(f[4:], uint16(8+end-off))
			f[40] = 17
			fo := uint16(off/8) << 3
			if more {
				fo |= 1
			}
			binary.BigEndian.PutUint16(f[42:], fo)
			binary.BigEndian.PutUint32(f[44:], id)
		} else {
			f = append([]byte(nil), pkt[:20]...)
			binary.BigEndian.PutUint16(f[2:], uint16(20+end-off))
			binary.BigEndian.PutUint16(f[4:], uint16(id))
			ff := uint16(off / 8)
			if more {
				ff |= 0x2000
			}
			binary.BigEndian.PutUint16(f[6:], ff)
			header.IPv4Header(f[:20])
		}
		out = append(out, append(f, payload[off:end]...))
	}
	return out
}

// TestFragmentsJudgedByTheirInitialPorts (RFC 4301 §7): with selectors that
// name a port, a fragmented UDP datagram to the allowed port passes whole,
// and a forbidden flow's fragments do not, though every non-initial one's
// payload reads as the allowed port. Outbound the SPD decides, inbound the
// SA's selectors; IPv4 and IPv6 (fragment header) alike.
func TestFragmentsJudgedByTheirInitialPorts(t *testing.T) {
	const allowed, forbidden = 5000, 6000
	suite := sa.Suite{Cipher: sa.CipherAESGCM16}
	for _, v6 := range []bool{false, true} {
		for _, side := range []string{"outbound SPD", "inbound selectors"} {
			t.Run(fmt.Sprintf("ipv6=%v/%s", v6, side), func(t *testing.T) {
				out := &sa.SA{SPI: 0x1001, Src: gw1Addr, Dst: gw2Addr, Suite: suite, EncKey: key(20), ReplayWindow: 64}
				in := *out
				onlyAllowed := sa.Selector{Proto: 17, DstPorts: sa.PortRange{Lo: allowed, Hi: allowed}}
				e1 := end{local: []netip.Addr{gw1Addr}, sas: []*sa.SA{out}}
				if side == "outbound SPD" {
					e1.spd = []sa.Policy{
						{Priority: 1, Selector: onlyAllowed, Action: sa.Protect, SPI: 0x1001},
						{Priority: 2, Action: sa.Discard},
					}
				} else {
					in.Selectors = []sa.Selector{onlyAllowed}
				}
				dev1, dev2, gw1, gw2 := runPair(t, e1, end{local: []netip.Addr{gw2Addr}, sas: []*sa.SA{&in}}, sa.EncapNone)

				good := fragmentedUDP(v6, allowed, forbidden, 1)
				bad := fragmentedUDP(v6, forbidden, allowed, 2)
				for _, f := range good {
					dev1.Send(f)
				}
				bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
				for i, want := range good {
					receiveWithin(t, dev2, bufs, sizes)
					if string(bufs[0][:sizes[0]]) != string(want) {
						t.Fatalf("fragment %d of the allowed flow arrived changed or out of order", i)
					}
				}
				for _, f := range bad {
					dev1.Send(f)
				}
				// Every fragment of the forbidden flow is counted where it
				// was refused.
				count := func() uint64 {
					if side == "outbound SPD" {
						return gw1.Counters().Drops[gateway.PolicyDiscard].Load()
					}
					return gw2.SAs()[0].Snapshot().Drops[esp.Policy.String()]
				}
				deadline := time.Now().Add(3 * time.Second)
				for count() != uint64(len(bad)) {
					if time.Now().After(deadline) {
						t.Fatalf("%d of the forbidden flow's %d fragments refused", count(), len(bad))
					}
					time.Sleep(5 * time.Millisecond)
				}
				// Nothing of it came out (a marker packet after it is the
				// next thing delivered).
				dev1.Send(good[0])
				receiveWithin(t, dev2, bufs, sizes)
				if string(bufs[0][:sizes[0]]) != string(good[0]) {
					t.Fatalf("a fragment of the forbidden flow came out")
				}
			})
		}
	}
}

// receiveWithin is dev.Receive of one packet, failing the test after 3 s.
func receiveWithin(t *testing.T, dev *memnet.Device, bufs [][]byte, sizes []int) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := dev.Receive(bufs, sizes)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("nothing delivered in 3 s")
	}
}
