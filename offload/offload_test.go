package offload_test

import (
	"strings"
	"testing"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

func TestSessionConfigValidate(t *testing.T) {
	cbcSHA1 := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}
	for _, c := range []struct {
		name string
		cfg  offload.SessionConfig
		want string // "" for valid
	}{
		{"aes-cbc+hmac-sha1-96", offload.SessionConfig{Suite: cbcSHA1, EncKey: make(sa.Key, 16), AuthKey: make(sa.Key, 20)}, ""},
		{"null+hmac-sha1-96", offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherNull, Auth: sa.AuthHMACSHA1_96}, AuthKey: make(sa.Key, 20)}, ""},
		{"aes-gcm-16", offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: make(sa.Key, 20)}, ""},
		{"short auth key", offload.SessionConfig{Suite: cbcSHA1, EncKey: make(sa.Key, 16), AuthKey: make(sa.Key, 19)}, "auth-key for hmac-sha1-96 is 19 bytes, want 20"},
		{"no integrity", offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESCBC}, EncKey: make(sa.Key, 16)}, "needs an auth algorithm"},
		{"cipher-only aes-cbc", offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESCBC}, EncKey: make(sa.Key, 32), CipherOnly: true}, ""},
		{"cipher-only aes-ctr", offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESCTR}, EncKey: make(sa.Key, 20), CipherOnly: true}, ""},
		{"cipher-only null", offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherNull}, CipherOnly: true}, "needs a cipher that encrypts"},
		{"cipher-only aead", offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: make(sa.Key, 20), CipherOnly: true}, "not an AEAD"},
		{"cipher-only with auth", offload.SessionConfig{Suite: cbcSHA1, EncKey: make(sa.Key, 16), AuthKey: make(sa.Key, 20), CipherOnly: true}, "auth none"},
		{"cipher-only short key", offload.SessionConfig{Suite: sa.Suite{Cipher: sa.Cipher3DES}, EncKey: make(sa.Key, 16), CipherOnly: true}, "enc-key for 3des-cbc is 16 bytes, want [24]"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

func TestOpFits(t *testing.T) {
	buf := make([]byte, 64)
	for _, c := range []struct {
		name string
		op   offload.Op
		want bool
	}{
		{"all in", offload.Op{Buf: buf, IV: offload.Range{Off: 8, Len: 16}, Cipher: offload.Range{Off: 24, Len: 28}, ICV: offload.Range{Off: 52, Len: 12}, NonceLen: 16, AADLen: 12}, true},
		{"empty ranges", offload.Op{Buf: buf}, true},
		{"past the end", offload.Op{Buf: buf, ICV: offload.Range{Off: 60, Len: 8}}, false},
		{"negative offset", offload.Op{Buf: buf, Auth: offload.Range{Off: -1, Len: 4}}, false},
		{"negative length", offload.Op{Buf: buf, Cipher: offload.Range{Off: 4, Len: -1}}, false},
		{"huge length", offload.Op{Buf: buf, Cipher: offload.Range{Off: 4, Len: int(^uint(0) >> 1)}}, false},
		{"nonce too long", offload.Op{Buf: buf, NonceLen: 17}, false},
		{"AAD too long", offload.Op{Buf: buf, AADLen: 13}, false},
	} {
		if got := c.op.Fits(); got != c.want {
			t.Errorf("%s: Fits %v, want %v", c.name, got, c.want)
		}
	}
}
