package sa

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
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
