package cpu

import (
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

// Go's GCM takes 12- to 16-byte tags: the package lists aes-gcm-12 and
// aes-gcm-16, and the engine refuses aes-gcm-8 by name, pointing to the
// engine that does it.
func TestGCMICVLengths(t *testing.T) {
	e := New()
	key := make(sa.Key, 20)
	for _, c := range []sa.Cipher{sa.CipherAESGCM16, sa.CipherAESGCM12} {
		s := sa.Suite{Cipher: c}
		if !slices.Contains(Suites(), s) {
			t.Errorf("%s not listed", c)
		}
		sess, err := e.NewSession(offload.SessionConfig{Suite: s, EncKey: key})
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		sess.Close()
	}
	s := sa.Suite{Cipher: sa.CipherAESGCM8}
	if slices.Contains(Suites(), s) {
		t.Error("aes-gcm-8 listed")
	}
	if !slices.Contains(AllSuites(), s) {
		t.Error("aes-gcm-8 missing from AllSuites, which the afalg engine offers from")
	}
	_, err := e.NewSession(offload.SessionConfig{Suite: s, EncKey: key})
	if err == nil || !strings.Contains(err.Error(), "aes-gcm-8 is not supported by Go's crypto/cipher") || !strings.Contains(err.Error(), "afalg") {
		t.Errorf("aes-gcm-8: error %v, want a refusal naming it and the afalg engine", err)
	}
}

// TestSessionIsOneLine checks that a session, which every op reads, is one
// 64-byte object (a size class whose objects start on a cache line).
func TestSessionIsOneLine(t *testing.T) {
	if n := unsafe.Sizeof(Session{}); n != 64 {
		t.Errorf("Session is %d bytes, want 64", n)
	}
}
