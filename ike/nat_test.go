package ike

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/espgw/espgw/sa"
)

// natNet carries datagrams between an initiator behind a NAT and a
// responder in memory: the initiator's ports are mapped to the NAT's
// address, each to the port the mapping says; a datagram to a port
// nothing maps is lost, as at a NAT that forgot it.
type natNet struct {
	mu      sync.Mutex
	i, r    *Endpoint
	public  netip.Addr
	mapping map[uint16]uint16 // the initiator's port → the NAT's
}

func (n *natNet) fromInitiator(d Datagram) error {
	n.mu.Lock()
	p, ok := n.mapping[d.Local.Port()]
	n.mu.Unlock()
	if ok {
		go n.r.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: netip.AddrPortFrom(n.public, p)})
	}
	return nil
}

func (n *natNet) fromResponder(d Datagram) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for inside, outside := range n.mapping {
		if d.Remote == netip.AddrPortFrom(n.public, outside) {
			go n.i.Handle(Datagram{Data: d.Data, Local: netip.AddrPortFrom(n.i.local, inside), Remote: d.Local})
		}
	}
	return nil
}

// A NAT that maps the initiator to another port mid-run: the responder
// follows it on its next authenticated request (RFC 7296 §2.23) — the IKE
// SA, whose own requests then reach the new port, and the CHILD_SA, whose
// SAs carry the new port — and counts it; a request from a port the
// mapping never had is not taken for a move before it is authenticated.
func TestResponderFollowsInitiatorBehindNAT(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	ic.RetransmitTimeout, rc.RetransmitTimeout = 50*time.Millisecond, 50*time.Millisecond
	n := &natNet{public: netip.MustParseAddr("203.0.113.254"), mapping: map[uint16]uint16{Port: 40500, NATTPort: 44500}}
	moved := make(chan []*Child, 4)
	rc.OnPeerMoved = func(_ *IKESA, chs []*Child) { moved <- chs }
	var err error
	if n.i, err = NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), n.fromInitiator); err != nil {
		t.Fatal(err)
	}
	if n.r, err = NewEndpoint(rc, netip.MustParseAddr("198.51.100.2"), n.fromResponder); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	is, err := n.i.Initiate(ctx, netip.AddrPortFrom(n.r.local, Port))
	if err != nil {
		t.Fatal(err)
	}
	rs := n.r.SAs()[0]
	rch := rs.Children()[0]
	if !is.NAT() || !rs.NAT() || !rch.UDP || rch.RemotePort != 44500 {
		t.Fatalf("NAT not found: initiator %v, responder %v, child UDP %v port %d", is.NAT(), rs.NAT(), rch.UDP, rch.RemotePort)
	}
	_, out, err := rch.SAs()
	if err != nil || out.DstPort != 44500 || out.Dst != n.public {
		t.Fatalf("the responder's outbound SA goes to %v:%d (%v), want the NAT's mapping", out.Dst, out.DstPort, err)
	}
	// The NAT forgets gw1 and maps it anew.
	n.mu.Lock()
	n.mapping[NATTPort] = 47777
	n.mu.Unlock()
	if err := is.Ping(ctx); err != nil {
		t.Fatalf("liveness check through the new mapping: %v", err)
	}
	select {
	case chs := <-moved:
		if len(chs) != 1 || chs[0].RemotePort != 47777 || chs[0].Remote != n.public {
			t.Fatalf("moved children %+v", chs)
		}
	case <-ctx.Done():
		t.Fatal("the responder did not follow the initiator to its new port")
	}
	if _, out, _ := rch.SAs(); out.DstPort != 47777 {
		t.Errorf("the CHILD_SA's outbound SA goes to port %d, want 47777", out.DstPort)
	}
	// The responder's own requests reach the initiator at its new port.
	if err := rs.Ping(ctx); err != nil {
		t.Errorf("the responder's liveness check after the move: %v", err)
	}
	if got := n.r.Counts()["peer moved behind its NAT"]; got != 1 {
		t.Errorf("moves counted: %d, want 1", got)
	}
	// A forged request from elsewhere moves nothing.
	n.r.Handle(Datagram{Data: make([]byte, 80), Local: netip.AddrPortFrom(n.r.local, NATTPort), Remote: netip.AddrPortFrom(n.public, 1234)})
	if _, out, _ := rch.SAs(); out.DstPort != 47777 {
		t.Errorf("an unauthenticated datagram moved the CHILD_SA to port %d", out.DstPort)
	}
}

// The gateway tells the responder, whose peer is behind a NAT, of ESP from
// a new port (FollowPeerPort): the IKE SA and its CHILD_SA follow as on an
// IKE message, the inbound SA takes any port of the peer's address, and
// the initiator, behind the NAT itself, follows no port; nor does the
// responder follow another address.
func TestFollowPeerPortFromESP(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	n := &natNet{public: netip.MustParseAddr("203.0.113.254"), mapping: map[uint16]uint16{Port: 40500, NATTPort: 44500}}
	moved := make(chan []*Child, 4)
	rc.OnPeerMoved = func(_ *IKESA, chs []*Child) { moved <- chs }
	var err error
	if n.i, err = NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), n.fromInitiator); err != nil {
		t.Fatal(err)
	}
	if n.r, err = NewEndpoint(rc, netip.MustParseAddr("198.51.100.2"), n.fromResponder); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	is, err := n.i.Initiate(ctx, netip.AddrPortFrom(n.r.local, Port))
	if err != nil {
		t.Fatal(err)
	}
	rs := n.r.SAs()[0]
	rch := rs.Children()[0]
	in, _, err := rch.SAs()
	if err != nil || !in.FollowSourcePort {
		t.Fatalf("the responder's inbound SA does not follow the peer's port (%v)", err)
	}
	if in, _, _ := is.Children()[0].SAs(); in.FollowSourcePort {
		t.Error("the initiator, behind the NAT, follows its peer's port")
	}
	if is.FollowPeerPort(netip.AddrPortFrom(n.r.local, 4600)) {
		t.Error("the initiator, behind the NAT, followed a new port")
	}
	if rs.FollowPeerPort(netip.AddrPortFrom(netip.MustParseAddr("203.0.113.9"), 44500)) {
		t.Error("the responder followed its peer to another address")
	}
	if rs.FollowPeerPort(netip.AddrPortFrom(n.public, 44500)) {
		t.Error("the responder followed its peer to the port it is at")
	}
	n.mu.Lock()
	n.mapping[NATTPort] = 47777
	n.mu.Unlock()
	if !rs.FollowPeerPort(netip.AddrPortFrom(n.public, 47777)) {
		t.Fatal("the responder did not follow its peer's new port")
	}
	select {
	case chs := <-moved:
		if len(chs) != 1 || chs[0].RemotePort != 47777 {
			t.Fatalf("moved children %+v", chs)
		}
	default:
		t.Fatal("OnPeerMoved was not called")
	}
	if in, out, _ := rch.SAs(); out.DstPort != 47777 || in.SrcPort != 47777 || !in.FollowSourcePort {
		t.Errorf("the CHILD_SA's SAs after the move: in from port %d, out to %d", in.SrcPort, out.DstPort)
	}
	if err := rs.Ping(ctx); err != nil {
		t.Errorf("the responder's liveness check after the move: %v", err)
	}
	if got := n.r.Counts()["peer's new NAT port found by ESP"]; got != 1 {
		t.Errorf("moves by ESP counted: %d, want 1", got)
	}
}

// Transport mode through a NAT (RFC 7296 §2.23.1): each side names the
// addresses it knows, the initiator its own behind the NAT, and each
// side's SAs and selectors carry the IKE SA's addresses, the responder's
// the NAT's. The response names what the initiator asked for. A rekey
// stays in transport mode.
func TestTransportModeThroughNAT(t *testing.T) {
	inside, public, rAddr := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("203.0.113.254"), netip.MustParseAddr("198.51.100.2")
	host := func(a netip.Addr) []Selector { return []Selector{PrefixSelector(netip.PrefixFrom(a, 32))} }
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	ic.RetransmitTimeout, rc.RetransmitTimeout = 50*time.Millisecond, 50*time.Millisecond
	ic.LocalTS, ic.RemoteTS, ic.Transport = host(inside), host(rAddr), true
	// The responder is configured for the peer it knows: the NAT's
	// address.
	rc.LocalTS, rc.RemoteTS, rc.Transport = host(rAddr), host(public), true
	n := &natNet{public: public, mapping: map[uint16]uint16{Port: 40500, NATTPort: 44500}}
	var err error
	if n.i, err = NewEndpoint(ic, inside, n.fromInitiator); err != nil {
		t.Fatal(err)
	}
	if n.r, err = NewEndpoint(rc, rAddr, n.fromResponder); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	is, err := n.i.Initiate(ctx, netip.AddrPortFrom(rAddr, Port))
	if err != nil {
		t.Fatalf("initiate transport mode through the NAT: %v; responder counts %v", err, n.r.Counts())
	}
	rs := n.r.SAs()[0]
	check := func(what string, ic, rc *Child) {
		t.Helper()
		for _, x := range []struct {
			side          string
			c             *Child
			local, remote netip.Addr
		}{{"initiator", ic, inside, rAddr}, {"responder", rc, rAddr, public}} {
			if !x.c.Transport || !x.c.UDP {
				t.Fatalf("%s: the %s's CHILD_SA transport %v, ESP in UDP %v", what, x.side, x.c.Transport, x.c.UDP)
			}
			in, out, err := x.c.SAs()
			if err != nil {
				t.Fatal(err)
			}
			if out.Src != x.local || out.Dst != x.remote || in.Src != x.remote || in.Dst != x.local || in.Mode != sa.Transport || out.Mode != sa.Transport {
				t.Errorf("%s: the %s's SAs %v / %v, want transport mode between %s and %s", what, x.side, in, out, x.local, x.remote)
			}
			if !isHost(x.c.LocalTS, x.local) || !isHost(x.c.RemoteTS, x.remote) {
				t.Errorf("%s: the %s's selectors %v === %v, want %s === %s", what, x.side, x.c.LocalTS, x.c.RemoteTS, x.local, x.remote)
			}
		}
	}
	check("IKE_AUTH", is.Children()[0], rs.Children()[0])
	if got := n.r.Counts()["transport mode through a NAT"]; got != 1 {
		t.Errorf("the responder counted %d transport-mode CHILD_SAs through a NAT, want 1", got)
	}
	fresh, err := is.RekeyChild(ctx, is.Children()[0])
	if err != nil {
		t.Fatalf("rekey: %v", err)
	}
	var rfresh *Child
	for _, c := range rs.Children() {
		if c.InSPI == fresh.OutSPI {
			rfresh = c
		}
	}
	if rfresh == nil {
		t.Fatal("the responder lacks the rekeyed CHILD_SA")
	}
	check("rekey", fresh, rfresh)

	// A responder without transport mode takes the initiator's selectors
	// as they are: its address behind the NAT is not the peer's.
	rc.Transport = false
	r2, err := NewEndpoint(rc, rAddr, n.fromResponder)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.r = r2
	n.mu.Unlock()
	if _, err := n.i.Initiate(ctx, netip.AddrPortFrom(rAddr, Port)); err == nil || !strings.Contains(err.Error(), "TS_UNACCEPTABLE") {
		t.Errorf("transport mode through the NAT from a tunnel-mode responder: %v", err)
	}
}
