package sa

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
)

func testSA() *SA {
	return &SA{
		SPI: 0x1001, Mode: Tunnel,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		Suite:   Suite{CipherAESCBC, AuthHMACSHA1_96},
		EncKey:  mustHex(testEncHex),
		AuthKey: mustHex(testAuthHex),
	}
}

// No way of printing or logging an SA, or its keys, shows key material.
func TestKeysNeverPrint(t *testing.T) {
	s := testSA()
	gcm := &SA{SPI: 0x102, Src: s.Src, Dst: s.Dst, Suite: Suite{CipherAESGCM16, AuthNone}, EncKey: mustHex(testGCMHex)}
	values := map[string]any{
		"*SA": s, "SA": *s, "Key": s.EncKey, "[]*SA": []*SA{s, gcm},
		"Config": &Config{SAs: []*SA{s}, SPD: []Policy{{Action: Protect, SA: s, SPI: s.SPI}}},
		"Policy": Policy{Action: Protect, SA: s},
		"struct": struct{ K Key }{s.AuthKey},
	}
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%x", "%X", "%s", "%q", "%d"} {
			assertNoSecret(t, name+" "+verb, fmt.Sprintf(verb, v))
		}
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("sa", "v", v)
		slog.New(slog.NewTextHandler(&buf, nil)).Info("sa", "v", v)
		assertNoSecret(t, name+" slog", buf.String())
		j, err := json.Marshal(v)
		if err != nil {
			t.Errorf("%s: json: %v", name, err)
		}
		assertNoSecret(t, name+" json", string(j))
	}
	// The SA still logs what it is.
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("sa", "sa", s)
	if !bytes.Contains(buf.Bytes(), []byte(`"sa":{"spi":"0x1001","mode":"tunnel","src":"192.0.2.1","dst":"192.0.2.2","suite":"aes-cbc+hmac-sha1-96"`)) {
		t.Errorf("slog JSON of an SA: %s", buf.Bytes())
	}
}

// Validation errors name the problem, never the key.
func TestValidateErrorsShowNoKey(t *testing.T) {
	bad := []*SA{
		func() *SA { s := testSA(); s.EncKey = s.EncKey[:15]; return s }(),
		func() *SA { s := testSA(); s.AuthKey = append(s.AuthKey, 1); return s }(),
		func() *SA { s := testSA(); s.Suite.Cipher = Cipher3DES; return s }(),
		func() *SA { s := testSA(); s.Suite.Auth = AuthNone; return s }(),
		func() *SA { s := testSA(); s.Dst = netip.MustParseAddr("2001:db8::1"); return s }(),
		func() *SA { s := testSA(); s.ReplayWindow = 5000; return s }(),
		func() *SA { s := testSA(); s.SrcPort = 4500; return s }(),
		func() *SA { s := testSA(); s.FollowSourcePort = true; return s }(),
		func() *SA { s := testSA(); s.Soft.Packets, s.Hard.Packets = 10, 5; return s }(),
		func() *SA { s := testSA(); s.InitialSeq = 1 << 32; return s }(),
	}
	for i, s := range bad {
		err := s.Validate()
		if err == nil {
			t.Errorf("case %d: no error", i)
			continue
		}
		assertNoSecret(t, "error", err.Error())
		_, err = NewSAD([]*SA{s})
		if err == nil {
			t.Errorf("case %d: NewSAD took an invalid SA", i)
		}
		assertNoSecret(t, "NewSAD error", fmt.Sprint(err))
	}
	if err := testSA().Validate(); err != nil {
		t.Errorf("valid SA: %v", err)
	}
}

// A bad line's harmless words are shown, a misspelt name with the nearest
// valid one, while the keys on the same line are not.
func TestErrorsShowWrongWords(t *testing.T) {
	key := "0x00112233445566778899aabbccddeeff"
	for _, c := range []struct {
		name, in, want string
		parse          func(string, []byte) (*Config, error)
	}{
		{"setkey cipher", "add 192.0.2.1 192.0.2.2 esp 0x1001 -E AES-CBCC " + key + ";\n", `"AES-CBCC" (did you mean "aes-cbc"?)`, ParseSetkey},
		{"setkey word", "add 192.0.2.1 192.0.2.2 esp 0x1001 bogus -E aes-cbc " + key + ";\n", `"bogus"`, ParseSetkey},
		{"esp_sa cipher", `"IPv4","192.0.2.1","192.0.2.2","0x00001001","AES-CBCC","` + key + `","NULL",""` + "\n", `"AES-CBCC" (did you mean "AES-CBC [RFC3602]"?)`, ParseEspSA},
		{"ip xfrm word", "ip xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x1001 mode tunnel bogus-opt enc 'cbc(aes)' " + key + "\n", `"bogus-opt"`, ParseXFRMCommands},
		{"yaml cipher", "sa:\n  - {spi: 0x1001, mode: tunnel, src: 192.0.2.1, dst: 192.0.2.2, enc: aes-cbcc, enc-key: \"" + key + "\", auth: none}\n", `"aes-cbcc" (did you mean "aes-cbc"?)`, ParseYAML},
	} {
		_, err := c.parse("f", []byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to show %s", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "00112233445566778899") {
			t.Errorf("%s: the error shows the key: %v", c.name, err)
		}
	}
}
