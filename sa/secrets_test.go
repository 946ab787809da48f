package sa

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// Test keys are distinctive, so any trace of them in output is found.
const (
	testEncHex  = "a1b2c3d4e5f6a7b8c9dad1e2f3a4b5c6"
	testAuthHex = "b1c2d3e4f5a6b7c8d9eae1f2a3b4c5d6e7f8a9ba"
	testGCMHex  = "c1d2e3f4a5b6c7d8e9fac1d2e3f4a5b6c7d8e9fa"
	testStrKey  = "open sesame, sesame" // 19 bytes: a setkey "quoted" key
)

var testSecrets = []string{testEncHex, testAuthHex, testGCMHex}

// assertNoSecret fails if text holds any 8 consecutive hex digits of a test
// key (in either case), 4 consecutive raw bytes of one, its base64 or its
// first bytes in decimal (how fmt prints a []byte), or the quoted key.
func assertNoSecret(t *testing.T, what, text string, extra ...string) {
	t.Helper()
	low := strings.ToLower(text)
	for _, h := range append(testSecrets, extra...) {
		for i := 0; i+8 <= len(h); i += 2 {
			if strings.Contains(low, h[i:i+8]) {
				t.Errorf("%s shows key material %q…: %s", what, h[i:i+8], text)
				return
			}
		}
		raw, err := hex.DecodeString(h)
		if err != nil {
			continue
		}
		b64 := base64.StdEncoding.EncodeToString(raw)
		dec := strings.Trim(fmt.Sprint(raw[:4]), "[]")
		if strings.Contains(text, b64[:8]) || strings.Contains(text, dec) {
			t.Errorf("%s shows a key in base64 or decimal: %s", what, text)
			return
		}
		for i := 0; i+4 <= len(raw); i++ {
			if bytes.Contains([]byte(text), raw[i:i+4]) {
				t.Errorf("%s shows raw key bytes: %q", what, text)
				return
			}
		}
	}
	if strings.Contains(text, testStrKey[:8]) {
		t.Errorf("%s shows a quoted key: %s", what, text)
	}
}
