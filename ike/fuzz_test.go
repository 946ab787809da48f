package ike

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/certgen"
)

func randReader() io.Reader { return rand.Reader }

// FuzzParse feeds arbitrary bytes to the message parser: it returns a
// message or an error, never panics, and what it returns encodes again.
func FuzzParse(f *testing.F) {
	m := &Message{Header: Header{SPIi: 1, Exchange: IKESAInit, Flags: FlagInitiator}, Payloads: samplePayloads()}
	b, _ := m.Marshal()
	f.Add(b)
	f.Add(b[:40])
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		if _, err := m.Marshal(); err != nil && m.sk == nil {
			t.Fatalf("a parsed message does not encode: %v", err)
		}
	})
}

// FuzzResponder feeds arbitrary datagrams to a responder that has one
// half-open IKE SA: as a new request, and with the header's responder SPI
// set to that SA's, so that they reach the SK payload's checks. Nothing
// panics, and nothing an unauthenticated peer sends makes more than the
// half-open SAs the limit allows.
func FuzzResponder(f *testing.F) {
	ic, rc := fuzzConfigs(f)
	rc.MaxHalfOpen = 4
	var sent []Datagram
	capture := func(d Datagram) error { sent = append(sent, d); return nil }
	i, err := NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), capture)
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	i.cfg.Tries = 1
	i.initSA(ctx, netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), Port))
	cancel()
	initReq := sent[0].Data
	f.Add(initReq)
	f.Add(initReq[:60])
	f.Fuzz(func(t *testing.T, data []byte) {
		sent = sent[:0]
		r, err := NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), capture)
		if err != nil {
			t.Fatal(err)
		}
		from := Datagram{Local: netip.AddrPortFrom(r.local, Port), Remote: netip.AddrPortFrom(i.local, Port)}
		from.Data = initReq
		r.Handle(from)
		var spir uint64
		for _, s := range r.SAs() {
			spir = s.spir
		}
		from.Data = data
		r.Handle(from)
		if len(data) >= HeaderLen {
			d := bytes.Clone(data)
			binary.BigEndian.PutUint64(d[8:], spir)
			d[19] |= byte(FlagInitiator)
			from.Data = d
			r.Handle(from)
		}
		if n := len(r.halfOpen); n > rc.MaxHalfOpen {
			t.Fatalf("%d half-open SAs, limit %d", n, rc.MaxHalfOpen)
		}
	})
}

func fuzzConfigs(f *testing.F) (Config, Config) {
	ike, _ := ParseProposals(ProtoIKE, "aes128-sha256-x25519")
	esp, _ := ParseProposals(ProtoESP, "aes128gcm16")
	ts := []Selector{PrefixSelector(netip.MustParsePrefix("192.0.2.0/24"))}
	c := Config{LocalID: FQDN("a"), PSK: []byte("k"), IKE: ike, ESP: esp, LocalTS: ts, RemoteTS: ts}
	r := c
	r.LocalID = FQDN("b")
	return c, r
}

// FuzzAuthenticatedRequests runs a real IKE_SA_INIT and IKE_AUTH in
// memory, then hands the responder requests from the authenticated peer
// whose SK payload holds arbitrary bytes, sealed with the peer's keys:
// INFORMATIONAL and CREATE_CHILD_SA requests with hostile payloads. The
// responder answers or drops each, never panics.
func FuzzAuthenticatedRequests(f *testing.F) {
	f.Add(byte(0), byte(PayloadNotify), []byte{0, 0, 0, 8, 3, 4, 0x40, 0x09, 1, 2, 3, 4})
	f.Add(byte(1), byte(PayloadDelete), []byte{0, 0, 0, 8, 1, 0, 0, 0})
	f.Add(byte(1), byte(PayloadSA), []byte{})
	ic, rc := fuzzConfigs(f)
	f.Fuzz(func(t *testing.T, kind, first byte, chain []byte) {
		i, r := linked(t, ic, rc)
		s, err := i.Initiate(context.Background(), netip.AddrPortFrom(r.local, Port))
		if err != nil {
			t.Fatal(err)
		}
		exch := Informational
		if kind&1 == 1 {
			exch = CreateChildSA
		}
		out, err := s.send.sealChain(Header{SPIi: s.spii, SPIr: s.spir, Exchange: exch, Flags: FlagInitiator, MessageID: s.nextReq},
			PayloadType(first), chain, rand.Reader)
		if err != nil {
			return
		}
		r.Handle(Datagram{Data: out, Local: netip.AddrPortFrom(r.local, Port), Remote: netip.AddrPortFrom(i.local, Port)})
	})
}

// FuzzVerifyAuth checks arbitrary AUTH data of each method against RSA,
// ECDSA and Ed25519 keys: an error, never a panic, never a success.
func FuzzVerifyAuth(f *testing.F) {
	var keys []crypto.Signer
	for _, kt := range []certgen.KeyType{certgen.RSA, certgen.ECDSA256, certgen.Ed25519} {
		k, err := certgen.NewKey(kt)
		if err != nil {
			f.Fatal(err)
		}
		keys = append(keys, k)
	}
	octets := []byte("the octets an AUTH signs")
	for _, k := range keys {
		a, err := signAuth(k, octets, ourSigHashes, false)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(a.Method), a.Data)
	}
	f.Add(byte(AuthECDSA256), make([]byte, 64))
	f.Add(byte(AuthRSASig), make([]byte, 256))
	f.Fuzz(func(t *testing.T, method byte, data []byte) {
		for _, k := range keys {
			if verifyAuth(k.Public(), &Auth{Method: AuthMethod(method), Data: data}, []byte("other octets")) == nil {
				t.Fatalf("method %d data %x verified with a %s key", method, data, keyName(k.Public()))
			}
		}
	})
}

// FuzzCertificateAuth runs a real IKE_SA_INIT in memory with a responder
// that takes certificates, then sends it an IKE_AUTH request, sealed with
// the initiator's keys, whose CERT and AUTH payloads are arbitrary: the
// responder refuses it, counted, and never panics.
func FuzzCertificateAuth(f *testing.F) {
	ca, err := certgen.NewCA(certgen.ECDSA256, "fuzz CA")
	if err != nil {
		f.Fatal(err)
	}
	leaf, err := ca.Issue(certgen.ECDSA256, "a", []string{"a"}, certgen.Options{})
	if err != nil {
		f.Fatal(err)
	}
	ic, rc := fuzzConfigs(f)
	rc.PSK, rc.CAs = nil, []*x509.Certificate{ca.Cert}
	rc.Certs, rc.Key, rc.LocalID = []*x509.Certificate{leaf.Cert}, leaf.Key, FQDN("a")
	f.Add(leaf.Cert.Raw, byte(AuthDigSig), []byte{9, 1, 2, 3})
	f.Add(leaf.Cert.Raw[:100], byte(AuthECDSA256), make([]byte, 64))
	f.Fuzz(func(t *testing.T, cert []byte, method byte, auth []byte) {
		i, r := linked(t, ic, rc)
		s, err := i.initSA(context.Background(), netip.AddrPortFrom(r.local, Port))
		if err != nil {
			t.Fatal(err)
		}
		esp := withoutDH(ic.ESP)
		esp[0].SPI = []byte{1, 2, 3, 4}
		ps := []Payload{&ID{Kind: PayloadIDi, Identity: FQDN("a")}, &Cert{Encoding: CertX509, Data: cert},
			&Auth{Method: AuthMethod(method), Data: auth}, &SA{Proposals: esp},
			&TS{Kind: PayloadTSi, Selectors: ic.LocalTS}, &TS{Kind: PayloadTSr, Selectors: ic.RemoteTS}}
		out, err := s.send.seal(&Message{Header: Header{SPIi: s.spii, SPIr: s.spir, Exchange: IKEAuth, Flags: FlagInitiator,
			MessageID: 1}, Payloads: ps}, rand.Reader)
		if err != nil {
			return
		}
		total := func() (n uint64) {
			for _, v := range r.Counts() {
				n += v
			}
			return n
		}
		before := total()
		r.Handle(Datagram{Data: out, Local: netip.AddrPortFrom(r.local, NATTPort), Remote: netip.AddrPortFrom(i.local, NATTPort)})
		if total() == before {
			t.Fatalf("the IKE_AUTH request was neither refused nor counted: %v", r.Counts())
		}
		for _, rs := range r.SAs() {
			if rs.State() == StateEstablished {
				t.Fatalf("an IKE_AUTH with a fuzzed CERT and AUTH established an IKE SA; counts %v", r.Counts())
			}
		}
	})
}

// FuzzFragments runs a real IKE_SA_INIT in memory with fragmentation
// negotiated, then hands the responder SKF fragments sealed with the
// initiator's keys whose numbers, totals and contents are arbitrary: the
// responder never panics, keeps at most MaxFragments parts of at most
// MaxMessageLen bytes, and establishes nothing.
func FuzzFragments(f *testing.F) {
	f.Add([]byte{1, 3, 2, 3, 3, 3}, []byte("IDi and more"))
	f.Add([]byte{1, 1}, []byte{0, 0, 0, 8, 2, 0, 0, 0})
	f.Add([]byte{2, 2, 1, 2, 1, 3}, bytes.Repeat([]byte{0xff}, 300))
	ic, rc := fuzzConfigs(f)
	f.Fuzz(func(t *testing.T, numbers []byte, data []byte) {
		i, r := linked(t, ic, rc)
		s, err := i.initSA(context.Background(), netip.AddrPortFrom(r.local, Port))
		if err != nil {
			t.Fatal(err)
		}
		h := Header{SPIi: s.spii, SPIr: s.spir, Exchange: IKEAuth, Flags: FlagInitiator, MessageID: 1}
		for k := 0; k+1 < len(numbers) && k < 2*MaxFragments+4; k += 2 {
			num, total := int(numbers[k]), int(numbers[k+1])
			part := data[min(len(data), k*8):min(len(data), k*8+64)]
			first := PayloadNone
			if num == 1 && len(data) > 0 {
				first = PayloadType(data[0])
			}
			b, err := s.send.sealFragment(h, first, part, num, total, rand.Reader)
			if err != nil {
				continue
			}
			r.Handle(Datagram{Data: b, Local: netip.AddrPortFrom(r.local, NATTPort), Remote: netip.AddrPortFrom(i.local, NATTPort)})
			r.mu.Lock()
			rs := r.sas[s.spir]
			if rs != nil && rs.reqFrags != nil && (len(rs.reqFrags.parts) > MaxFragments || rs.reqFrags.size > MaxMessageLen) {
				t.Fatalf("reassembly of %d parts, %d bytes", len(rs.reqFrags.parts), rs.reqFrags.size)
			}
			if rs != nil && rs.state == StateEstablished {
				t.Fatal("fuzzed fragments established an IKE SA")
			}
			r.mu.Unlock()
		}
	})
}

// linked is two endpoints whose datagrams reach each other at once, in
// the sender's goroutine.
func linked(t testing.TB, ic, rc Config) (i, r *Endpoint) {
	t.Helper()
	var err error
	if r, err = NewEndpoint(rc, netip.MustParseAddr("192.0.2.2"), func(d Datagram) error {
		i.Handle(Datagram{Data: d.Data, Local: d.Remote, Remote: d.Local})
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
	return i, r
}

// FuzzIdentity reads arbitrary text as a configured identity and
// arbitrary bytes as a peer's DN: an identity or an error, never a panic;
// a DN that parses equals itself and prints.
func FuzzIdentity(f *testing.F) {
	f.Add("C=CH, O=espgw test, CN=gw1", []byte{0x30, 0x00})
	f.Add("@#0a1b", []byte{0x30, 0x03, 0x31, 0x01, 0x00})
	f.Add("gw1@example.org", []byte("not DER"))
	f.Fuzz(func(t *testing.T, text string, der []byte) {
		if id, err := ParseIdentity(text); err == nil {
			_ = id.String()
			if id.Kind == IDDN && !id.Equal(id) {
				t.Fatalf("DN %q is not equal to itself", text)
			}
		}
		peer := DN(der)
		_ = peer.String()
		peer.Equal(peer)
	})
}
