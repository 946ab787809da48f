package kcapi

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
)

// The guest's /proc/crypto: Debian's 6.1 kernel with virtio_crypto loaded
// and the algorithms a few AF_ALG sessions instantiated.
func guestAlgs(t *testing.T) Algs {
	t.Helper()
	f, err := os.Open("testdata/proc_crypto_guest.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	algs, err := ParseAlgs(f)
	if err != nil {
		t.Fatal(err)
	}
	return algs
}

func TestParseAlgs(t *testing.T) {
	algs := guestAlgs(t)
	if len(algs) < 40 {
		t.Fatalf("parsed %d entries", len(algs))
	}
	v, ok := algs.ByDriver("virtio_crypto_aes_cbc")
	if !ok {
		t.Fatal("no virtio_crypto_aes_cbc")
	}
	want := Alg{Name: "cbc(aes)", Driver: "virtio_crypto_aes_cbc", Module: "virtio_crypto", Priority: 150, Type: "skcipher", Selftest: "passed", Async: true}
	if v != want {
		t.Errorf("virtio entry %+v, want %+v", v, want)
	}
	if b, _ := algs.Best("cbc(aes)"); b.Driver != "virtio_crypto_aes_cbc" {
		t.Errorf("best cbc(aes) is %s, want the device's (150 beats cbc(aes-generic)'s 100)", b.Driver)
	}
	if b, _ := algs.Best("sha1"); b.Driver != "sha1-generic" {
		t.Errorf("best sha1 is %s", b.Driver)
	}
	off := algs.Offering("cbc(aes)")
	if len(off) != 2 || off[0] != "virtio_crypto_aes_cbc (virtio_crypto, priority 150)" {
		t.Errorf("offering %q", off)
	}
}

func TestParseAlgsRejects(t *testing.T) {
	for _, in := range []string{"name : x\ngarbage\n", "name : x\npriority : high\n"} {
		if _, err := ParseAlgs(bytes.NewBufferString(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// TestAuthencKey: the blob crypto_authenc_extractkeys reads.
func TestAuthencKey(t *testing.T) {
	b := AuthencKey([]byte{1, 2, 3}, []byte{9, 8})
	if got := binary.NativeEndian.Uint16(b[0:]); got != 8 {
		t.Errorf("rta_len %d", got)
	}
	if got := binary.NativeEndian.Uint16(b[2:]); got != 1 {
		t.Errorf("rta_type %d", got)
	}
	if got := binary.BigEndian.Uint32(b[4:]); got != 2 {
		t.Errorf("enckeylen %d", got)
	}
	if !bytes.Equal(b[8:], []byte{1, 2, 3, 9, 8}) {
		t.Errorf("keys %x", b[8:])
	}
}
