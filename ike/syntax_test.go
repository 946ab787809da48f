package ike

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/espgw/espgw/sa"
)

func TestParseProposals(t *testing.T) {
	for _, c := range []struct {
		proto ProtocolID
		in    string
		want  string // the proposals' String, joined by ", "
	}{
		{ProtoIKE, "aes128-sha256-x25519", "IKE:AES_CBC_128/HMAC_SHA2_256_128/CURVE_25519/PRF_HMAC_SHA2_256"},
		{ProtoIKE, "aes128gcm16-x25519", "IKE:AES_GCM_16_128/CURVE_25519/PRF_HMAC_SHA2_256"},
		{ProtoIKE, "aes256-sha1-prfsha256-modp3072,aes256gcm16-prfsha384-ecp384",
			"IKE:AES_CBC_256/HMAC_SHA1_96/PRF_HMAC_SHA2_256/MODP_3072, IKE:AES_GCM_16_256/PRF_HMAC_SHA2_384/ECP_384"},
		{ProtoESP, "aes256gcm16", "ESP:AES_GCM_16_256/NO_EXT_SEQ"},
		{ProtoIKE, "chacha20poly1305-prfsha512-x25519", "IKE:CHACHA20_POLY1305/PRF_HMAC_SHA2_512/CURVE_25519"},
		{ProtoESP, "chacha20poly1305-esn", "ESP:CHACHA20_POLY1305/EXT_SEQ"},
		{ProtoESP, "aes128-sha256", "ESP:AES_CBC_128/HMAC_SHA2_256_128/NO_EXT_SEQ"},
		{ProtoESP, "aes128-sha1-esn-noesn-modp2048", "ESP:AES_CBC_128/HMAC_SHA1_96/MODP_2048/NO_EXT_SEQ/EXT_SEQ"},
	} {
		ps, err := ParseProposals(c.proto, c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		var got []string
		for _, p := range ps {
			got = append(got, p.String())
		}
		if strings.Join(got, ", ") != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, strings.Join(got, ", "), c.want)
		}
	}
	for _, c := range []struct {
		proto    ProtocolID
		in, want string
	}{
		{ProtoIKE, "aes128-sha256", "no key exchange method"},
		{ProtoIKE, "chacha20poly1305-sha256-x25519", "integrity algorithm with an AEAD"},
		{ProtoIKE, "chacha20poly1305-aes128-sha256-x25519", "AEAD and non-AEAD"},
		{ProtoESP, "aes128", "no integrity"},
		{ProtoESP, "aes128gcm16-sha256", "integrity algorithm with an AEAD"},
		{ProtoESP, "aes128-sha256-prfsha256", "PRF"},
		{ProtoESP, "aes128-md5", `"md5"`},
		{ProtoESP, "", "empty"},
	} {
		if _, err := ParseProposals(c.proto, c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %s", c.in, err, c.want)
		}
	}
}

func TestESPProposalsMapToSuites(t *testing.T) {
	for in, want := range map[string]sa.Suite{
		"aes128gcm16":      {Cipher: sa.CipherAESGCM16},
		"aes256gcm16":      {Cipher: sa.CipherAESGCM16},
		"chacha20poly1305": {Cipher: sa.CipherChaCha20Poly1305},
		"aes128-sha256":    {Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128},
		"aes256-sha1":      {Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96},
		"aes256-sha512":    {Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA512_256},
	} {
		ps, err := ParseProposals(ProtoESP, in)
		if err != nil {
			t.Fatal(err)
		}
		c, err := childSuiteFrom(ps[0])
		if err != nil || c.suite != want {
			t.Errorf("%s: %v %v, want %v", in, c.suite, err, want)
		}
	}
}

func TestChoose(t *testing.T) {
	ours, _ := ParseProposals(ProtoIKE, "aes256gcm16-x25519,aes128-sha256-ecp256-x25519")
	theirs, _ := ParseProposals(ProtoIKE, "aes128-sha1-modp2048,aes128-sha256-x25519")
	c, ok := Choose(ours, theirs)
	if !ok || c.String() != "IKE:AES_CBC_128/PRF_HMAC_SHA2_256/HMAC_SHA2_256_128/CURVE_25519" || c.Num != 2 {
		t.Fatalf("chose %v %v", &c, ok)
	}
	if !Accepts(ours, c) {
		t.Error("the chosen proposal is not accepted by the side that offered it")
	}
	if none, _ := ParseProposals(ProtoIKE, "aes128-sha1-modp2048"); Accepts(ours, none[0]) {
		t.Error("a proposal never offered accepted")
	}
	theirs[1].Transforms[0].Unreadable = true
	if _, ok := Choose(ours, theirs); ok {
		t.Error("a transform with an unknown attribute chosen")
	}
}

func TestParseIdentity(t *testing.T) {
	for in, want := range map[string]Identity{
		"@gw1.example":    FQDN("gw1.example"),
		"gw1.example":     FQDN("gw1.example"),
		"@#0a1b":          KeyID([]byte{0x0a, 0x1b}),
		"198.51.100.1":    Addr(netip.MustParseAddr("198.51.100.1")),
		"2001:db8::1":     Addr(netip.MustParseAddr("2001:db8::1")),
		"gw1@example.org": Email("gw1@example.org"),
	} {
		got, err := ParseIdentity(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("%s: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "@", "@#zz"} {
		if _, err := ParseIdentity(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	// A DN as strongSwan writes it: the RDNs in order, "\," a comma in a
	// value; compared attribute by attribute, without regard to case.
	dn, err := ParseIdentity(`C=CH, O=Example\, Inc., CN=gw1`)
	if err != nil || dn.Kind != IDDN {
		t.Fatalf("DN: %v %v", dn, err)
	}
	if got := dnString(dn.Data); got != "C=CH, O=Example, Inc., CN=gw1" {
		t.Errorf("DN prints as %q", got)
	}
	same, _ := ParseIdentity("c=ch, o=EXAMPLE\\, INC., cn=GW1")
	other, _ := ParseIdentity("C=CH, CN=gw1, O=Example\\, Inc.")
	if !dn.Equal(same) || dn.Equal(other) {
		t.Errorf("DN comparison: case-folded %v, reordered %v", dn.Equal(same), dn.Equal(other))
	}
	for in, want := range map[string]string{"C=CH, XX=y": `unknown attribute "XX"`, "C=CH, CN": `"CN" is not NAME=VALUE`, "C=, CN=a": "is not NAME=VALUE"} {
		if _, err := ParseIdentity(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// ESPSuites lists each encryption transform with each integrity one.
func TestESPSuites(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"aes128gcm16", "aes-gcm-16"},
		{"aes128gcm16-aes256gcm16", "aes-gcm-16"},
		{"aes128-aes256-sha256-sha512", "aes-cbc+hmac-sha2-256-128 aes-cbc+hmac-sha2-512-256"},
		{"chacha20poly1305-esn", "chacha20-poly1305"},
	} {
		ps, err := ParseProposals(ProtoESP, c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		var got []string
		for _, s := range ESPSuites(ps[0]) {
			got = append(got, s.String())
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("ESPSuites(%s) = %q, want %q", c.in, got, c.want)
		}
	}
}
