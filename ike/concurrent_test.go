package ike

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentInit hands one responder IKE_SA_INIT requests on many
// goroutines at once, as Transport.Serve does: copies of one request
// make one half-open SA, answered once and then again for each copy;
// distinct requests past MaxHalfOpen make no more SAs than it allows.
func TestConcurrentInit(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	rc.MaxHalfOpen, rc.CookieThreshold = 6, 1000
	var mu sync.Mutex
	var reqs []Datagram
	i, err := NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), func(d Datagram) error {
		mu.Lock()
		reqs = append(reqs, d)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	i.cfg.Tries = 1
	for range 12 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		i.initSA(ctx, netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), Port))
		cancel()
	}
	if len(reqs) != 12 {
		t.Fatalf("%d IKE_SA_INIT requests made, want 12", len(reqs))
	}
	var answers atomic.Int64
	newResponder := func() *Endpoint {
		r, err := NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), func(Datagram) error { answers.Add(1); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	handAll := func(r *Endpoint, ds []Datagram) {
		var wg sync.WaitGroup
		for _, d := range ds {
			wg.Go(func() { r.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local}) })
		}
		wg.Wait()
	}

	r := newResponder()
	copies := make([]Datagram, 8)
	for k := range copies {
		copies[k] = reqs[0]
	}
	handAll(r, copies)
	c := r.Counts()
	if n := len(r.SAs()); n != 1 || answers.Load() != 8 || c["retransmitted request answered again"] != 7 {
		t.Errorf("8 copies of one request: %d SAs, %d answers, counts %v; want 1 SA, 8 answers, 7 answered again", n, answers.Load(), c)
	}

	answers.Store(0)
	r = newResponder()
	handAll(r, reqs)
	c = r.Counts()
	if n := len(r.SAs()); n != rc.MaxHalfOpen || answers.Load() != int64(rc.MaxHalfOpen) || c["half-open limit reached"] != uint64(len(reqs)-rc.MaxHalfOpen) {
		t.Errorf("12 requests with a limit of %d half-open SAs: %d SAs, %d answers, counts %v", rc.MaxHalfOpen, n, answers.Load(), c)
	}
}
