package ike

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// pair is two endpoints on loopback addresses, each with its own
// sockets on ports 500 and 4500.
type pair struct {
	i, r           *Endpoint
	iAddr, rAddr   netip.Addr
	iTr, rTr       *Transport
	cancel         context.CancelFunc
	responderChild chan *Child
}

func testConfigs(t testing.TB, ike, esp string) (Config, Config) {
	t.Helper()
	ikeP, err := ParseProposals(ProtoIKE, ike)
	if err != nil {
		t.Fatal(err)
	}
	espP, err := ParseProposals(ProtoESP, esp)
	if err != nil {
		t.Fatal(err)
	}
	lanA, lanB := PrefixSelector(netip.MustParsePrefix("192.0.2.0/24")), PrefixSelector(netip.MustParsePrefix("198.51.100.0/24"))
	ic := Config{LocalID: FQDN("gw1"), RemoteID: FQDN("gw2"), PSK: []byte("a pre-shared key of some length"), IKE: ikeP, ESP: espP,
		LocalTS: []Selector{lanA}, RemoteTS: []Selector{lanB}, RetransmitTimeout: 200 * time.Millisecond}
	rc := ic
	rc.LocalID, rc.RemoteID, rc.LocalTS, rc.RemoteTS = ic.RemoteID, ic.LocalID, ic.RemoteTS, ic.LocalTS
	return ic, rc
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("binding IKE's ports 500 and 4500 needs root")
	}
}

// newPair listens on two loopback addresses of its own (ports 500 and 4500 each); the
// responder's Serve starts after delay.
func newPair(t *testing.T, ic, rc Config, delay time.Duration) *pair {
	t.Helper()
	return newPairOn(t, ic, rc, delay, "127.83.75.1", "127.83.75.2")
}

// newPairAt is newPair on other addresses, for a second pair in one test.
func newPairAt(t *testing.T, ic, rc Config, iAddr, rAddr string) *pair {
	t.Helper()
	return newPairOn(t, ic, rc, 0, iAddr, rAddr)
}

func newPairOn(t *testing.T, ic, rc Config, delay time.Duration, iAddr, rAddr string) *pair {
	t.Helper()
	needRoot(t)
	p := &pair{iAddr: netip.MustParseAddr(iAddr), rAddr: netip.MustParseAddr(rAddr), responderChild: make(chan *Child, 4)}
	var err error
	if p.iTr, err = Listen(p.iAddr); err != nil {
		t.Fatal(err)
	}
	if p.rTr, err = Listen(p.rAddr); err != nil {
		t.Fatal(err)
	}
	rc.OnChild = func(_ *IKESA, c *Child) { p.responderChild <- c }
	if p.i, err = NewEndpoint(ic, p.iAddr, p.iTr.Send); err != nil {
		t.Fatal(err)
	}
	if p.r, err = NewEndpoint(rc, p.rAddr, p.rTr.Send); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	done := make(chan struct{}, 2)
	go func() { p.iTr.Serve(ctx, p.i); done <- struct{}{} }()
	go func() {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
		p.rTr.Serve(ctx, p.r)
		done <- struct{}{}
	}()
	t.Cleanup(func() {
		cancel()
		p.iTr.Close()
		p.rTr.Close()
		<-done
		<-done
	})
	return p
}

func checkChildren(t *testing.T, ic, rc *Child) {
	t.Helper()
	if ic.InSPI != rc.OutSPI || ic.OutSPI != rc.InSPI {
		t.Errorf("SPIs: initiator in %#x out %#x, responder in %#x out %#x", ic.InSPI, ic.OutSPI, rc.InSPI, rc.OutSPI)
	}
	if !bytes.Equal(ic.OutEnc, rc.InEnc) || !bytes.Equal(ic.InEnc, rc.OutEnc) || !bytes.Equal(ic.OutAuth, rc.InAuth) || !bytes.Equal(ic.InAuth, rc.OutAuth) {
		t.Error("the two sides derived different CHILD_SA keys")
	}
	if bytes.Equal(ic.OutEnc, ic.InEnc) {
		t.Error("both directions have one key")
	}
	for _, c := range []*Child{ic, rc} {
		in, out, err := c.SAs()
		if err != nil {
			t.Fatal(err)
		}
		if in.Suite != c.Suite || out.SPI != c.OutSPI || len(in.Selectors) != 1 {
			t.Errorf("SAs %v %v from %+v", in, out, c)
		}
	}
}

func TestInitiatorAndResponderAgree(t *testing.T) {
	for _, c := range []struct{ ike, esp string }{
		{"aes128-sha256-x25519", "aes128gcm16"},
		{"aes128-sha256-x25519", "aes128-sha256"},
		{"aes256gcm16-prfsha384-ecp384", "aes256-sha1-esn"},
		{"aes256-sha512-modp2048", "aes256gcm16"},
		{"aes128-sha256-x25519", "aes128gcm16-ecp256"}, // PFS in the rekey
		{"chacha20poly1305-prfsha256-x25519", "chacha20poly1305"},
	} {
		t.Run(c.ike+"/"+c.esp, func(t *testing.T) {
			ic, rc := testConfigs(t, c.ike, c.esp)
			p := newPair(t, ic, rc, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := p.i.Initiate(ctx, netip.AddrPortFrom(p.rAddr, Port))
			if err != nil {
				t.Fatal(err)
			}
			ich := s.Children()
			if len(ich) != 1 {
				t.Fatalf("%d children", len(ich))
			}
			rch := <-p.responderChild
			checkChildren(t, ich[0], rch)
			if c.esp == "aes256-sha1-esn" && !ich[0].ESN {
				t.Error("ESN not negotiated")
			}
			if err := s.Ping(ctx); err != nil {
				t.Fatalf("liveness check: %v", err)
			}
			// The IKE SA rekeyed by the initiator, then by the responder;
			// the CHILD_SA moves along.
			if s, err = s.Rekey(ctx); err != nil {
				t.Fatalf("IKE SA rekey: %v", err)
			}
			rs := p.r.SAs()
			if len(rs) != 1 || len(rs[0].Children()) != 1 || len(s.Children()) != 1 {
				t.Fatalf("after the IKE SA rekey: %d SAs at the responder", len(rs))
			}
			if _, err := rs[0].Rekey(ctx); err != nil {
				t.Fatalf("IKE SA rekey by the responder: %v", err)
			}
			is := p.i.SAs()
			if len(is) != 1 || is[0] == s || len(is[0].Children()) != 1 {
				t.Fatalf("after the responder's rekey: %d SAs at the initiator", len(is))
			}
			s = is[0]
			if err := s.Ping(ctx); err != nil {
				t.Fatalf("liveness check on the rekeyed IKE SA: %v", err)
			}
			// A CHILD_SA rekey (its keys from the new SK_d), then the new
			// CHILD_SA's deletion.
			fresh, err := s.RekeyChild(ctx, ich[0])
			if err != nil {
				t.Fatal(err)
			}
			checkChildren(t, fresh, <-p.responderChild)
			if fresh.InSPI == ich[0].InSPI || bytes.Equal(fresh.OutEnc, ich[0].OutEnc) {
				t.Error("the rekeyed CHILD_SA has the old SPI or keys")
			}
			for _, side := range []*Endpoint{p.i, p.r} {
				if sas := side.SAs(); len(sas) != 1 || len(sas[0].Children()) != 1 {
					t.Fatalf("after the rekey, want the new CHILD_SA alone")
				}
			}
			if err := s.DeleteChild(ctx, fresh); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx); err != nil {
				t.Fatal(err)
			}
			if n := len(p.r.SAs()); n != 0 {
				t.Errorf("the responder keeps %d IKE SAs after the delete", n)
			}
			if got := p.r.Counts(); got["IKE SA deleted by the peer"] != 2 || got["IKE SA rekeyed by the peer"] != 1 || got["CHILD_SA deleted by the peer"] != 2 || got["CHILD_SA rekeyed by the peer"] != 1 {
				t.Errorf("responder counts %v", got)
			}
		})
	}
}

func TestWrongPSKFails(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	rc.PSK = []byte("another key")
	p := newPair(t, ic, rc, 0)
	_, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port))
	if err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
		t.Fatalf("wrong PSK: %v", err)
	}
	if n := p.r.Counts()["authentication failed"]; n != 1 {
		t.Errorf("responder counted %d authentication failures", n)
	}
	if n := p.i.Counts()["AUTHENTICATION_FAILED received"]; n != 1 {
		t.Errorf("initiator counted %d refusals of its authentication", n)
	}
	if len(p.i.SAs())+len(p.r.SAs()) != 0 {
		t.Error("IKE SAs left after a failed authentication")
	}
}

func TestInvalidKERetry(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519-ecp256", "aes128gcm16")
	rc.IKE, _ = ParseProposals(ProtoIKE, "aes128-sha256-ecp256")
	p := newPair(t, ic, rc, 0)
	if _, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port)); err != nil {
		t.Fatal(err)
	}
	if p.i.Counts()["INVALID_KE_PAYLOAD received"] != 1 || p.r.Counts()["INVALID_KE_PAYLOAD sent"] != 1 {
		t.Errorf("counts %v / %v", p.i.Counts(), p.r.Counts())
	}
}

func TestCookieAboveHalfOpenThreshold(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	rc.CookieThreshold = 1
	p := newPair(t, ic, rc, 0)
	ctx := context.Background()
	// One IKE_SA_INIT without IKE_AUTH leaves a half-open SA.
	if _, err := p.i.initSA(ctx, netip.AddrPortFrom(p.rAddr, Port)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.i.Initiate(ctx, netip.AddrPortFrom(p.rAddr, Port)); err != nil {
		t.Fatal(err)
	}
	if p.r.Counts()["COOKIE asked for"] != 1 || p.i.Counts()["COOKIE returned"] != 1 {
		t.Errorf("counts %v / %v", p.i.Counts(), p.r.Counts())
	}
}

func TestRetransmission(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, ic, rc, 300*time.Millisecond)
	if _, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port)); err != nil {
		t.Fatal(err)
	}
	if n := p.i.Counts()["retransmitted request"]; n < 1 {
		t.Errorf("the initiator retransmitted %d times before the responder listened", n)
	}
}

func TestNarrowing(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	// The responder allows only a /25 of what the initiator asks.
	rc.RemoteTS = []Selector{PrefixSelector(netip.MustParsePrefix("192.0.2.0/25"))}
	t.Run("narrowed", func(t *testing.T) {
		p := newPair(t, ic, rc, 0)
		s, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Children()[0].LocalTS; len(got) != 1 || got[0].String() != "192.0.2.0/25" {
			t.Errorf("narrowed TSi %v", got)
		}
	})
	t.Run("disjoint", func(t *testing.T) {
		rc.RemoteTS = []Selector{PrefixSelector(netip.MustParsePrefix("203.0.113.0/24"))}
		p := newPair(t, ic, rc, 0)
		s, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port))
		if err == nil || !strings.Contains(err.Error(), "TS_UNACCEPTABLE") {
			t.Errorf("disjoint selectors: %v", err)
		}
		if s == nil || s.State() != StateEstablished || len(s.Children()) != 0 {
			t.Errorf("want the IKE SA up without a CHILD_SA, got %v", s)
		}
	})
}

// TestDuplicateRequestSameReply hands the responder one IKE_SA_INIT
// request twice: the second gets the first's response, byte for byte,
// and no second SA.
func TestDuplicateRequestSameReply(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	var sent [][]byte
	capture := func(d Datagram) error { sent = append(sent, d.Data); return nil }
	r, err := NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), capture)
	if err != nil {
		t.Fatal(err)
	}
	i, err := NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), capture)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	i.cfg.Tries = 1
	i.initSA(ctx, netip.AddrPortFrom(r.local, Port)) // no responder answers; the request is in sent
	if len(sent) != 1 {
		t.Fatalf("%d datagrams sent", len(sent))
	}
	req := Datagram{Data: sent[0], Local: netip.AddrPortFrom(r.local, Port), Remote: netip.AddrPortFrom(i.local, Port)}
	r.Handle(req)
	r.Handle(req)
	if len(sent) != 3 || !bytes.Equal(sent[1], sent[2]) {
		t.Fatalf("responses differ or are missing (%d datagrams)", len(sent))
	}
	if n := len(r.SAs()); n != 1 {
		t.Errorf("%d SAs after a duplicate request", n)
	}
}

func TestIdentities(t *testing.T) {
	for _, c := range []struct {
		name   string
		i, r   Identity
		expect Identity // what the responder expects of the initiator
		ok     bool
	}{
		{"fqdn", FQDN("gw1.example"), FQDN("gw2.example"), FQDN("gw1.example"), true},
		{"email", Email("gw1@example.org"), Email("gw2@example.org"), Email("gw1@example.org"), true},
		{"ipv4", Addr(netip.MustParseAddr("192.0.2.1")), Addr(netip.MustParseAddr("192.0.2.2")), Addr(netip.MustParseAddr("192.0.2.1")), true},
		{"ipv6", Addr(netip.MustParseAddr("2001:db8::1")), Addr(netip.MustParseAddr("2001:db8::2")), Addr(netip.MustParseAddr("2001:db8::1")), true},
		{"keyid", KeyID([]byte{1, 2, 3}), KeyID([]byte{4, 5, 6}), KeyID([]byte{1, 2, 3}), true},
		{"unexpected", FQDN("intruder"), FQDN("gw2"), FQDN("gw1"), false},
		{"same data, other type", Email("gw1"), FQDN("gw2"), FQDN("gw1"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
			ic.LocalID, ic.RemoteID = c.i, c.r
			rc.LocalID, rc.RemoteID = c.r, c.expect
			p := newPair(t, ic, rc, 0)
			_, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port))
			if (err == nil) != c.ok {
				t.Fatalf("initiate: %v, want success %v", err, c.ok)
			}
			if !c.ok && p.r.Counts()["unknown peer identity"] != 1 {
				t.Errorf("responder counts %v", p.r.Counts())
			}
		})
	}
}

// TestRetransmittedIKEAuthSameReply runs an exchange in memory, then hands
// the responder the initiator's IKE_AUTH request again: it gets the same
// response, byte for byte, and no second CHILD_SA; the same message ID
// with other bytes gets nothing.
func TestRetransmittedIKEAuthSameReply(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	var fromI, fromR []Datagram
	var i, r *Endpoint
	var err error
	children := 0
	rc.OnChild = func(*IKESA, *Child) { children++ }
	if r, err = NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), func(d Datagram) error {
		fromR = append(fromR, d)
		i.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if i, err = NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), func(d Datagram) error {
		fromI = append(fromI, d)
		r.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := i.Initiate(context.Background(), netip.AddrPortFrom(r.local, Port)); err != nil {
		t.Fatal(err)
	}
	if len(fromI) != 2 || len(fromR) != 2 || children != 1 {
		t.Fatalf("%d requests, %d responses, %d children", len(fromI), len(fromR), children)
	}
	auth := fromI[1]
	r.Handle(Datagram{Data: auth.Data, Local: auth.Remote, Remote: auth.Local})
	if len(fromR) != 3 || !bytes.Equal(fromR[2].Data, fromR[1].Data) || children != 1 {
		t.Fatalf("the repeated IKE_AUTH: %d responses (the last the same: %v), %d children", len(fromR), bytes.Equal(fromR[2].Data, fromR[1].Data), children)
	}
	forged := bytes.Clone(auth.Data)
	forged[len(forged)-1] ^= 1
	r.Handle(Datagram{Data: forged, Local: auth.Remote, Remote: auth.Local})
	if len(fromR) != 3 || r.Counts()["request with a used message ID"] != 1 {
		t.Errorf("a changed request with a used message ID: %d responses, counts %v", len(fromR), r.Counts())
	}
}

// TestSecretsNeverPrint prints a configuration, an IKE SA and its
// CHILD_SA every way fmt can: neither the PSK nor a key shows.
func TestSecretsNeverPrint(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, ic, rc, 0)
	s, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Children()[0]
	in, out, _ := c.SAs()
	var secrets [][]byte
	secrets = append(secrets, ic.PSK, c.InEnc, c.OutEnc, s.keys.d, s.keys.ei, s.keys.pi)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x"} {
		text := fmt.Sprintf(verb+" "+verb+" "+verb+" "+verb+" "+verb, ic, s, c, in, out)
		for _, k := range secrets {
			if strings.Contains(text, string(k)) || strings.Contains(text, fmt.Sprintf("%x", []byte(k))) ||
				strings.Contains(text, strings.Trim(fmt.Sprint([]byte(k)), "[]")) {
				t.Fatalf("%s shows a secret: %s", verb, text)
			}
		}
	}
}

// TestHalfOpenLimit: past MaxHalfOpen half-open SAs, a responder answers
// no IKE_SA_INIT and keeps no state, and says so in its counts.
func TestHalfOpenLimit(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	rc.MaxHalfOpen, rc.CookieThreshold = 2, 100
	var answers int
	r, err := NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), func(Datagram) error { answers++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	var reqs []Datagram
	i, err := NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), func(d Datagram) error { reqs = append(reqs, d); return nil })
	if err != nil {
		t.Fatal(err)
	}
	i.cfg.Tries = 1
	i.cfg.RetransmitTimeout = time.Millisecond
	for range 3 {
		i.initSA(context.Background(), netip.AddrPortFrom(r.local, Port))
	}
	for _, d := range reqs {
		r.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local})
	}
	if answers != 2 || len(r.SAs()) != 2 || r.Counts()["half-open limit reached"] != 1 {
		t.Errorf("3 requests, limit 2: %d answers, %d SAs, counts %v", answers, len(r.SAs()), r.Counts())
	}
}

// TestForgedResponses: IKE_AUTH responses that do not verify are counted
// and the request sent again, Tries times, then the exchange fails.
func TestForgedResponses(t *testing.T) {
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	ic.Tries = 3
	var i, r *Endpoint
	var err error
	if r, err = NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), func(d Datagram) error {
		data := d.Data
		if h, _ := ParseHeader(data); h.Exchange == IKEAuth {
			data = bytes.Clone(data)
			data[len(data)-1] ^= 1
		}
		i.Handle(Datagram{Data: data, Local: d.Remote, Remote: d.Local})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if i, err = NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), func(d Datagram) error {
		r.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err = i.Initiate(context.Background(), netip.AddrPortFrom(r.local, Port))
	if err == nil || !strings.Contains(err.Error(), "3 responses that do not verify") {
		t.Fatalf("initiate against forged responses: %v", err)
	}
	if n := i.Counts()["response dropped: integrity check failed"]; n != 3 {
		t.Errorf("%d forged responses counted, want 3", n)
	}
}
