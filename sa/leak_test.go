package sa

import (
	"strings"
	"testing"
)

// ASCII keys, as setkey(8) takes them in quotes and as a user may type them
// into a YAML field; each is at least 16 bytes, as every real key is.
var asciiSecrets = []string{"opensesame123456", "randomSecretValue42", "hunter2hunter2hunter2"}

// assertNoASCIISecret fails if text holds 7 consecutive characters of an
// ASCII test key.
func assertNoASCIISecret(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range asciiSecrets {
		for i := 0; i+7 <= len(s); i++ {
			if strings.Contains(text, s[i:i+7]) {
				t.Errorf("%s shows key material %q: %s", what, s[i:i+7], text)
				return
			}
		}
	}
}

// A key in the wrong place (a forgotten algorithm name, a mode, a stray
// token, an algorithm field) is refused without being printed.
func TestMisplacedKeysNeverPrint(t *testing.T) {
	const head = "add 192.0.2.1 192.0.2.2 esp 0x1001 "
	const auth = ` -A hmac-sha1 0x` + testAuthHex
	setkey := map[string]string{
		"algorithm forgotten":      head + `-E "opensesame123456"` + auth + ";",
		"auth algorithm forgotten": head + `-E aes-cbc 0x` + testEncHex + ` -A "hunter2hunter2hunter2";`,
		"after -m":                 head + `-m "opensesame123456" -E aes-cbc 0x` + testEncHex + auth + ";",
		"bare after -m":            head + `-m randomSecretValue42 -E aes-cbc 0x` + testEncHex + auth + ";",
		"stray token":              head + `-E aes-cbc 0x` + testEncHex + ` randomSecretValue42` + auth + ";",
		"stray quoted token":       head + `-E aes-cbc 0x` + testEncHex + ` "opensesame123456"` + auth + ";",
		"key as -f":                head + `-f randomSecretValue42 -E aes-cbc 0x` + testEncHex + auth + ";",
		"key as protocol":          `add 192.0.2.1 192.0.2.2 randomSecretValue42 0x1001 -E aes-cbc 0x` + testEncHex + ";",
		"key as address":           `add randomSecretValue42 192.0.2.2 esp 0x1001 -E aes-cbc 0x` + testEncHex + ";",
		"key as command":           `randomSecretValue42 192.0.2.2 esp 0x1001;`,
		"key as direction":         `spdadd 192.0.2.1 192.0.2.2 any -P randomSecretValue42 none;`,
		"key as priority":          `spdadd 192.0.2.1 192.0.2.2 any -P out prio randomSecretValue42 none;`,
		"key as policy":            `spdadd 192.0.2.1 192.0.2.2 any -P out randomSecretValue42;`,
		"key as level":             `spdadd 192.0.2.1 192.0.2.2 any -P out ipsec esp/transport//randomSecretValue42;`,
	}
	for name, in := range setkey {
		t.Run("setkey "+name, func(t *testing.T) {
			_, err := ParseSetkey("t.setkey", []byte(in))
			if err == nil {
				t.Fatalf("no error for %s", in)
			}
			assertNoASCIISecret(t, "error", err.Error())
			assertNoSecret(t, "error", err.Error())
		})
	}
	yamls := map[string]string{
		"random-like enc-key": edit("enc-key: 0x"+testEncHex, "enc-key: randomSecretValue42"),
		"ascii enc-key":       edit("enc-key: 0x"+testEncHex, "enc-key: hunter2hunter2hunter2"),
		"ascii in auth":       edit("auth: hmac-sha1-96", "auth: hunter2hunter2hunter2"),
		"ascii in enc":        edit("enc: aes-cbc", "enc: opensesame123456"),
		"ascii in mode":       edit("mode: tunnel", "mode: opensesame123456"),
		"ascii in encap":      edit("mode: tunnel", "mode: tunnel\n    encap: opensesame123456"),
		"ascii in esn":        edit("mode: tunnel", "mode: tunnel\n    esn: opensesame123456"),
		"ascii as field":      edit("mode: tunnel", "mode: tunnel\n    opensesame123456: 1"),
		"ascii in src":        edit("src: 192.0.2.1", "src: opensesame123456"),
		"ascii in spi":        edit("spi: 0x1001", "spi: opensesame123456"),
		"ascii in window":     edit("mode: tunnel", "mode: tunnel\n    replay-window: opensesame123456"),
		"ascii in lifetime":   edit("mode: tunnel", "mode: tunnel\n    lifetimes: {hard: {time: opensesame123456}}"),
		"ascii in action":     baseSA + "spd:\n  - {action: opensesame123456}\n",
		"ascii in proto":      baseSA + "spd:\n  - {action: discard, proto: opensesame123456}\n",
		"ascii in selector":   baseSA + "spd:\n  - {action: discard, src: opensesame123456}\n",
	}
	for name, in := range yamls {
		t.Run("yaml "+name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(in))
			if err == nil {
				t.Fatalf("no error for %s", in)
			}
			assertNoASCIISecret(t, "error", err.Error())
		})
	}
}
