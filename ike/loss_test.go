package ike

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// lossyLink carries datagrams between two endpoints in memory, each after
// a random delay of up to a few milliseconds (so they reorder), and drops
// a share of them: never more than maxRun in a row in one direction, so an
// exchange's retries always get through in the end.
type lossyLink struct {
	mu      sync.Mutex
	rng     *rand.Rand
	loss    float64
	maxRun  int
	run     [2]int
	dropped int
	sent    int
}

func (l *lossyLink) to(dir int, dst **Endpoint) func(Datagram) error {
	return func(d Datagram) error {
		l.mu.Lock()
		l.sent++
		drop := l.run[dir] < l.maxRun && l.rng.Float64() < l.loss
		if drop {
			l.run[dir]++
			l.dropped++
		} else {
			l.run[dir] = 0
		}
		delay := time.Duration(l.rng.IntN(4000)) * time.Microsecond
		l.mu.Unlock()
		if drop {
			return nil
		}
		in := Datagram{Data: append([]byte(nil), d.Data...), Local: d.Remote, Remote: d.Local}
		time.AfterFunc(delay, func() { (*dst).Handle(in) })
		return nil
	}
}

// settled waits until each side holds one IKE SA and one CHILD_SA and
// the two sides' are the same, and returns them.
func settled(ctx context.Context, i, r *Endpoint) (*IKESA, *IKESA, *Child, *Child, error) {
	var why string
	for {
		why = ""
		is, rs := i.SAs(), r.SAs()
		switch {
		case len(is) != 1 || len(rs) != 1:
			why = fmt.Sprintf("%d and %d IKE SAs", len(is), len(rs))
		default:
			ii, ir := is[0].SPIs()
			ri, rr := rs[0].SPIs()
			ic, rc := is[0].Children(), rs[0].Children()
			switch {
			case ii != ri || ir != rr:
				why = "different IKE SAs"
			case len(ic) != 1 || len(rc) != 1:
				why = fmt.Sprintf("%d and %d CHILD_SAs", len(ic), len(rc))
			case ic[0].InSPI != rc[0].OutSPI || ic[0].OutSPI != rc[0].InSPI:
				why = "different CHILD_SAs"
			default:
				return is[0], rs[0], ic[0], rc[0], nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil, nil, nil, fmt.Errorf("not settled: %s", why)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestCollisionsUnderLoss has both sides rekey the CHILD_SA at once, and
// every third round the IKE SA too, over a link that loses a fifth of the
// datagrams and reorders the rest: requests, responses and Deletes are
// retransmitted, and some rekeys cross (RFC 7296 §2.8.1) while others do
// not. Whatever the losses did, both sides must end each round with one
// and the same IKE SA and CHILD_SA, with agreeing keys, and a rekey may
// fail only because the peer rekeyed that SA first.
func TestCollisionsUnderLoss(t *testing.T) {
	ic, rc := testConfigs(t, "aes128gcm16-x25519", "aes128gcm16")
	ic.RetransmitTimeout, rc.RetransmitTimeout = 20*time.Millisecond, 20*time.Millisecond
	ic.Tries, rc.Tries = 12, 12
	link := &lossyLink{rng: rand.New(rand.NewPCG(1, 2)), loss: 0.2, maxRun: 3}
	var i, r *Endpoint
	var err error
	if r, err = NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), link.to(1, &i)); err != nil {
		t.Fatal(err)
	}
	if i, err = NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), link.to(0, &r)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := i.Initiate(ctx, netip.AddrPortFrom(r.local, Port)); err != nil {
		t.Fatal(err)
	}
	const rounds = 24
	crossed := 0
	for round := range rounds {
		is, rs, ichild, rchild, err := settled(ctx, i, r)
		if err != nil {
			t.Fatalf("round %d, before: %v; counts %v %v", round, err, i.Counts(), r.Counts())
		}
		checkChildren(t, ichild, rchild)
		before := i.Counts()["simultaneous CHILD_SA rekey"] + r.Counts()["simultaneous CHILD_SA rekey"]
		_, errs := both(func(side int) (*Child, error) {
			s, c := is, ichild
			if side == 1 {
				s, c = rs, rchild
			}
			return s.RekeyChild(ctx, c)
		})
		for side, err := range errs {
			if err != nil && !errors.Is(err, ErrRekeyed) {
				t.Fatalf("round %d: side %d's CHILD_SA rekey: %v; counts %v %v", round, side, err, i.Counts(), r.Counts())
			}
		}
		if i.Counts()["simultaneous CHILD_SA rekey"]+r.Counts()["simultaneous CHILD_SA rekey"] > before {
			crossed++
		}
		if round%3 != 2 {
			continue
		}
		if is, rs, _, _, err = settled(ctx, i, r); err != nil {
			t.Fatalf("round %d, after the CHILD_SA rekey: %v; counts %v %v", round, err, i.Counts(), r.Counts())
		}
		_, errs = both(func(side int) (*IKESA, error) {
			if side == 1 {
				return rs.Rekey(ctx)
			}
			return is.Rekey(ctx)
		})
		for side, err := range errs {
			if err != nil && !errors.Is(err, ErrRekeyed) {
				t.Fatalf("round %d: side %d's IKE SA rekey: %v; counts %v %v", round, side, err, i.Counts(), r.Counts())
			}
		}
	}
	is, _, ichild, rchild, err := settled(ctx, i, r)
	if err != nil {
		t.Fatalf("at the end: %v", err)
	}
	checkChildren(t, ichild, rchild)
	if err := is.Ping(ctx); err != nil {
		t.Fatalf("liveness check at the end: %v", err)
	}
	link.mu.Lock()
	dropped, sent := link.dropped, link.sent
	link.mu.Unlock()
	t.Logf("%d of %d datagrams dropped; %d of %d rounds had crossing CHILD_SA rekeys; retransmitted %d + %d",
		dropped, sent, crossed, rounds, i.Counts()["retransmitted request"], r.Counts()["retransmitted request"])
	if i.Counts()["retransmitted request"]+r.Counts()["retransmitted request"] == 0 {
		t.Error("no request was retransmitted: the link lost nothing that mattered")
	}
}
