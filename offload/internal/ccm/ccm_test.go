package ccm

import (
	"bytes"
	"crypto/aes"
	"encoding/hex"
	"encoding/json"
	"os"
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

// NIST SP 800-38C Appendix C's examples seal to the published ciphertext
// and tag, open back, and a changed bit anywhere fails to open.
func TestSP80038CExamples(t *testing.T) {
	raw, err := os.ReadFile("../../../testdata/vectors/nist_sp800-38c_ccm.json")
	if err != nil {
		t.Fatalf("known-answer vectors missing: %v", err)
	}
	var f struct {
		Vectors []struct {
			ID, Key, Nonce, AAD, Plaintext string
			CiphertextTag                  string `json:"ciphertext_tag"`
			TagLen                         int    `json:"tag_len"`
		}
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) != 3 {
		t.Fatalf("%d vectors, want 3", len(f.Vectors))
	}
	for _, v := range f.Vectors {
		t.Run(v.ID, func(t *testing.T) {
			b, _ := aes.NewCipher(unhex(t, v.Key))
			nonce, aad, pt, want := unhex(t, v.Nonce), unhex(t, v.AAD), unhex(t, v.Plaintext), unhex(t, v.CiphertextTag)
			a, err := New(b, len(nonce), v.TagLen, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := a.Seal(nil, nonce, pt, aad)
			if !bytes.Equal(got, want) {
				t.Fatalf("sealed %x, want %x", got, want)
			}
			back, err := a.Open(nil, nonce, want, aad)
			if err != nil || !bytes.Equal(back, pt) {
				t.Fatalf("opened %x, %v; want %x", back, err, pt)
			}
			for i := range 8 * len(want) {
				bad := bytes.Clone(want)
				bad[i/8] ^= 1 << (i % 8)
				if _, err := a.Open(nil, nonce, bad, aad); err != ErrOpen {
					t.Fatalf("bit %d flipped: %v, want ErrOpen", i, err)
				}
			}
			if _, err := a.Open(nil, nonce, want, append(bytes.Clone(aad), 0)); err != ErrOpen {
				t.Fatalf("longer aad: %v, want ErrOpen", err)
			}
		})
	}
}

// In place, with the CBC-MAC supplied or not, results agree across
// lengths that cross every block and length-encoding boundary, and a
// failed open wipes what it decrypted.
func TestInPlaceAndMacAgree(t *testing.T) {
	b, _ := aes.NewCipher(bytes.Repeat([]byte{7}, 32))
	plain, _ := New(b, 11, 16, nil)
	viaMac, _ := New(b, 11, 16, func(x *[16]byte, src, scratch []byte) {
		if len(scratch) != ScratchLen {
			t.Fatalf("scratch of %d bytes", len(scratch))
		}
		for ; len(src) > 0; src = src[16:] {
			for i := range 16 {
				x[i] ^= src[i]
			}
			b.Encrypt(scratch[:16], x[:])
			copy(x[:], scratch[:16])
		}
	})
	nonce := bytes.Repeat([]byte{3}, 11)
	for _, n := range []int{0, 1, 15, 16, 17, 127, 128, 129, 1500} {
		for _, an := range []int{0, 8, 14, 15, 30, 1<<16 - 1<<8} {
			pt := bytes.Repeat([]byte{byte(n)}, n)
			aad := bytes.Repeat([]byte{byte(an)}, an)
			want := plain.Seal(nil, nonce, pt, aad)
			buf := append(bytes.Clone(pt), make([]byte, 16)...)
			got := viaMac.Seal(buf[:0], nonce, buf[:n], aad)
			if !bytes.Equal(got, want) {
				t.Fatalf("n=%d aad=%d: in place with a mac differs", n, an)
			}
			back, err := plain.Open(got[:0], nonce, got, aad)
			if err != nil || !bytes.Equal(back, pt) {
				t.Fatalf("n=%d aad=%d: open %v", n, an, err)
			}
		}
	}
	ct := plain.Seal(nil, nonce, bytes.Repeat([]byte{9}, 40), nil)
	ct[0] ^= 1
	if _, err := plain.Open(ct[:0], nonce, ct, nil); err != ErrOpen || !bytes.Equal(ct[:40], make([]byte, 40)) {
		t.Fatalf("bad tag: %v, plaintext left %x", err, ct[:40])
	}
}

func TestNewRefuses(t *testing.T) {
	b, _ := aes.NewCipher(make([]byte, 16))
	for _, c := range [][2]int{{6, 16}, {14, 16}, {11, 3}, {11, 5}, {11, 18}} {
		if _, err := New(b, c[0], c[1], nil); err == nil {
			t.Errorf("nonce %d tag %d accepted", c[0], c[1])
		}
	}
}

func TestSealOpenAllocateNothing(t *testing.T) {
	b, _ := aes.NewCipher(make([]byte, 16))
	a, _ := New(b, 11, 8, nil)
	nonce, aad := make([]byte, 11), make([]byte, 8)
	buf := make([]byte, 1400+8)
	if n := testing.AllocsPerRun(100, func() {
		ct := a.Seal(buf[:0], nonce, buf[:1400], aad)
		if _, err := a.Open(ct[:0], nonce, ct, aad); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per seal and open", n)
	}
}
