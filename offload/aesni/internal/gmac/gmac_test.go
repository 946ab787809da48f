package gmac

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// impls are the implementations this CPU and build run.
func impls() []bool {
	if useAsm {
		return []bool{true, false}
	}
	return []bool{false}
}

func implName(asm bool) string {
	if asm {
		return "pclmulqdq"
	}
	return "generic"
}

func newKey(t testing.TB, key []byte, asm bool) *Key {
	t.Helper()
	k := new(Key)
	if err := k.init(key, asm); err != nil {
		t.Fatal(err)
	}
	return k
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return b
}

// stdTag is the standard library's GCM tag over an empty plaintext with
// aad ‖ data as the associated data.
func stdTag(t testing.TB, key, nonce, aad, data []byte) []byte {
	t.Helper()
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return g.Seal(nil, nonce, nil, append(append([]byte(nil), aad...), data...))
}

// TestGCMSpecVectors checks the empty-plaintext cases of McGrew and Viega's
// GCM specification (test cases 1, 7 and 13: zero key, zero IV, no AAD)
// and RFC 4543's ESP packets in testdata/vectors.
func TestGCMSpecVectors(t *testing.T) {
	cases := []struct{ name, key, tag string }{
		{"case 1 AES-128", "00000000000000000000000000000000", "58e2fccefa7e3061367f1d57a4e7455a"},
		{"case 7 AES-192", "000000000000000000000000000000000000000000000000", "cd33b28ac773f74ba00ed1f312572435"},
		{"case 13 AES-256", "0000000000000000000000000000000000000000000000000000000000000000", "530f8afbc74536b9a963b4f1c4cb738b"},
	}
	for _, asm := range impls() {
		for _, c := range cases {
			t.Run(implName(asm)+"/"+c.name, func(t *testing.T) {
				k := newKey(t, unhex(t, c.key), asm)
				var tag [TagSize]byte
				k.Tag(&tag, &[NonceSize]byte{}, nil, nil)
				if got := hex.EncodeToString(tag[:]); got != c.tag {
					t.Errorf("tag %s, want %s", got, c.tag)
				}
			})
		}
	}
}

type espVector struct {
	ID        string `json:"id"`
	ESN       bool   `json:"esn"`
	Keymat    string `json:"keymat"`
	Nonce     string `json:"nonce"`
	AAD       string `json:"aad"`
	ESPPacket string `json:"esp_packet"`
}

func TestRFC4543ESPVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "testdata", "vectors", "rfc4543_gmac_esp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Vectors []espVector }
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Vectors) < 4 {
		t.Fatalf("rfc4543_gmac_esp.json holds %d vectors, want at least 4", len(file.Vectors))
	}
	for _, asm := range impls() {
		for _, v := range file.Vectors {
			t.Run(implName(asm)+"/"+v.ID, func(t *testing.T) {
				keymat, whole, pkt := unhex(t, v.Keymat), unhex(t, v.AAD), unhex(t, v.ESPPacket)
				k := newKey(t, keymat[:len(keymat)-4], asm)
				var nonce [NonceSize]byte
				copy(nonce[:], unhex(t, v.Nonce))
				want := pkt[len(pkt)-TagSize:]
				// SPI and sequence (8 bytes, 12 with ESN) as the AAD, the
				// rest as data, as the engine calls it.
				n := 8
				if v.ESN {
					n = 12
				}
				var tag [TagSize]byte
				k.Tag(&tag, &nonce, whole[:n], whole[n:])
				if !bytes.Equal(tag[:], want) {
					t.Errorf("tag %x, want %x", tag, want)
				}
				if !k.Verify(want, &nonce, whole[:n], whole[n:]) {
					t.Error("Verify refused the vector's ICV")
				}
				bad := append([]byte(nil), want...)
				bad[3] ^= 0x10
				if k.Verify(bad, &nonce, whole[:n], whole[n:]) {
					t.Error("Verify took a wrong ICV")
				}
			})
		}
	}
}

// TestAgainstGCM compares every length of data from 0 to 2048 bytes, after
// AAD of 8 bytes (sequence number) and 12 (ESN), and of none, with the
// standard library's GCM, for each key length.
func TestAgainstGCM(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 2048)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, asm := range impls() {
		for _, keyLen := range []int{16, 24, 32} {
			key := data[100 : 100+keyLen]
			k := newKey(t, key, asm)
			var nonce [NonceSize]byte
			copy(nonce[:], data[200:])
			for _, aadLen := range []int{0, 8, 12, 16, 20} {
				aad := data[300 : 300+aadLen]
				lengths := 2049
				if testing.Short() && !asm {
					lengths = 300
				}
				for n := range lengths {
					var tag [TagSize]byte
					k.Tag(&tag, &nonce, aad, data[:n])
					if want := stdTag(t, key, nonce[:], aad, data[:n]); !bytes.Equal(tag[:], want) {
						t.Fatalf("%s AES-%d, %d bytes AAD, %d bytes data: tag %x, want %x", implName(asm), keyLen*8, aadLen, n, tag, want)
					}
				}
			}
		}
	}
}

// TestKeyReuse checks that Init replaces what a Key held.
func TestKeyReuse(t *testing.T) {
	a, b := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	var k Key
	if err := k.Init(a); err != nil {
		t.Fatal(err)
	}
	if err := k.Init(b); err != nil {
		t.Fatal(err)
	}
	var tag [TagSize]byte
	k.Tag(&tag, &[NonceSize]byte{9}, []byte("12345678"), []byte("payload"))
	if want := stdTag(t, b, append([]byte{9}, make([]byte, 11)...), []byte("12345678"), []byte("payload")); !bytes.Equal(tag[:], want) {
		t.Errorf("tag %x after Init with a new key, want %x", tag, want)
	}
}

func TestBadKey(t *testing.T) {
	for _, asm := range impls() {
		for _, n := range []int{0, 15, 17, 33} {
			var k Key
			if err := k.init(make([]byte, n), asm); err == nil {
				t.Errorf("%s: a %d-byte key was taken", implName(asm), n)
			}
		}
	}
}

func TestNoAllocations(t *testing.T) {
	for _, asm := range impls() {
		k := newKey(t, make([]byte, 16), asm)
		var nonce [NonceSize]byte
		aad, data := make([]byte, 12), make([]byte, 1400)
		var tag [TagSize]byte
		if n := testing.AllocsPerRun(100, func() {
			k.Tag(&tag, &nonce, aad, data)
			k.Verify(tag[:], &nonce, aad, data)
		}); n != 0 {
			t.Errorf("%s: %v allocations per Tag and Verify", implName(asm), n)
		}
	}
}

// TestSize keeps the per-SA state below the standard library's GCM
// (768 bytes on amd64).
func TestSize(t *testing.T) {
	if n := unsafe.Sizeof(Key{}); n > 528 {
		t.Errorf("Key is %d bytes, want at most 528", n)
	}
}

func FuzzTag(f *testing.F) {
	f.Add(make([]byte, 16), []byte("12345678"), []byte("some payload bytes"), []byte("nonce6789012"))
	f.Add(make([]byte, 32), []byte("123456789012"), make([]byte, 200), []byte("abcdefghijkl"))
	f.Fuzz(func(t *testing.T, key, aad, data, nonceIn []byte) {
		switch len(key) {
		case 16, 24, 32:
		default:
			return
		}
		var nonce [NonceSize]byte
		copy(nonce[:], nonceIn)
		want := stdTag(t, key, nonce[:], aad, data)
		for _, asm := range impls() {
			k := newKey(t, key, asm)
			var tag [TagSize]byte
			k.Tag(&tag, &nonce, aad, data)
			if !bytes.Equal(tag[:], want) {
				t.Fatalf("%s: tag %x, want %x", implName(asm), tag, want)
			}
		}
	})
}

// BenchmarkRatio times Tag and the standard library's GCM over the same
// bytes in turn, 16 tags per timed run, and reports each one's rate over its
// fastest run and the ratio: on a shared machine most runs are stretched by
// preemption, the fastest is the closest to the code's own speed.
func BenchmarkRatio(b *testing.B) {
	for _, n := range []int{64, 256, 1420, 8192, 16384} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			aad, data := make([]byte, 8), make([]byte, n)
			var nonce [NonceSize]byte
			k := newKey(b, make([]byte, 16), useAsm)
			blk, _ := aes.NewCipher(make([]byte, 16))
			g, _ := cipher.NewGCM(blk)
			whole := make([]byte, 8+n)
			var tag [TagSize]byte
			var std, ours time.Duration
			b.SetBytes(int64(2 * 16 * n))
			for b.Loop() {
				t0 := time.Now()
				for range 16 {
					g.Seal(tag[:0], nonce[:], nil, whole)
				}
				t1 := time.Now()
				for range 16 {
					k.Tag(&tag, &nonce, aad, data)
				}
				t2 := time.Now()
				if d := t1.Sub(t0); std == 0 || d < std {
					std = d
				}
				if d := t2.Sub(t1); ours == 0 || d < ours {
					ours = d
				}
			}
			b.ReportMetric(float64(16*n)/std.Seconds()/1e6, "stdlib-MB/s")
			b.ReportMetric(float64(16*n)/ours.Seconds()/1e6, "gmac-MB/s")
			b.ReportMetric(std.Seconds()/ours.Seconds(), "x-stdlib")
		})
	}
}
