package ike

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/certgen"
)

// memPair links two endpoints in memory; drop, when set, decides which
// datagrams from the responder are lost.
func memPair(t *testing.T, ic, rc Config, drop func(d Datagram) bool) (i, r *Endpoint) {
	t.Helper()
	var err error
	if r, err = NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), func(d Datagram) error {
		if drop == nil || !drop(d) {
			go i.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if i, err = NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), func(d Datagram) error {
		go r.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return i, r
}

// TestFragmentation has both sides announce IKE fragmentation and send
// IKE_AUTH with RSA certificates in 400-byte fragments, each side
// reassembling the other's; a CHILD_SA rekey with a small fragment size
// goes in fragments too. A side that does not announce it gets whole
// messages.
func TestFragmentation(t *testing.T) {
	for _, c := range []struct {
		name, ike string
		size      int
		off       bool
	}{
		{"aes-gcm/400", "aes128gcm16-x25519", 400, false},
		{"aes-cbc/400", "aes256-sha256-x25519", 400, false},
		{"chacha20-poly1305/300", "chacha20poly1305-x25519", 300, false},
		{"not announced", "aes128gcm16-x25519", 400, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ic, rc, _ := certConfigs(t, certgen.RSA)
			ic.IKE, _ = ParseProposals(ProtoIKE, c.ike)
			rc.IKE = ic.IKE
			ic.FragmentSize, rc.FragmentSize = c.size, c.size
			rc.NoFragmentation = c.off
			rc.RetransmitTimeout, ic.RetransmitTimeout = 200*time.Millisecond, 200*time.Millisecond
			var largest atomic.Int64
			i, r := memPair(t, ic, rc, func(d Datagram) bool {
				if n := int64(len(d.Data)); n > largest.Load() {
					largest.Store(n)
				}
				return false
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := i.Initiate(ctx, netip.AddrPortFrom(r.local, Port))
			if err != nil {
				t.Fatalf("%v; initiator %v responder %v", err, i.Counts(), r.Counts())
			}
			ic1, rc1 := i.Counts(), r.Counts()
			biggest := int(largest.Load())
			if c.off {
				if ic1["message sent in fragments"]+rc1["message sent in fragments"] != 0 || biggest <= c.size {
					t.Errorf("fragments without fragmentation: %v %v, largest response %d", ic1, rc1, biggest)
				}
				return
			}
			for side, n := range map[string]map[string]uint64{"initiator": ic1, "responder": rc1} {
				if n["message sent in fragments"] < 1 || n["fragmented message reassembled"] < 1 {
					t.Errorf("%s counts %v: no fragments both ways", side, n)
				}
			}
			if biggest > c.size {
				t.Errorf("the responder sent a datagram of %d bytes, fragment size %d", biggest, c.size)
			}
			if _, err := s.RekeyChild(ctx, s.Children()[0]); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFragmentRetransmission loses the last fragment of the responder's
// IKE_AUTH response once: the initiator sends all its fragments again, the
// responder answers the first with its whole response again and counts
// the others, and the exchange completes (whatever order the resent
// fragments arrive in).
func TestFragmentRetransmission(t *testing.T) {
	ic, rc, _ := certConfigs(t, certgen.RSA)
	ic.FragmentSize, rc.FragmentSize = 400, 400
	ic.RetransmitTimeout = 200 * time.Millisecond
	var dropped atomic.Bool
	i, r := memPair(t, ic, rc, func(d Datagram) bool {
		m, err := Parse(d.Data)
		return err == nil && m.sk != nil && m.sk.fragNum != 0 && m.sk.fragNum == m.sk.fragTotal && dropped.CompareAndSwap(false, true)
	})
	if _, err := i.Initiate(context.Background(), netip.AddrPortFrom(r.local, Port)); err != nil {
		t.Fatalf("%v; initiator %v responder %v", err, i.Counts(), r.Counts())
	}
	rcn := r.Counts()
	if lost := dropped.Load(); !lost || i.Counts()["retransmitted request"] != 1 || rcn["retransmitted request answered again"] != 1 || rcn["retransmitted fragment"] < 1 {
		t.Errorf("lost %v; initiator %v, responder %v", lost, i.Counts(), rcn)
	}
}

// TestFragmentBounds feeds a responder fragments that break the rules:
// more than MaxFragments, a total that changes, a fragment number past
// the total, one repeated with other bytes. Each is refused and counted;
// none makes an IKE SA.
func TestFragmentBounds(t *testing.T) {
	ic, rc := testConfigs(t, "aes128gcm16-x25519", "aes128gcm16")
	var sent []Datagram
	i, err := NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), func(d Datagram) error { sent = append(sent, d); return nil })
	if err != nil {
		t.Fatal(err)
	}
	var r *Endpoint
	r, err = NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), func(d Datagram) error {
		i.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	i.send = func(d Datagram) error { r.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local}); return nil }
	s, err := i.initSA(context.Background(), netip.AddrPortFrom(r.local, Port))
	if err != nil {
		t.Fatal(err)
	}
	if !s.fragments {
		t.Fatal("fragmentation not negotiated")
	}
	h := Header{SPIi: s.spii, SPIr: s.spir, Exchange: IKEAuth, Flags: FlagInitiator, MessageID: 1}
	frag := func(num, total int, part []byte) Datagram {
		first := PayloadIDi
		if num > 1 {
			first = PayloadNone
		}
		b, err := s.send.sealFragment(h, first, part, num, total, randReader())
		if err != nil {
			t.Fatal(err)
		}
		return Datagram{Data: b, Local: netip.AddrPortFrom(r.local, NATTPort), Remote: netip.AddrPortFrom(i.local, NATTPort)}
	}
	before := r.Counts()["malformed request"]
	r.Handle(frag(1, MaxFragments+1, []byte{1}))
	r.Handle(frag(3, 2, []byte{1}))
	if n := r.Counts()["malformed request"] - before; n != 2 {
		t.Errorf("%d of 2 fragments outside the bounds counted as malformed; %v", n, r.Counts())
	}
	r.Handle(frag(1, 3, []byte("abc")))
	r.Handle(frag(2, 4, []byte("def")))
	r.Handle(frag(1, 3, []byte("abd")))
	if n := r.Counts()["malformed SK payload"]; n != 2 {
		t.Errorf("a changed total and a changed repeat: %d counted, want 2; %v", n, r.Counts())
	}
	// A whole message's worth of fragments that do not parse: refused
	// once complete, nothing established.
	r.Handle(frag(2, 3, []byte("ghi")))
	r.Handle(frag(3, 3, []byte("jkl")))
	for _, rs := range r.SAs() {
		if rs.State() != StateHalfOpen {
			t.Errorf("an SA in state %s", rs.State())
		}
	}
	if n := r.Counts()["malformed SK payload"]; n != 3 {
		t.Errorf("the reassembled garbage: %d malformed, want 3; %v", n, r.Counts())
	}
	r.mu.Lock()
	kept := r.sas[s.spir].reqFrags
	r.mu.Unlock()
	if kept != nil {
		t.Error("the responder keeps the refused fragments")
	}
}
