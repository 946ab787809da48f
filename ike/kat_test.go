package ike

import (
	"bytes"
	"crypto/ecdh"
	"encoding/hex"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPRFKnownAnswers checks the PRFs against RFC 4231 §4.2 (test case 1)
// and RFC 2202 §3 (test case 1).
func TestPRFKnownAnswers(t *testing.T) {
	for _, c := range []struct {
		id        uint16
		key, want string
	}{
		{PRFHMACSHA1, "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "b617318655057264e28bc0b6fb378c8ef146be00"},
		{PRFHMACSHA256, "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{PRFHMACSHA384, "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "afd03944d84895626b0825f4ab46907f15f9dadbe4101ec682aa034c7cebc59cfaea9ea9076ede7f4af152e8b2fa9cb6"},
		{PRFHMACSHA512, "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cdedaa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854"},
	} {
		p, err := prfFor(c.id)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.sum(unhex(t, c.key), []byte("Hi There")); !bytes.Equal(got, unhex(t, c.want)) {
			t.Errorf("%s: %x, want %s", transformName(TransformPRF, c.id), got, c.want)
		}
	}
}

// TestPRFPlusKnownAnswers checks prf+ and SKEYSEED against values computed
// with Python's hmac module from RFC 7296 §2.13 and §2.14.
func TestPRFPlusKnownAnswers(t *testing.T) {
	seq := func(a, b int) []byte {
		var out []byte
		for i := a; i < b; i++ {
			out = append(out, byte(i))
		}
		return out
	}
	sha256p, _ := prfFor(PRFHMACSHA256)
	sha1p, _ := prfFor(PRFHMACSHA1)
	got, _ := sha256p.plus(seq(0, 32), []byte("espgw prf+ seed"), 100)
	if want := "04e9fe4f3aed5e91f552a3caec67686a054ca9a1aa234445ddbbe1e43d4062ee477c3f4584fdef97c8ddaecc4a050bea14ef44878c20953b7ae98e088b0767c1707edffa7bb7ca48a75ec7325370261c7eef034140ce89c0cca3475ce43e2b6d696db559"; hex.EncodeToString(got) != want {
		t.Errorf("prf+ HMAC-SHA256: %x", got)
	}
	got, _ = sha1p.plus(seq(0, 20), []byte("espgw prf+ seed"), 50)
	if want := "793a2cff106a58a950795e4546212fd9cc01a54ab96e1b12f96cb8b52c127ab3183f9e2f53ac59bc2fd46f752c113c342a10"; hex.EncodeToString(got) != want {
		t.Errorf("prf+ HMAC-SHA1: %x", got)
	}
	if _, err := sha1p.plus(nil, nil, 255*20+1); err == nil {
		t.Error("prf+ past 255 blocks accepted")
	}
	ps, _ := ParseProposals(ProtoIKE, "aes128-sha256-x25519")
	s, _ := ikeSuiteFrom(ps[0])
	k, err := deriveIKEKeys(s, seq(16, 48), seq(48, 80), seq(100, 132), 0x0102030405060708, 0x1112131415161718)
	if err != nil {
		t.Fatal(err)
	}
	all := bytes.Join([][]byte{k.d, k.ai, k.ar, k.ei, k.er, k.pi, k.pr}, nil)
	if want := "3f977b41e230e9e0b87b4716f7b4274483ca798e1890b6fb7f24433b0c029d0bb0a13a4649ebbbcc566ee5df4790e9d14973734e5ea0be99429ca655496d63db1a9a85000bd9e5136041f32e71c60010e1b106e32ffeeb212fe084126f11520b14b70d2dbc8e2e2c3927458d6de6b5fe1b5b0c494a7b330128922e13363c00f30d9e67a3758d3a027b8e81950a13db9386618ca954e42125e38fbcfdb7f6a7e4fafa84677fed8a8f2e9375e3693e1dbb315bd52c56a9e06516e70951ad644746"; hex.EncodeToString(all) != want {
		t.Errorf("IKE SA keys: %x", all)
	}
}

// TestCurve25519KnownAnswer is RFC 7748 §6.1's exchange through the KE code.
func TestCurve25519KnownAnswer(t *testing.T) {
	alice, err := ecdh.X25519().NewPrivateKey(unhex(t, "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"))
	if err != nil {
		t.Fatal(err)
	}
	k := &ecKey{group: Curve25519, curve: ecdh.X25519(), priv: alice}
	if got := hex.EncodeToString(k.Public()); got != "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a" {
		t.Errorf("public %s", got)
	}
	s, err := k.Shared(unhex(t, "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"))
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(s); got != "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742" {
		t.Errorf("shared %s", got)
	}
}

// TestGroupsAgree runs each group's exchange both ways.
func TestGroupsAgree(t *testing.T) {
	for _, g := range []DHGroup{MODP2048, MODP3072, ECP256, ECP384, Curve25519} {
		a, err := g.generate(randReader())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := g.generate(randReader())
		sa, err := a.Shared(b.Public())
		if err != nil {
			t.Fatal(err)
		}
		sb, _ := b.Shared(a.Public())
		if !bytes.Equal(sa, sb) || len(sa) == 0 {
			t.Errorf("%s: the two sides disagree", g)
		}
		if _, err := a.Shared(make([]byte, len(b.Public()))); err == nil {
			t.Errorf("%s: an all-zero public value accepted", g)
		}
	}
}
