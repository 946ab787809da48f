package ike

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func samplePayloads() []Payload {
	ike, _ := ParseProposals(ProtoIKE, "aes128-sha256-x25519,aes256gcm16-ecp384")
	return []Payload{
		&SA{Proposals: ike},
		&KE{Group: Curve25519, Data: bytes.Repeat([]byte{7}, 32)},
		&Nonce{Data: bytes.Repeat([]byte{9}, 32)},
		&Notify{Kind: NotifyNATDetectionSourceIP, Data: bytes.Repeat([]byte{1}, 20)},
		&ID{Kind: PayloadIDi, Identity: FQDN("gw1.example")},
		&ID{Kind: PayloadIDr, Identity: Addr(netip.MustParseAddr("2001:db8::1"))},
		&Auth{Method: AuthSharedKey, Data: bytes.Repeat([]byte{3}, 32)},
		&TS{Kind: PayloadTSi, Selectors: []Selector{PrefixSelector(netip.MustParsePrefix("192.0.2.0/24")),
			{Proto: 17, StartPort: 500, EndPort: 500, Start: netip.MustParseAddr("2001:db8::"), End: netip.MustParseAddr("2001:db8::ff")}}},
		&TS{Kind: PayloadTSr, Selectors: []Selector{PrefixSelector(netip.MustParsePrefix("198.51.100.0/24"))}},
		&Delete{Protocol: ProtoESP, SPIs: []uint32{0xc0ffee01, 2}},
		&Delete{Protocol: ProtoIKE},
		&Unknown{Kind: PayloadVendorID, Body: []byte("espgw")},
		&Cert{Encoding: CertX509, Data: []byte{0x30, 0x03, 0x02, 0x01, 0x01}},
		&CertReq{Encoding: CertX509, Data: bytes.Repeat([]byte{5}, 40)},
		sigHashNotify(),
	}
}

func TestMessageRoundTrip(t *testing.T) {
	m := &Message{Header: Header{SPIi: 0x0102030405060708, Exchange: IKESAInit, Flags: FlagInitiator, MessageID: 0}, Payloads: samplePayloads()}
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.SPIi != m.SPIi || got.Exchange != IKESAInit || got.Flags != FlagInitiator || got.Version != Version {
		t.Errorf("header %+v", got.Header)
	}
	for i := range m.Payloads {
		if i >= len(got.Payloads) || !reflect.DeepEqual(got.Payloads[i], m.Payloads[i]) {
			t.Fatalf("payload %d differs: got %+v, want %+v", i, got.Payloads[i:], m.Payloads[i])
		}
	}
	// Every truncation is an error, never a panic.
	for n := range len(b) {
		if _, err := Parse(b[:n]); err == nil {
			t.Fatalf("Parse of the first %d of %d bytes succeeded", n, len(b))
		}
	}
}

func TestSKRoundTrip(t *testing.T) {
	for _, prop := range []string{"aes128-sha256-x25519", "aes256-sha1-modp2048", "aes128gcm16-x25519", "aes256gcm16-prfsha384-ecp256"} {
		t.Run(prop, func(t *testing.T) {
			ps, err := ParseProposals(ProtoIKE, prop)
			if err != nil {
				t.Fatal(err)
			}
			s, err := ikeSuiteFrom(ps[0])
			if err != nil {
				t.Fatal(err)
			}
			k, err := deriveIKEKeys(s, bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), []byte("g^ir"), 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			c, err := newSKCipher(s.encr, s.integ, k.ei, k.ai)
			if err != nil {
				t.Fatal(err)
			}
			m := &Message{Header: Header{SPIi: 1, SPIr: 2, Exchange: IKEAuth, Flags: FlagInitiator, MessageID: 1}, Payloads: samplePayloads()[4:]}
			b, err := c.seal(m, rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.open(got, b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Payloads, m.Payloads) || !got.Encrypted {
				t.Errorf("payloads differ after open")
			}
			// A flipped bit anywhere fails the integrity check (or the parse).
			for _, i := range []int{0, 17, 30, len(b) / 2, len(b) - 1} {
				bad := bytes.Clone(b)
				bad[i] ^= 0x10
				m2, err := Parse(bad)
				if err == nil {
					err = c.open(m2, bad)
				}
				if err == nil {
					t.Errorf("bit flipped at byte %d accepted", i)
				}
			}
		})
	}
}

func TestParseErrorsSayWhere(t *testing.T) {
	m := &Message{Header: Header{Exchange: IKESAInit, Flags: FlagInitiator}, Payloads: []Payload{&Nonce{Data: make([]byte, 8)}}}
	b, _ := m.Marshal()
	_, err := Parse(b)
	if err == nil || !strings.Contains(err.Error(), "Nonce at offset 28") || !strings.Contains(err.Error(), "8 bytes") {
		t.Errorf("short nonce: %v", err)
	}
	b[17] = 0x10
	if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), "version 1") {
		t.Errorf("IKEv1 header: %v", err)
	}
	for _, c := range []struct {
		p    Payload
		want string
	}{
		{&CertReq{Encoding: CertX509, Data: make([]byte, 21)}, "not a whole number of SHA-1 hashes"},
		{&CertReq{Encoding: CertX509, Data: make([]byte, maxCertReqLen+20)}, "CERTREQ at offset 28"},
		{&Cert{Encoding: CertX509}, "CERT at offset 28: 1 bytes"},
		{&Cert{Encoding: CertX509, Data: make([]byte, maxCertLen+1)}, "want 2 to"},
	} {
		m := &Message{Header: Header{Exchange: IKEAuth, Flags: FlagInitiator}, Payloads: []Payload{c.p}}
		b, _ := m.Marshal()
		if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%T of %d bytes: %v, want %q", c.p, len(c.p.appendBody(nil)), err, c.want)
		}
	}
	// An SKF payload's Fragment Number and Total Fragments are checked
	// before anything is decrypted.
	for _, c := range []struct {
		num, total int
		want       string
	}{{0, 2, "fragment 0 of 2"}, {3, 2, "fragment 3 of 2"}, {1, MaxFragments + 1, "at most 32"}} {
		b := make([]byte, HeaderLen+8+16)
		(&Header{Next: PayloadSKF, Version: Version, Exchange: IKEAuth, MessageID: 1, Length: uint32(len(b))}).put(b)
		binary.BigEndian.PutUint16(b[HeaderLen+2:], 8+16)
		binary.BigEndian.PutUint16(b[HeaderLen+4:], uint16(c.num))
		binary.BigEndian.PutUint16(b[HeaderLen+6:], uint16(c.total))
		if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SKF %d/%d: %v, want %q", c.num, c.total, err, c.want)
		}
	}
}
