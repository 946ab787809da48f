package interop

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/sa"
)

// TestGatewayCarriesTunnelFromKernelListing gives the guest's kernel SAs
// with keys it draws itself (from its own /dev/urandom: espgw never sees
// them), reads them back the way a user would — `ip -s xfrm state` — and
// starts gw1 on what sa.ParseXFRMState made of that listing. The tunnel
// must carry pings both ways and a TCP transfer, and the kernel's counters
// must agree with gw1's.
func TestGatewayCarriesTunnelFromKernelListing(t *testing.T) {
	b := sharedBed(t)
	cases := []Case{
		{Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, AESBits: 256, Mode: sa.Tunnel, Encap: sa.EncapNone},
		{Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, AESBits: 128, Mode: sa.Tunnel, Encap: sa.EncapUDP, ESN: true},
		{Suite: sa.Suite{Cipher: sa.Cipher3DES, Auth: sa.AuthHMACSHA1_96}, Mode: sa.Transport, Encap: sa.EncapNone},
	}
	for _, c := range cases {
		t.Run(c.Name(), func(t *testing.T) { carryFromListing(t, b, c) })
	}
}

func carryFromListing(t *testing.T, b *Bed, c Case) {
	ctx, tun := configure(t, b, c, 3*time.Minute)
	// Re-key the guest's states with keys of its own: the same commands,
	// each key replaced by fresh random hex from the guest.
	var script strings.Builder
	script.WriteString("set -e\nip xfrm state flush\nkey() { od -An -tx1 -N$1 /dev/urandom | tr -d ' \\n'; }\n")
	for _, s := range []*sa.SA{tun.Out, tun.In} {
		cmd, err := kernelpeer.StateCommand(s)
		if err != nil {
			t.Fatal(err)
		}
		script.WriteString("ip")
		for i, a := range cmd.Args {
			switch {
			case i >= 2 && (cmd.Args[i-2] == "enc" || cmd.Args[i-2] == "auth-trunc" || cmd.Args[i-2] == "aead") && strings.HasPrefix(a, "0x"):
				fmt.Fprintf(&script, " 0x$(key %d)", (len(a)-2)/2)
			default:
				fmt.Fprintf(&script, " '%s'", a)
			}
		}
		script.WriteString("\n")
	}
	if _, err := b.Peer.Run(ctx, script.String()); err != nil {
		t.Fatalf("re-key the guest: %v", err)
	}
	listing, err := b.Peer.Run(ctx, "ip -s xfrm state")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sa.ParseConfig("ip -s xfrm state", []byte(listing))
	if err != nil {
		t.Fatalf("read the guest's listing: %v\n%s", err, listing)
	}
	var out, in *sa.SA
	for _, s := range cfg.SAs {
		switch s.SPI {
		case tun.Out.SPI:
			out = s
		case tun.In.SPI:
			in = s
		}
	}
	if len(cfg.SAs) != 2 || out == nil || in == nil {
		t.Fatalf("the listing gave %d SAs (%v), want SPIs %#x and %#x", len(cfg.SAs), cfg.SAs, tun.Out.SPI, tun.In.SPI)
	}
	if string(out.EncKey) == string(tun.Out.EncKey) {
		t.Fatal("the guest kept espgw's key: the re-keying did not happen")
	}
	for _, p := range []struct{ got, want *sa.SA }{{out, tun.Out}, {in, tun.In}} {
		g, w := *p.got, *p.want
		if g.Mode != w.Mode || g.Src != w.Src || g.Dst != w.Dst || g.Suite != w.Suite || g.Encap != w.Encap ||
			g.SrcPort != w.SrcPort || g.DstPort != w.DstPort || g.ESN != w.ESN || g.ReplayWindow != w.ReplayWindow || g.InitialSeq != w.InitialSeq {
			t.Errorf("read back %v (window %d, seq %#x, esn %v, encap %s %d/%d), installed %v (window %d, seq %#x, esn %v, encap %s %d/%d)",
				&g, g.ReplayWindow, g.InitialSeq, g.ESN, g.Encap, g.SrcPort, g.DstPort, &w, w.ReplayWindow, w.InitialSeq, w.ESN, w.Encap, w.SrcPort, w.DstPort)
		}
	}
	if err := b.Carry(ctx, out, in); err != nil {
		t.Fatal(err)
	}
	before, err := b.Peer.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkPings(t, ctx, b, tun, 3, func(bool) []int { return []int{56, 300, 1000} })
	if _, err := b.Peer.SendTCP(ctx, tun.Near, netip.AddrPortFrom(tun.FarAddrs[0], farPort), 64<<10, time.Minute); err != nil {
		t.Errorf("TCP to the kernel: %v", err)
	}
	checkCounters(t, ctx, b, b.tunnel, before, 0, 0)
}
