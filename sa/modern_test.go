package sa

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// modernSuites are the AEAD suites after RFC 4106, each at every key size.
func modernSuites() []*SA {
	var out []*SA
	spi := uint32(0x6001)
	for _, c := range []Cipher{CipherChaCha20Poly1305, CipherAESGMAC, CipherAESCCM8, CipherAESCCM12, CipherAESCCM16} {
		for _, n := range (Suite{Cipher: c}).EncKeyLens() {
			k := make(Key, n)
			for i := range k {
				k[i] = byte(0x80 + i)
			}
			out = append(out, &SA{SPI: spi, Mode: Tunnel, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
				Suite: Suite{Cipher: c}, EncKey: k, ReplayWindow: 64})
			spi++
		}
	}
	return out
}

// Every modern suite at every key length round-trips through YAML, setkey
// and ip xfrm; esp_sa carries ChaCha20-Poly1305 by Wireshark's name and
// refuses the suites Wireshark cannot name, naming them.
func TestModernSuitesRoundTrip(t *testing.T) {
	for _, s := range modernSuites() {
		for _, f := range WriteFormats {
			t.Run(fmt.Sprintf("%s-%d/%s", s.Suite, len(s.EncKey), f), func(t *testing.T) {
				c := &Config{SAs: []*SA{s}}
				data, err := Encode(c, f)
				if f == FormatEspSA && s.Suite.Cipher != CipherChaCha20Poly1305 {
					if err == nil || !strings.Contains(err.Error(), "Wireshark has no name for "+s.Suite.String()) {
						t.Fatalf("esp_sa wrote %s: err %v\n%s", s.Suite, err, data)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				back, err := ParseConfig("x", data)
				if err != nil {
					t.Fatalf("read back: %v\n%s", err, data)
				}
				want, _ := carried(c, f)
				sameConfig(t, string(f), back, want)
			})
		}
	}
}

// The kernel's names for the modern suites, as `ip xfrm state` lists
// them, read into espgw's suites; an ICV length the suite does not have
// and a key without its salt are errors that say what is wanted.
// The states are `ip -s xfrm state` listings, which show every flag.
func TestXFRMModernAEADs(t *testing.T) {
	key := func(n int) string { return "0x" + strings.Repeat("ab", n) }
	state := func(aead string) string {
		return "src 192.0.2.1 dst 192.0.2.2\n\tproto esp spi 0x00007001 reqid 1 mode tunnel\n\treplay-window 32 seq 0x00000000 flag af-unspec (0x00100000)\n\t" + aead + "\n"
	}
	for _, tc := range []struct {
		aead string
		want Cipher
		err  string
	}{
		{"aead rfc7539esp(chacha20,poly1305) " + key(36) + " 128", CipherChaCha20Poly1305, ""},
		{"aead rfc4543(gcm(aes)) " + key(20) + " 128", CipherAESGMAC, ""},
		{"aead rfc4543(gcm(aes)) " + key(36) + " 128", CipherAESGMAC, ""},
		{"aead rfc4309(ccm(aes)) " + key(19) + " 64", CipherAESCCM8, ""},
		{"aead rfc4309(ccm(aes)) " + key(27) + " 96", CipherAESCCM12, ""},
		{"aead rfc4309(ccm(aes)) " + key(35) + " 128", CipherAESCCM16, ""},
		{"aead rfc4309(ccm(aes)) " + key(19) + " 32", 0, "rfc4309(ccm(aes)) with a 32-bit ICV: espgw does 64, 96, 128 bits"},
		{"aead rfc7539esp(chacha20,poly1305) " + key(32) + " 128", 0, "key is 32 bytes, want 36 (key and 4-byte salt)"},
		{"aead rfc4309(ccm(aes)) " + key(20) + " 128", 0, "key is 20 bytes, want [19 27 35] (key and 3-byte salt)"},
		{"aead rfc7539(chacha20,poly1305) " + key(36) + " 128", 0, "not supported (want rfc4106(gcm(aes)), rfc7539esp(chacha20,poly1305), rfc4543(gcm(aes)), rfc4309(ccm(aes)))"},
	} {
		c, err := ParseXFRMState("t", []byte(state(tc.aead)))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.aead, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.aead, err)
			continue
		}
		if got := c.SAs[0].Suite; got != (Suite{Cipher: tc.want}) {
			t.Errorf("%s: suite %s, want %s", tc.aead, got, tc.want)
		}
	}
}

// The modern suites' shapes: ICV, IV, alignment and salt, as RFC 7634,
// 4543 and 4309 give them.
func TestModernSuiteShapes(t *testing.T) {
	for _, tc := range []struct {
		c                  Cipher
		icv, iv, blk, salt int
		keys               []int
	}{
		{CipherChaCha20Poly1305, 16, 8, 4, 4, []int{36}},
		{CipherAESGMAC, 16, 8, 4, 4, []int{20, 28, 36}},
		{CipherAESCCM8, 8, 8, 4, 3, []int{19, 27, 35}},
		{CipherAESCCM12, 12, 8, 4, 3, []int{19, 27, 35}},
		{CipherAESCCM16, 16, 8, 4, 3, []int{19, 27, 35}},
	} {
		s := Suite{Cipher: tc.c}
		if s.ICVLen() != tc.icv || s.IVLen() != tc.iv || s.BlockLen() != tc.blk || tc.c.SaltLen() != tc.salt || fmt.Sprint(s.EncKeyLens()) != fmt.Sprint(tc.keys) {
			t.Errorf("%s: icv %d iv %d block %d salt %d keys %v", s, s.ICVLen(), s.IVLen(), s.BlockLen(), tc.c.SaltLen(), s.EncKeyLens())
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s, err)
		}
		if c, err := ParseCipher(tc.c.String()); err != nil || c != tc.c {
			t.Errorf("ParseCipher(%s) = %s, %v", tc.c, c, err)
		}
		enc, _, err := RandomKeys(s, 256)
		if err != nil || len(enc) != tc.keys[len(tc.keys)-1] {
			t.Errorf("%s: RandomKeys(256) gave %d bytes, %v", s, len(enc), err)
		}
	}
}
