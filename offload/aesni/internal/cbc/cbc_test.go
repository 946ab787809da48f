package cbc

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// impls are the kernels this build and CPU can run; the tests hold each of
// them against the standard library.
func impls() []kernel {
	var out []kernel
	for k := kernelGo; k <= best; k++ {
		out = append(out, k)
	}
	return out
}

var keySizes = []int{16, 24, 32}

// maxLen is the longest buffer the tests try: a jumbo frame and then some.
const maxLen = 9000

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func stdEncrypt(key []byte, iv *[16]byte, src []byte) []byte {
	b, _ := aes.NewCipher(key)
	out := make([]byte, len(src))
	cipher.NewCBCEncrypter(b, iv[:]).CryptBlocks(out, src)
	return out
}

func stdDecrypt(key []byte, iv *[16]byte, src []byte) []byte {
	b, _ := aes.NewCipher(key)
	out := make([]byte, len(src))
	cipher.NewCBCDecrypter(b, iv[:]).CryptBlocks(out, src)
	return out
}

func TestLayoutMatchesAssembly(t *testing.T) {
	var st lanes
	var k Key
	for _, c := range []struct {
		what      string
		got, want uintptr
	}{
		{"Key.enc", unsafe.Offsetof(k.enc), 0},
		{"lanes.in", unsafe.Offsetof(st.in), 0},
		{"lanes.out", unsafe.Offsetof(st.out), 64},
		{"lanes.keys", unsafe.Offsetof(st.keys), 128},
		{"lanes.iv", unsafe.Offsetof(st.iv), 192},
		{"lanes.pair", unsafe.Offsetof(st.pair), 320},
	} {
		if c.got != c.want {
			t.Errorf("offset of %s = %d, the assembly expects %d", c.what, c.got, c.want)
		}
	}
}

// TestKeyExpansion checks the schedules against FIPS 197 Appendix A.
func TestKeyExpansion(t *testing.T) {
	for _, c := range []struct {
		key, last string // cipher key, last round key
		rounds    int
	}{
		{"2b7e151628aed2a6abf7158809cf4f3c", "d014f9a8c9ee2589e13f0cc8b6630ca6", 10},
		{"8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b", "e98ba06f448c773c8ecc720401002202", 12},
		{"603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4", "fe4890d1e6188d0b046df344706c631e", 14},
	} {
		k, err := NewKey(mustHex(c.key))
		if err != nil {
			t.Fatal(err)
		}
		n := len(c.key) / 2
		if k.Rounds() != c.rounds {
			t.Errorf("%d-byte key: %d rounds, want %d", n, k.Rounds(), c.rounds)
		}
		last := k.enc[c.rounds*16 : c.rounds*16+16]
		if got := hex.EncodeToString(last); got != c.last {
			t.Errorf("%d-byte key: last round key %s, want %s", n, got, c.last)
		}
		if !bytes.Equal(k.dec[:16], last) || !bytes.Equal(k.dec[c.rounds*16:c.rounds*16+16], k.enc[:16]) {
			t.Errorf("%d-byte key: decryption schedule does not begin and end with the outer encryption round keys", n)
		}
	}
}

// TestKnownAnswer is NIST SP 800-38A F.2.1 and F.2.2 (CBC-AES128).
func TestKnownAnswer(t *testing.T) {
	key := mustHex("2b7e151628aed2a6abf7158809cf4f3c")
	iv := (*[16]byte)(mustHex("000102030405060708090a0b0c0d0e0f"))
	plain := mustHex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e5130c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710")
	want := mustHex("7649abac8119b246cee98e9b12e9197d5086cb9b507219ee95db113a917678b273bed6b8e3c1743b7116e69e222295163ff1caa1681fac09120eca307586e1a7")
	k, _ := NewKey(key)
	for _, im := range impls() {
		buf := bytes.Clone(plain)
		new(Encrypter).encryptBatch([]Job{{Key: k, IV: iv, Dst: buf, Src: buf}}, im)
		if !bytes.Equal(buf, want) {
			t.Errorf("%s: encrypt = %x, want %x", im, buf, want)
		}
		decrypt(k, iv, buf, buf, im)
		if !bytes.Equal(buf, plain) {
			t.Errorf("%s: decrypt = %x, want %x", im, buf, plain)
		}
	}
}

// TestEveryLength runs one-buffer encryption and decryption, in place and
// not, for every key size and every whole-block length up to maxLen.
func TestEveryLength(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, im := range impls() {
		for _, ks := range keySizes {
			key := randBytes(r, ks)
			k, _ := NewKey(key)
			for n := 0; n <= maxLen; n += BlockSize {
				iv := (*[16]byte)(randBytes(r, 16))
				ivCopy := *iv
				plain := randBytes(r, n)
				want := stdEncrypt(key, iv, plain)
				where := fmt.Sprintf("%s, %d-byte key, %d bytes", im, ks, n)

				got := make([]byte, n)
				encrypt(k, iv, got, plain, im)
				if !bytes.Equal(got, want) {
					t.Fatalf("%s: encrypt differs from crypto/cipher", where)
				}
				inplace := bytes.Clone(plain)
				new(Encrypter).encryptBatch([]Job{{Key: k, IV: iv, Dst: inplace, Src: inplace}}, im)
				if !bytes.Equal(inplace, want) {
					t.Fatalf("%s: in-place batch of one differs from crypto/cipher", where)
				}

				dec := make([]byte, n)
				decrypt(k, iv, dec, want, im)
				if !bytes.Equal(dec, plain) {
					t.Fatalf("%s: decrypt differs from crypto/cipher", where)
				}
				decrypt(k, iv, inplace, inplace, im)
				if !bytes.Equal(inplace, plain) {
					t.Fatalf("%s: in-place decrypt differs from crypto/cipher", where)
				}
				if *iv != ivCopy {
					t.Fatalf("%s: IV was written", where)
				}
			}
		}
	}
}

// TestBatches encrypts batches of 1 to 40 buffers (more than the lanes) of
// random lengths, key sizes and keys (some shared), in place or not, with
// one Encrypter, and compares each buffer with crypto/cipher.
func TestBatches(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var keys [6]*Key
	var raw [6][]byte
	for i := range keys {
		raw[i] = randBytes(r, keySizes[i%3])
		keys[i], _ = NewKey(raw[i])
	}
	for _, im := range impls() {
		var e Encrypter
		for round := 0; round < 12; round++ {
			for n := 1; n <= 40; n++ {
				jobs := make([]Job, n)
				want := make([][]byte, n)
				for i := range jobs {
					ki := r.IntN(len(keys))
					length := BlockSize * r.IntN(maxLen/BlockSize+1)
					if r.IntN(4) == 0 {
						length = BlockSize * r.IntN(8) // short ones finish early and get refilled
					}
					iv := (*[16]byte)(randBytes(r, 16))
					src := randBytes(r, length)
					want[i] = stdEncrypt(raw[ki], iv, src)
					dst := src
					if r.IntN(2) == 0 {
						dst = make([]byte, length+r.IntN(3)*BlockSize)
					}
					jobs[i] = Job{Key: keys[ki], IV: iv, Dst: dst, Src: src}
				}
				e.encryptBatch(jobs, im)
				for i, j := range jobs {
					if !bytes.Equal(j.Dst[:len(j.Src)], want[i]) {
						t.Fatalf("%s: batch of %d, job %d (%d bytes, %d rounds): differs from crypto/cipher", im, n, i, len(j.Src), j.Key.Rounds())
					}
				}
			}
		}
	}
}

// TestUnaligned puts buffers at every offset from a 16-byte boundary, as
// ESP payloads behind headers of any length are.
func TestUnaligned(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	key := randBytes(r, 32)
	k, _ := NewKey(key)
	for _, im := range impls() {
		var e Encrypter
		for shift := 0; shift < BlockSize; shift++ {
			jobs := make([]Job, 11)
			want := make([][]byte, len(jobs))
			for i := range jobs {
				n := BlockSize * (1 + r.IntN(300))
				src := randBytes(r, n+shift)[shift:]
				iv := (*[16]byte)(randBytes(r, 16))
				want[i] = stdEncrypt(key, iv, src)
				jobs[i] = Job{Key: k, IV: iv, Dst: src, Src: src}
			}
			e.encryptBatch(jobs, im)
			for i, j := range jobs {
				if !bytes.Equal(j.Dst, want[i]) {
					t.Fatalf("%s: buffers %d bytes past a 16-byte boundary: job %d differs from crypto/cipher", im, shift, i)
				}
				plain := stdDecrypt(key, j.IV, j.Dst)
				decrypt(k, j.IV, j.Dst, j.Dst, im)
				if !bytes.Equal(j.Dst, plain) {
					t.Fatalf("%s: buffer %d bytes past a 16-byte boundary: decrypt differs from crypto/cipher", im, shift)
				}
			}
		}
	}
}

// TestReusedKey refills a Key that an Encrypter has used, between batches.
func TestReusedKey(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, im := range impls() {
		var e Encrypter
		k := new(Key)
		for round := 0; round < 4; round++ {
			key := randBytes(r, keySizes[round%3])
			if err := k.Init(key); err != nil {
				t.Fatal(err)
			}
			jobs := make([]Job, 12)
			want := make([][]byte, len(jobs))
			for i := range jobs {
				iv := (*[16]byte)(randBytes(r, 16))
				src := randBytes(r, 16*(1+r.IntN(40)))
				want[i] = stdEncrypt(key, iv, src)
				jobs[i] = Job{Key: k, IV: iv, Dst: src, Src: src}
			}
			e.encryptBatch(jobs, im)
			for i, j := range jobs {
				if !bytes.Equal(j.Dst, want[i]) {
					t.Fatalf("%s: key refilled %d times: job %d differs from crypto/cipher", im, round, i)
				}
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	k, _ := NewKey(make([]byte, 16))
	var iv [16]byte
	buf := make([]byte, 64)
	for _, c := range []struct {
		name     string
		k        *Key
		iv       *[16]byte
		dst, src []byte
		want     string
	}{
		{"nil key", nil, &iv, buf, buf, "no key"},
		{"zero key", new(Key), &iv, buf, buf, "not initialised"},
		{"nil iv", k, nil, buf, buf, "no IV"},
		{"partial block", k, &iv, buf[:17], buf[:17], "not a whole number"},
		{"short dst", k, &iv, buf[:16], buf[32:64], "shorter"},
		{"inexact overlap", k, &iv, buf[16:48], buf[:32], "overlap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := bytes.Clone(buf)
			for what, err := range map[string]error{
				"Decrypt":      c.k.Decrypt(c.iv, c.dst, c.src),
				"Encrypt":      c.k.Encrypt(c.iv, c.dst, c.src),
				"EncryptBatch": new(Encrypter).EncryptBatch([]Job{{Key: k, IV: &iv, Dst: make([]byte, 16), Src: make([]byte, 16)}, {Key: c.k, IV: c.iv, Dst: c.dst, Src: c.src}}),
			} {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: error %v, want one saying %q", what, err, c.want)
				}
			}
			if !bytes.Equal(buf, before) {
				t.Error("a refused call wrote to the buffer")
			}
		})
	}
	for _, n := range []int{0, 8, 15, 17, 33} {
		if _, err := NewKey(make([]byte, n)); err == nil {
			t.Errorf("NewKey accepted a %d-byte key", n)
		}
	}
}

func TestNoAllocations(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	k, _ := NewKey(randBytes(r, 16))
	iv := (*[16]byte)(randBytes(r, 16))
	jobs := make([]Job, 12)
	for i := range jobs {
		b := randBytes(r, 16*(i+1))
		jobs[i] = Job{Key: k, IV: iv, Dst: b, Src: b}
	}
	buf := randBytes(r, 1024)
	var e Encrypter
	if n := testing.AllocsPerRun(50, func() { _ = e.EncryptBatch(jobs) }); n != 0 {
		t.Errorf("EncryptBatch allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(50, func() { _ = k.Decrypt(iv, buf, buf) }); n != 0 {
		t.Errorf("Decrypt allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(50, func() { _ = k.Encrypt(iv, buf, buf) }); n != 0 {
		t.Errorf("Encrypt allocates %v times per call", n)
	}
}

// FuzzDecrypt decrypts arbitrary data under an arbitrary key with every
// implementation and compares with crypto/cipher.
func FuzzDecrypt(f *testing.F) {
	f.Add(make([]byte, 16), make([]byte, 16), make([]byte, 128))
	f.Add(make([]byte, 32), make([]byte, 16), make([]byte, 16*9))
	f.Fuzz(func(t *testing.T, key, iv, data []byte) {
		if _, err := NewKey(key); err != nil || len(iv) != 16 {
			return
		}
		data = data[:len(data)/BlockSize*BlockSize]
		want := stdDecrypt(key, (*[16]byte)(iv), data)
		k, _ := NewKey(key)
		for _, im := range impls() {
			got := bytes.Clone(data)
			decrypt(k, (*[16]byte)(iv), got, got, im)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: decrypt of %d bytes differs from crypto/cipher", im, len(data))
			}
		}
	})
}

// FuzzEncryptBatch splits data into a batch of buffers whose lengths and
// key sizes come from shape, encrypts them, and compares with crypto/cipher.
func FuzzEncryptBatch(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, make([]byte, 32), make([]byte, 1024))
	f.Add([]byte{0, 40, 1, 200}, make([]byte, 32), make([]byte, 4096))
	f.Fuzz(func(t *testing.T, shape, keyMaterial, data []byte) {
		if len(keyMaterial) < 32 || len(shape) > 32 {
			return
		}
		type ref struct {
			key []byte
			iv  [16]byte
			src []byte
		}
		var refs []ref
		var jobs []Job
		for i, s := range shape {
			n := int(s) % 64 * BlockSize
			if n > len(data) {
				n = len(data) / BlockSize * BlockSize
			}
			key := keyMaterial[:keySizes[i%3]]
			k, _ := NewKey(key)
			var iv [16]byte
			iv[0] = byte(i)
			src := bytes.Clone(data[:n])
			data = data[n:]
			refs = append(refs, ref{key, iv, bytes.Clone(src)})
			jobs = append(jobs, Job{Key: k, IV: &refs[len(refs)-1].iv, Dst: src, Src: src})
		}
		for i := range jobs {
			jobs[i].IV = &refs[i].iv
		}
		for _, im := range impls() {
			for i := range jobs {
				copy(jobs[i].Src, refs[i].src)
			}
			new(Encrypter).encryptBatch(jobs, im)
			for i, j := range jobs {
				if want := stdEncrypt(refs[i].key, &refs[i].iv, refs[i].src); !bytes.Equal(j.Dst, want) {
					t.Fatalf("%s: job %d of %d (%d bytes) differs from crypto/cipher", im, i, len(jobs), len(j.Src))
				}
			}
		}
	})
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestImplementation(t *testing.T) {
	t.Logf("CBC kernels: %s (tested: %v)", Implementation(), impls())
}

// TestInPlace holds EncryptInPlace and DecryptInPlace against Encrypt and
// Decrypt at every length up to 64 blocks and every key size, and checks
// they refuse what those refuse.
func TestInPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for _, keyLen := range []int{16, 24, 32} {
		k, err := NewKey(randBytes(r, keyLen))
		if err != nil {
			t.Fatal(err)
		}
		iv := (*[BlockSize]byte)(randBytes(r, BlockSize))
		for n := 0; n <= 64*BlockSize; n += BlockSize {
			plain := randBytes(r, n)
			want := make([]byte, n)
			if err := k.Encrypt(iv, want, plain); err != nil {
				t.Fatal(err)
			}
			buf := bytes.Clone(plain)
			if err := k.EncryptInPlace(iv, buf); err != nil || !bytes.Equal(buf, want) {
				t.Fatalf("%d-byte key, %d bytes: EncryptInPlace differs from Encrypt (%v)", keyLen, n, err)
			}
			if err := k.DecryptInPlace(iv, buf); err != nil || !bytes.Equal(buf, plain) {
				t.Fatalf("%d-byte key, %d bytes: DecryptInPlace does not undo it (%v)", keyLen, n, err)
			}
		}
	}
	var unset Key
	iv := new([BlockSize]byte)
	for _, c := range []struct {
		name string
		k    *Key
		iv   *[BlockSize]byte
		buf  []byte
		want string
	}{
		{"nil key", nil, iv, make([]byte, 16), "no key"},
		{"unset key", &unset, iv, make([]byte, 16), "not initialised"},
		{"no IV", mustKey(t), nil, make([]byte, 16), "no IV"},
		{"partial block", mustKey(t), iv, make([]byte, 17), "whole number"},
	} {
		for _, fn := range []func(*Key, *[BlockSize]byte, []byte) error{(*Key).EncryptInPlace, (*Key).DecryptInPlace} {
			if err := fn(c.k, c.iv, c.buf); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
			}
		}
	}
}

func mustKey(t *testing.T) *Key {
	k, err := NewKey(make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestEncryptBlock(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{16, 24, 32} {
		key := randBytes(r, n)
		var enc [ScheduleLen]byte
		rounds, err := ExpandEncrypt(&enc, key)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := aes.NewCipher(key)
		for range 20 {
			var src, got, want [BlockSize]byte
			copy(src[:], randBytes(r, BlockSize))
			EncryptBlock(&enc, rounds, &got, &src)
			b.Encrypt(want[:], src[:])
			if got != want {
				t.Fatalf("AES-%d: %x, want %x", n*8, got, want)
			}
		}
	}
	if _, err := ExpandEncrypt(new([ScheduleLen]byte), make([]byte, 20)); err == nil {
		t.Error("a 20-byte key was taken")
	}
}
