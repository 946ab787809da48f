package kernelpeer

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/scapy"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// startScapy runs the scapy ESP peer (internal/lab/scapy) in probe mode
// inside the test namespace.
func startScapy(t *testing.T, netns string) *scapy.Peer {
	t.Helper()
	p, err := scapy.Start(context.Background(), netns, "probe", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type scapyResult struct {
	OK       bool   `json:"ok"`
	Error    string `json:"error"`
	ReplyLen int    `json:"reply_len"`
}

// interopSuites are the suites the kernel is tried with, by the CLI's names.
var interopSuites = []string{
	"aes-cbc-128+hmac-sha1-96", "aes-cbc-256+hmac-sha1-96", "aes-cbc-128+hmac-sha2-256-128", "aes-cbc-256+hmac-sha2-256-128",
	"3des-cbc+hmac-sha1-96", "aes-ctr-128+hmac-sha1-96", "aes-gcm-16-128", "aes-gcm-16-256",
	"aes-cbc-128+hmac-sha2-384-192", "aes-cbc-256+hmac-sha2-512-256", "aes-cbc-128+hmac-md5-96",
}

// TestKernelESPInteropWithScapy proves the guest's kernel is a working ESP
// peer before any espgw gateway exists: scapy seals an echo request with
// each suite, mode and encapsulation, the kernel (configured from sa.SA
// values through XFRMCommands) must answer with an ESP echo reply that
// scapy verifies and decrypts, and must count a tampered and a replayed
// packet as integrity and replay failures, with no other error.
func TestKernelESPInteropWithScapy(t *testing.T) {
	p := sharedPeer(t)
	f, _ := shared.Made()
	peer := startScapy(t, f.netns)
	ctx := context.Background()
	type family struct {
		name                               string
		host, guest, hostInner, guestInner netip.Addr
		innerBits                          int
		suites                             []string
	}
	families := []family{
		{"ipv4", hostAddr.Addr(), guestAddr.Addr(), hostInner, guestInner, 24, interopSuites},
		// IPv6 outer and inner on a few suites: the cipher code is the same.
		{"ipv6", hostAddr6.Addr(), guestAddr6.Addr(), hostInner6, guestInner6, 64,
			[]string{interopSuites[0], interopSuites[3], interopSuites[6]}},
	}
	sizes := []int{0, 1, 15, 56, 255, 1000, 1400}
	spi := uint32(0x1000)
	n := 0
	for _, fam := range families {
		for _, suiteName := range fam.suites {
			suite, bits, err := testbed.ParseSuite(suiteName)
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range []sa.Mode{sa.Tunnel, sa.Transport} {
				for _, encap := range []sa.Encap{sa.EncapNone, sa.EncapUDP} {
					// ESN on half the matrix, starting above 2^32 so the high
					// bits take part in every ICV.
					esn := (mode == sa.Tunnel) == (encap == sa.EncapUDP)
					name := fmt.Sprintf("%s/%s/%s/%s/esn=%v", fam.name, suiteName, mode, encap, esn)
					spi += 0x10
					size := sizes[n%len(sizes)]
					n++
					t.Run(name, func(t *testing.T) {
						enc, auth, err := sa.RandomKeys(suite, bits)
						if err != nil {
							t.Fatal(err)
						}
						in := &sa.SA{SPI: spi + 1, Mode: mode, Src: fam.host, Dst: fam.guest, Encap: encap, Suite: suite,
							EncKey: enc, AuthKey: auth, ESN: esn, ReplayWindow: 64}
						if encap == sa.EncapUDP {
							in.SrcPort, in.DstPort = sa.DefaultNATTPort, sa.DefaultNATTPort
						}
						out := *in
						out.SPI, out.Src, out.Dst = spi+2, fam.guest, fam.host
						if esn {
							in.InitialSeq, out.InitialSeq = 1<<32|0x10, 2<<32|0xfffffff0
						}
						if mode == sa.Tunnel {
							hostNet := netip.PrefixFrom(fam.hostInner, fam.innerBits).Masked()
							guestNet := netip.PrefixFrom(fam.guestInner, fam.innerBits).Masked()
							in.Selectors = []sa.Selector{{Src: hostNet, Dst: guestNet}}
							out.Selectors = []sa.Selector{{Src: guestNet, Dst: hostNet}}
						}
						checkExchange(t, ctx, p, peer, in, &out, fam.hostInner, fam.guestInner, size)
					})
				}
			}
		}
	}
}

func checkExchange(t *testing.T, ctx context.Context, p *Peer, peer *scapy.Peer, in, out *sa.SA, hostIn, guestIn netip.Addr, size int) {
	t.Helper()
	if err := p.ReplaceSAs(ctx, DirectedSA{in, Inbound}, DirectedSA{out, Outbound}); err != nil {
		t.Fatal(err)
	}
	before, err := p.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.Send(map[string]any{"in": scapy.SA(in), "out": scapy.SA(out), "host_inner": hostIn.String(),
		"guest_inner": guestIn.String(), "payload_len": size, "iface": p.cfg.Tap, "timeout": 20, "replay": true}); err != nil {
		t.Fatal(err)
	}
	var res scapyResult
	if err := peer.Read(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if !res.OK {
		c, _ := p.Counters(ctx)
		t.Fatalf("scapy ↔ kernel exchange failed: %s\nkernel counters: %+v", res.Error, c.Stat.Sub(before.Stat).NonZero())
	}

	// The tampered and the replayed packet were sent after the reply came;
	// wait until the guest has counted them.
	var c Counters
	want := Drops{IntegrityFailed: 1, Replayed: 1}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if c, err = p.Counters(ctx); err != nil {
			t.Fatal(err)
		}
		if c.CheckDrops(before, in, want, false) == nil || time.Now().After(deadline) {
			break
		}
	}
	if err := c.CheckDrops(before, in, want, true); err != nil {
		t.Error(err)
	}
	sin, sout := c.State(in.Dst, in.SPI), c.State(out.Dst, out.SPI)
	if sin == nil || sout == nil {
		t.Fatalf("SA %#x or %#x missing from the kernel's states", in.SPI, out.SPI)
	}
	for _, s := range []*sa.XFRMState{sin, sout} {
		if s.ESN != in.ESN || s.Encap != in.Encap || s.Mode != in.Mode || s.Suite != in.Suite {
			t.Errorf("SA %#x: kernel shows esn=%v encap=%v mode=%v suite=%v, want esn=%v encap=%v mode=%v suite=%v",
				s.SPI, s.ESN, s.Encap, s.Mode, s.Suite, in.ESN, in.Encap, in.Mode, in.Suite)
		}
	}
	if sin.Packets != 1 || sin.Bytes == 0 {
		t.Errorf("inbound SA: %d packets, %d bytes, want 1 packet", sin.Packets, sin.Bytes)
	}
	if sin.Seq != in.InitialSeq+1 {
		t.Errorf("inbound SA: highest sequence %#x, want %#x", sin.Seq, in.InitialSeq+1)
	}
	if sout.Packets != 1 || sout.OSeq != out.InitialSeq+1 {
		t.Errorf("outbound SA: %d packets, last sequence %#x; want 1 and %#x", sout.Packets, sout.OSeq, out.InitialSeq+1)
	}
}
