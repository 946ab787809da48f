package sa

import (
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/espgw/espgw/internal/secret"
	"net/netip"
	"strconv"
	"strings"
)

// Wireshark's names for the algorithms of its esp_sa table (ESP
// preferences, "ESP SAs"). The first name of each is what Wireshark 4
// shows and what espgw writes; the others are read too: strongSwan's
// save-keys plugin writes "TripleDes-CBC [RFC2451]" and, for GCM, the
// older "AES-GCM [RFC4106]" with "ANY 128 bit authentication [no checking]".
// ChaCha20-Poly1305's name is Wireshark 4.2's (4.0 has none); Wireshark
// names neither AES-GMAC nor AES-CCM.
var (
	espSACiphers = []struct {
		c     Cipher
		names []string
	}{
		{CipherNull, []string{"NULL"}},
		{CipherAESCBC, []string{"AES-CBC [RFC3602]"}},
		{Cipher3DES, []string{"TripleDES-CBC [RFC2451]"}},
		{CipherAESCTR, []string{"AES-CTR [RFC3686]"}},
		{CipherAESGCM16, []string{"AES-GCM with 16 octet ICV [RFC4106]", "AES-GCM [RFC4106]"}},
		{CipherAESGCM12, []string{"AES-GCM with 12 octet ICV [RFC4106]"}},
		{CipherAESGCM8, []string{"AES-GCM with 8 octet ICV [RFC4106]"}},
		{CipherChaCha20Poly1305, []string{"ChaCha20 with Poly1305 [RFC7634]"}},
	}
	espSAAuths = []struct {
		a     Auth
		names []string
	}{
		{AuthNone, []string{"NULL", "ANY 128 bit authentication [no checking]"}},
		{AuthHMACSHA1_96, []string{"HMAC-SHA-1-96 [RFC2404]"}},
		{AuthHMACSHA256_128, []string{"HMAC-SHA-256-128 [RFC4868]"}},
		{AuthHMACSHA384_192, []string{"HMAC-SHA-384-192 [RFC4868]"}},
		{AuthHMACSHA512_256, []string{"HMAC-SHA-512-256 [RFC4868]"}},
		{AuthHMACMD5_96, []string{"HMAC-MD5-96 [RFC2403]"}},
	}
)

// EspSALine returns the SA as one line of Wireshark's esp_sa table (the
// esp_sa file of a Wireshark profile, or the value of tshark's
// -o uat:esp_sa:…), keys in clear. The table holds addresses, SPI,
// algorithms and keys only: mode, encapsulation, ESN and the replay window
// are not part of it.
func EspSALine(s *SA) (string, error) {
	var enc, auth string
	for _, c := range espSACiphers {
		if c.c == s.Suite.Cipher {
			enc = c.names[0]
		}
	}
	for _, a := range espSAAuths {
		if a.a == s.Suite.Auth {
			auth = a.names[0]
		}
	}
	if enc == "" || auth == "" {
		return "", fmt.Errorf("SA %#x: Wireshark has no name for %s", s.SPI, s.Suite)
	}
	family := "IPv4"
	if s.Src.Is6() && !s.Src.Is4In6() {
		family = "IPv6"
	}
	key := func(k Key) string {
		if len(k) == 0 {
			return ""
		}
		return "0x" + hex.EncodeToString(k)
	}
	fields := []string{family, s.Src.String(), s.Dst.String(), fmt.Sprintf("0x%08x", s.SPI), enc, key(s.EncKey), auth, key(s.AuthKey)}
	for i := range fields {
		fields[i] = `"` + fields[i] + `"`
	}
	return strings.Join(fields, ","), nil
}

// MarshalEspSA writes every SA as a line of Wireshark's esp_sa table.
func MarshalEspSA(c *Config) ([]byte, error) {
	var b strings.Builder
	for _, s := range c.SAs {
		line, err := EspSALine(s)
		if err != nil {
			return nil, err
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}

// looksLikeEspSA reports whether the first line is an esp_sa record.
func looksLikeEspSA(data []byte) bool {
	l := firstLines(data, 1)
	if len(l) == 0 {
		return false
	}
	t := strings.TrimSpace(l[0])
	return strings.HasPrefix(t, `"IPv4"`) || strings.HasPrefix(t, `"IPv6"`) || strings.HasPrefix(t, `"Any"`)
}

var espSAFieldNames = []string{"protocol", "source", "destination", "spi", "encryption", "encryption key", "authentication", "authentication key"}

// ParseEspSA reads Wireshark's esp_sa table (what Wireshark, strongSwan's
// save-keys plugin and `espgw pcap open --wireshark-sa` write): one SA per
// line of eight quoted, comma-separated fields. Wildcards (* addresses or
// SPI, protocol Any) are errors: an SA needs all of them. The table does
// not say the mode, encapsulation, ESN or replay window: the SAs get
// tunnel mode, raw ESP, no ESN and a 64-packet window.
func ParseEspSA(name string, data []byte) (*Config, error) {
	p := &lineProblems{file: name}
	var sas []*SA
	seen := map[saKey]int{}
	for i, raw := range strings.Split(string(data), "\n") {
		espSALine(p, seen, i+1, raw, func(s *SA) error {
			sas = append(sas, s)
			return nil
		})
	}
	if err := p.errs.Err(); err != nil {
		return nil, err
	}
	if len(sas) == 0 {
		return nil, &ConfigError{File: name, Err: errors.New("no SA line in the esp_sa table")}
	}
	return &Config{SAs: sas}, nil
}

func espSARecord(f []string) (s *SA, entry, field string, err error) {
	s = &SA{Mode: Tunnel, ReplayWindow: 64}
	entry = "esp_sa"
	switch f[0] {
	case "IPv4", "IPv6":
	default:
		return nil, entry, "protocol", fmt.Errorf("%s: want IPv4 or IPv6 (wildcards cannot make an SA)", secret.Word(f[0], "IPv4", "IPv6"))
	}
	for i, dst := range []*netip.Addr{&s.Src, &s.Dst} {
		a, err := netip.ParseAddr(f[1+i])
		if err != nil {
			return nil, entry, espSAFieldNames[1+i], fmt.Errorf("%s is not an IP address (wildcards and prefixes cannot make an SA)", secret.Number(f[1+i]))
		}
		*dst = a
	}
	spi, err := strconv.ParseUint(f[3], 0, 32)
	if err != nil {
		return nil, entry, "spi", fmt.Errorf("%s is not a 32-bit number", secret.Number(f[3]))
	}
	s.SPI = uint32(spi)
	entry = fmt.Sprintf("esp_sa %s→%s spi %#x", s.Src, s.Dst, s.SPI)
	found := false
	for _, c := range espSACiphers {
		for _, n := range c.names {
			if strings.EqualFold(n, f[4]) {
				s.Suite.Cipher, found = c.c, true
			}
		}
	}
	if !found {
		return nil, entry, "encryption", fmt.Errorf("%s is not supported (want NULL, AES-CBC [RFC3602], TripleDES-CBC [RFC2451], AES-CTR [RFC3686] or AES-GCM with 16 octet ICV [RFC4106])", secret.Word(f[4], "NULL", "AES-CBC [RFC3602]", "TripleDES-CBC [RFC2451]", "AES-CTR [RFC3686]"))
	}
	found = false
	for _, a := range espSAAuths {
		for _, n := range a.names {
			if strings.EqualFold(n, f[6]) {
				s.Suite.Auth, found = a.a, true
			}
		}
	}
	if !found {
		return nil, entry, "authentication", fmt.Errorf("%s is not supported (want NULL or HMAC-SHA-1-96, HMAC-SHA-256-128, HMAC-SHA-384-192, HMAC-SHA-512-256, HMAC-MD5-96 with their RFC)", secret.Word(f[6], "NULL", "HMAC-SHA-1-96 [RFC2404]", "HMAC-MD5-96 [RFC2403]"))
	}
	for _, k := range []struct {
		field string
		text  string
		dst   *Key
	}{{"encryption key", f[5], &s.EncKey}, {"authentication key", f[7], &s.AuthKey}} {
		if k.text == "" || k.text == "0x" { // strongSwan writes 0x for no key
			continue
		}
		key, err := ParseKeyHex(k.text)
		if err != nil {
			return nil, entry, k.field, err
		}
		*k.dst = key
	}
	if err := s.Validate(); err != nil {
		return nil, entry, "", err
	}
	return s, entry, "", nil
}

// uatFields splits a Wireshark UAT record: "quoted" fields (with \xHH and
// \" escapes) separated by commas.
func uatFields(line string) ([]string, error) {
	var out []string
	for i := 0; i < len(line); {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i >= len(line) || line[i] != '"' {
			return nil, fmt.Errorf("field %d: want a \"quoted\" value", len(out)+1)
		}
		i++
		var b strings.Builder
		closed := false
		for i < len(line) {
			c := line[i]
			if c == '"' {
				closed = true
				i++
				break
			}
			if c == '\\' && i+1 < len(line) {
				if line[i+1] == 'x' && i+3 < len(line) {
					v, err := strconv.ParseUint(line[i+2:i+4], 16, 8)
					if err != nil {
						return nil, fmt.Errorf("field %d: bad \\x escape", len(out)+1)
					}
					b.WriteByte(byte(v))
					i += 4
					continue
				}
				b.WriteByte(line[i+1])
				i += 2
				continue
			}
			b.WriteByte(c)
			i++
		}
		if !closed {
			return nil, fmt.Errorf("field %d: quote never closed", len(out)+1)
		}
		out = append(out, b.String())
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i < len(line) {
			if line[i] != ',' {
				return nil, fmt.Errorf("after field %d: want a comma", len(out))
			}
			i++
		}
	}
	return out, nil
}
