package ike

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// crossing links two endpoints in memory and, once armed, holds each
// side's CREATE_CHILD_SA request until both have been sent and the
// responses until both requests have been answered: the two rekeys cross
// on the wire, as in RFC 7296 §2.8.1.
type crossing struct {
	mu            sync.Mutex
	armed         bool
	sent, handled atomic.Int32
	bothSent      chan struct{}
	both          chan struct{}
}

func (c *crossing) arm() {
	c.mu.Lock()
	c.armed, c.both, c.bothSent = true, make(chan struct{}), make(chan struct{})
	c.handled.Store(0)
	c.sent.Store(0)
	c.mu.Unlock()
}

func (c *crossing) link(to **Endpoint) func(Datagram) error {
	return func(d Datagram) error {
		h, _ := ParseHeader(d.Data)
		in := Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local}
		c.mu.Lock()
		armed, both, bothSent := c.armed, c.both, c.bothSent
		c.mu.Unlock()
		switch {
		case !armed || h.Exchange != CreateChildSA:
			go (*to).Handle(in)
		case !h.IsResponse():
			if c.sent.Add(1) == 2 {
				close(bothSent)
			}
			go func() {
				<-bothSent
				(*to).Handle(in)
				if c.handled.Add(1) == 2 {
					c.mu.Lock()
					c.armed = false
					c.mu.Unlock()
					close(both)
				}
			}()
		default:
			go func() { <-both; (*to).Handle(in) }()
		}
		return nil
	}
}

func crossingPair(t *testing.T) (i, r *Endpoint, c *crossing) {
	t.Helper()
	ic, rc := testConfigs(t, "aes128gcm16-x25519", "aes128gcm16")
	c = &crossing{}
	var err error
	if r, err = NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), c.link(&i)); err != nil {
		t.Fatal(err)
	}
	if i, err = NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), c.link(&r)); err != nil {
		t.Fatal(err)
	}
	return i, r, c
}

// both runs f for each side at once and waits for the two.
func both[T any](f func(side int) (T, error)) ([2]T, [2]error) {
	var out [2]T
	var errs [2]error
	var wg sync.WaitGroup
	for side := range 2 {
		wg.Go(func() { out[side], errs[side] = f(side) })
	}
	wg.Wait()
	return out, errs
}

// TestSimultaneousChildRekey has both sides rekey the same CHILD_SA at
// once, their requests crossing, again and again: each side answers the
// other's request and gets its own answer, so two new CHILD_SAs exist;
// the one of the exchange with the lowest nonce is deleted by its
// initiator and the old one by the other (RFC 7296 §2.8.1). Both sides
// must end with the same single CHILD_SA, the one the nonces say
// survives, and each side must have won some collisions and lost some.
func TestSimultaneousChildRekey(t *testing.T) {
	i, r, c := crossingPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := i.Initiate(ctx, netip.AddrPortFrom(r.local, Port))
	if err != nil {
		t.Fatal(err)
	}
	sas := [2]*IKESA{s, r.SAs()[0]}
	wins := 0
	const rounds = 16
	for round := range rounds {
		olds := [2]*Child{sas[0].Children()[0], sas[1].Children()[0]}
		c.arm()
		got, errs := both(func(side int) (*Child, error) { return sas[side].RekeyChild(ctx, olds[side]) })
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: %v / %v; counts %v %v", round, errs[0], errs[1], i.Counts(), r.Counts())
		}
		if got[0].InSPI != got[1].OutSPI || got[0].OutSPI != got[1].InSPI {
			t.Fatalf("round %d: the sides kept different CHILD_SAs: %#x/%#x and %#x/%#x", round, got[0].InSPI, got[0].OutSPI, got[1].InSPI, got[1].OutSPI)
		}
		for side := range 2 {
			if cs := sas[side].Children(); len(cs) != 1 || cs[0] != got[side] {
				t.Fatalf("round %d: side %d holds %d CHILD_SAs, want the survivor alone", round, side, len(cs))
			}
		}
		old := olds[0]
		ourWon := !lowerExchange(old.ours, old.theirs)
		if ourWon != (got[0] == old.ours.child) {
			t.Fatalf("round %d: the survivor is not the one the nonces name", round)
		}
		if ourWon {
			wins++
		}
		checkChildren(t, got[0], got[1])
	}
	if wins == 0 || wins == rounds {
		t.Errorf("the initiator won %d of %d collisions: one side always deleted", wins, rounds)
	}
	for _, e := range []*Endpoint{i, r} {
		if n := e.Counts()["simultaneous CHILD_SA rekey"]; n != rounds {
			t.Errorf("%d collisions counted, want %d: %v", n, rounds, e.Counts())
		}
	}
}

// TestSimultaneousIKERekey has both sides rekey the IKE SA at once, their
// requests crossing: the new IKE SA of the exchange with the lowest nonce
// is deleted by its initiator, the old one by the other, and the CHILD_SA
// moves to the survivor. Both sides must end with the same single IKE SA,
// holding the CHILD_SA, that answers liveness checks.
func TestSimultaneousIKERekey(t *testing.T) {
	i, r, c := crossingPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := i.Initiate(ctx, netip.AddrPortFrom(r.local, Port))
	if err != nil {
		t.Fatal(err)
	}
	sas := [2]*IKESA{s, r.SAs()[0]}
	child := s.Children()[0]
	wins := 0
	const rounds = 12
	for round := range rounds {
		c.arm()
		old := sas[0]
		got, errs := both(func(side int) (*IKESA, error) { return sas[side].Rekey(ctx) })
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: %v / %v; counts %v %v", round, errs[0], errs[1], i.Counts(), r.Counts())
		}
		si, sr := got[0].SPIs()
		ri, rr := got[1].SPIs()
		if si != ri || sr != rr {
			t.Fatalf("round %d: the sides kept different IKE SAs", round)
		}
		for side, e := range []*Endpoint{i, r} {
			if n := len(e.SAs()); n != 1 {
				t.Fatalf("round %d: side %d holds %d IKE SAs", round, side, n)
			}
			if cs := got[side].Children(); len(cs) != 1 {
				t.Fatalf("round %d: side %d's surviving IKE SA holds %d CHILD_SAs", round, side, len(cs))
			}
		}
		if got[0].Children()[0] != child {
			t.Fatalf("round %d: the CHILD_SA changed", round)
		}
		if !lowerExchange(old.ourRekey, old.peerRekey) {
			wins++
		}
		if err := got[0].Ping(ctx); err != nil {
			t.Fatalf("round %d: liveness check on the survivor: %v", round, err)
		}
		sas = got
	}
	if wins == 0 || wins == rounds {
		t.Errorf("the initiator won %d of %d collisions", wins, rounds)
	}
	if n := i.Counts()["simultaneous IKE SA rekey"]; n != rounds {
		t.Errorf("%d collisions counted, want %d: %v", n, rounds, i.Counts())
	}
}

// TestLateChildRekeyCollision has the responder's rekey request for the
// CHILD_SA reach the initiator only after the initiator's own rekey of it
// is over (its response in, the old CHILD_SA's Delete on the way): the
// initiator finds the collision when it answers, the responder when its
// response comes. Both must settle on the same single CHILD_SA, whichever
// side the nonces make delete what.
func TestLateChildRekeyCollision(t *testing.T) {
	for round := range 8 {
		ic, rc := testConfigs(t, "aes128gcm16-x25519", "aes128gcm16")
		var i, r *Endpoint
		var armed atomic.Bool
		iGotResponse, rRequestHandled, rSent := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var once1, once2, once3 sync.Once
		var err error
		var oldA *Child // the initiator's old CHILD_SA, once armed
		// The initiator's CREATE_CHILD_SA request reaches the responder
		// once the responder's is sent; the responder's waits for the
		// initiator's response; the initiator's INFORMATIONAL requests wait
		// for it.
		if r, err = NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), func(d Datagram) error {
			h, _ := ParseHeader(d.Data)
			in := Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local}
			switch {
			case armed.Load() && h.Exchange == CreateChildSA && !h.IsResponse():
				once3.Do(func() { close(rSent) })
				go func() { <-iGotResponse; i.Handle(in); once2.Do(func() { close(rRequestHandled) }) }()
			case armed.Load() && h.Exchange == CreateChildSA:
				go func() {
					i.Handle(in)
					// Over means the initiator's RekeyChild took the response.
					for over := false; !over; time.Sleep(time.Millisecond) {
						i.mu.Lock()
						over = oldA.ours != nil
						i.mu.Unlock()
					}
					once1.Do(func() { close(iGotResponse) })
				}()
			default:
				go i.Handle(in)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if i, err = NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), func(d Datagram) error {
			h, _ := ParseHeader(d.Data)
			in := Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local}
			switch {
			case armed.Load() && h.Exchange == Informational && !h.IsResponse():
				go func() { <-rRequestHandled; r.Handle(in) }()
			case armed.Load() && h.Exchange == CreateChildSA && !h.IsResponse():
				// Both requests are on the wire before either arrives.
				go func() { <-rSent; r.Handle(in) }()
			default:
				go r.Handle(in)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := i.Initiate(ctx, netip.AddrPortFrom(r.local, Port))
		if err != nil {
			t.Fatal(err)
		}
		sas := [2]*IKESA{s, r.SAs()[0]}
		olds := [2]*Child{sas[0].Children()[0], sas[1].Children()[0]}
		oldA = olds[0]
		armed.Store(true)
		got, errs := both(func(side int) (*Child, error) { return sas[side].RekeyChild(ctx, olds[side]) })
		// The responder's request finds the old CHILD_SA either still
		// there (a late collision, settled by nonces) or being deleted
		// (TEMPORARY_FAILURE, RFC 7296 §2.25.1: the responder's rekey
		// returns ErrRekeyed).
		late := errs[0] == nil && errs[1] == nil
		if errs[0] != nil || (errs[1] != nil && !errors.Is(errs[1], ErrRekeyed)) {
			t.Fatalf("round %d: %v / %v; counts %v %v", round, errs[0], errs[1], i.Counts(), r.Counts())
		}
		// The redundant CHILD_SA's Delete may still be on its way.
		waitFor := func(done func() bool) bool {
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if done() {
					return true
				}
			}
			return false
		}
		if !waitFor(func() bool { return len(sas[0].Children()) == 1 && len(sas[1].Children()) == 1 }) {
			t.Fatalf("round %d: the sides hold %d and %d CHILD_SAs; counts %v %v", round, len(sas[0].Children()), len(sas[1].Children()), i.Counts(), r.Counts())
		}
		a, b := sas[0].Children()[0], sas[1].Children()[0]
		if a.InSPI != b.OutSPI || a.OutSPI != b.InSPI {
			t.Fatalf("round %d: the sides kept different CHILD_SAs", round)
		}
		for _, e := range []*Endpoint{i, r} {
			if n := e.Counts()["simultaneous CHILD_SA rekey"]; late && n != 1 {
				t.Errorf("round %d: %d collisions counted: %v", round, n, e.Counts())
			}
		}
		if !late && got[0] != a {
			t.Errorf("round %d: the initiator's RekeyChild did not return the survivor", round)
		}
		if got[0] != a && got[1] != b {
			t.Errorf("round %d: neither side's RekeyChild returned the survivor", round)
		}
		cancel()
	}
}
