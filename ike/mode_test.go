package ike

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/sa"
)

// USE_TRANSPORT_MODE (RFC 7296 §1.3.1): transport mode when the
// initiator asks and the responder allows it for host-to-host selectors
// without a NAT, kept through a rekey; tunnel mode when either side is
// configured for tunnel or the selectors are networks; an initiator that
// asked for transport and got tunnel deletes the CHILD_SA on both sides.
func TestTransportMode(t *testing.T) {
	iAddr, rAddr := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	hostI, hostR := PrefixSelector(netip.PrefixFrom(iAddr, 32)), PrefixSelector(netip.PrefixFrom(rAddr, 32))
	for _, c := range []struct {
		name                 string
		askI, allowR, hosts  bool
		wantTransport        bool
		wantErr              string
		responderHoldsChilds int
	}{
		{"both transport", true, true, true, true, "", 1},
		{"initiator tunnel", false, true, true, false, "", 1},
		{"responder tunnel", true, false, true, false, "asked for transport mode, the peer gave tunnel mode", 0},
		{"networks", true, true, false, false, "asked for transport mode, the peer gave tunnel mode", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ic, rc := testConfigs(t, "aes128gcm16-x25519", "aes128gcm16")
			if c.hosts {
				ic.LocalTS, ic.RemoteTS = []Selector{hostI}, []Selector{hostR}
				rc.LocalTS, rc.RemoteTS = []Selector{hostR}, []Selector{hostI}
			}
			ic.Transport, rc.Transport = c.askI, c.allowR
			cr := &crossing{}
			var i, r *Endpoint
			var err error
			if r, err = NewEndpoint(rc, rAddr, cr.link(&i)); err != nil {
				t.Fatal(err)
			}
			if i, err = NewEndpoint(ic, iAddr, cr.link(&r)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := i.Initiate(ctx, netip.AddrPortFrom(rAddr, Port))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Initiate: %v, want %q", err, c.wantErr)
				}
				if n := len(i.SAs()[0].Children()); n != 0 {
					t.Errorf("the initiator holds %d CHILD_SAs after declining the mode", n)
				}
				if n := len(r.SAs()[0].Children()); n != c.responderHoldsChilds {
					t.Errorf("the responder holds %d CHILD_SAs, want %d (deleted by the initiator)", n, c.responderHoldsChilds)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ch := s.Children()[0]
			rch := r.SAs()[0].Children()[0]
			if ch.Transport != c.wantTransport || rch.Transport != c.wantTransport {
				t.Fatalf("transport: initiator %v, responder %v, want %v", ch.Transport, rch.Transport, c.wantTransport)
			}
			want := sa.Tunnel
			if c.wantTransport {
				want = sa.Transport
			}
			for _, x := range []*Child{ch, rch} {
				in, out, err := x.SAs()
				if err != nil {
					t.Fatal(err)
				}
				if in.Mode != want || out.Mode != want {
					t.Errorf("SAs in %s/%s mode, want %s", in.Mode, out.Mode, want)
				}
			}
			n, err := s.RekeyChild(ctx, ch)
			if err != nil {
				t.Fatal(err)
			}
			if n.Transport != c.wantTransport {
				t.Errorf("rekeyed CHILD_SA transport %v, want %v", n.Transport, c.wantTransport)
			}
			for _, x := range r.SAs()[0].Children() {
				if x.Transport != c.wantTransport {
					t.Errorf("the responder's rekeyed CHILD_SA transport %v, want %v", x.Transport, c.wantTransport)
				}
			}
		})
	}
}
