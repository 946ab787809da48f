package ike

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A connection with a second CHILD_SA: the initiator sets it up with
// NewChild after IKE_AUTH's, with proposals of its own (PFS); the
// responder gives it the configuration its selectors fit, so both sides
// name it; it is rekeyed on its own; a child whose selectors fit none of
// the responder's is refused with TS_UNACCEPTABLE.
func TestMoreChildren(t *testing.T) {
	ic, rc := testConfigs(t, "aes128gcm16-x25519", "aes128gcm16")
	esp6, err := ParseProposals(ProtoESP, "aes256gcm16-x25519")
	if err != nil {
		t.Fatal(err)
	}
	a6, b6 := PrefixSelector(netip.MustParsePrefix("2001:db8:a::/64")), PrefixSelector(netip.MustParsePrefix("2001:db8:b::/64"))
	ic.ChildName, rc.ChildName = "net", "net"
	ic.MoreChildren = []ChildConfig{{Name: "net6", LocalTS: []Selector{a6}, RemoteTS: []Selector{b6}, ESP: esp6},
		{Name: "other", LocalTS: []Selector{PrefixSelector(netip.MustParsePrefix("10.9.0.0/24"))}, RemoteTS: []Selector{PrefixSelector(netip.MustParsePrefix("10.8.0.0/24"))}, ESP: esp6}}
	rc.MoreChildren = []ChildConfig{{Name: "net6", LocalTS: []Selector{b6}, RemoteTS: []Selector{a6}, ESP: esp6}}
	c := &crossing{}
	var i, r *Endpoint
	if r, err = NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), c.link(&i)); err != nil {
		t.Fatal(err)
	}
	if i, err = NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), c.link(&r)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := i.Initiate(ctx, netip.AddrPortFrom(r.local, Port))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Children(); len(got) != 1 || got[0].Name != "net" {
		t.Fatalf("after IKE_AUTH the initiator holds %v, want net", got)
	}
	c6, err := s.NewChild(ctx, "net6")
	if err != nil {
		t.Fatal(err)
	}
	if c6.Name != "net6" || c6.Suite.String() != "aes-gcm-16" || len(c6.InEnc) != 36 || !Within(c6.LocalTS, []Selector{a6}) {
		t.Errorf("net6: name %q, suite %s, %d key bytes, selectors %v", c6.Name, c6.Suite, len(c6.InEnc), c6.LocalTS)
	}
	names := func(e *Endpoint) map[string]uint32 {
		out := map[string]uint32{}
		for _, ch := range e.SAs()[0].Children() {
			out[ch.Name] = ch.InSPI
		}
		return out
	}
	rn := names(r)
	if len(rn) != 2 || rn["net"] == 0 || rn["net6"] != c6.OutSPI {
		t.Fatalf("the responder holds %v, want net and net6 (in %#x)", rn, c6.OutSPI)
	}
	n6, err := s.RekeyChild(ctx, c6)
	if err != nil {
		t.Fatal(err)
	}
	if n6.Name != "net6" || n6.InSPI == c6.InSPI {
		t.Errorf("net6 rekeyed to %q %#x", n6.Name, n6.InSPI)
	}
	if rn := names(r); len(rn) != 2 || rn["net6"] != n6.OutSPI {
		t.Errorf("after net6's rekey the responder holds %v, want net and the new net6 (%#x)", rn, n6.OutSPI)
	}
	if _, err := s.NewChild(ctx, "other"); err == nil || !strings.Contains(err.Error(), "TS_UNACCEPTABLE") {
		t.Errorf("a child the responder has no selectors for: %v, want TS_UNACCEPTABLE", err)
	}
	if _, err := s.NewChild(ctx, "nosuch"); err == nil {
		t.Error("NewChild of a child not configured succeeded")
	}
}
