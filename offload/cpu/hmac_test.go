package cpu

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"hash"
	"math/rand/v2"
	"testing"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

// cbcHMACCase is a CBC+HMAC suite and what crypto/cipher and crypto/hmac
// compute it with.
type cbcHMACCase struct {
	suite  sa.Suite
	encKey int
	block  func([]byte) (cipher.Block, error)
	hash   func() hash.Hash
}

func cbcHMACCases() []cbcHMACCase {
	var out []cbcHMACCase
	hashes := map[sa.Auth]func() hash.Hash{
		sa.AuthHMACMD5_96: md5.New, sa.AuthHMACSHA1_96: sha1.New, sa.AuthHMACSHA256_128: sha256.New,
		sa.AuthHMACSHA384_192: sha512.New384, sa.AuthHMACSHA512_256: sha512.New,
	}
	for a, h := range hashes {
		for _, c := range []struct {
			cipher sa.Cipher
			keyLen int
			block  func([]byte) (cipher.Block, error)
		}{{sa.CipherAESCBC, 16, aes.NewCipher}, {sa.CipherAESCBC, 32, aes.NewCipher}, {sa.Cipher3DES, 24, des.NewTripleDESCipher}} {
			out = append(out, cbcHMACCase{suite: sa.Suite{Cipher: c.cipher, Auth: a}, encKey: c.keyLen, block: c.block, hash: h})
		}
	}
	return out
}

// A session seals and opens CBC+HMAC as crypto/cipher's CBC modes and
// crypto/hmac do, for every hash and key size, with and without ESN, at every text
// length up to 40 blocks; and an open of a packet with one ICV bit
// flipped fails, its text left as it came.
func TestCBCHMACMatchesStandardLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range cbcHMACCases() {
		{
			for _, esn := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/key%d/esn=%v", tc.suite, tc.encKey, esn), func(t *testing.T) {
					encKey, authKey := make([]byte, tc.encKey), make([]byte, tc.suite.AuthKeyLen())
					fill(r, encKey)
					fill(r, authKey)
					s, err := NewSession(offload.SessionConfig{Suite: tc.suite, EncKey: encKey, AuthKey: authKey, ESN: esn})
					if err != nil {
						t.Fatal(err)
					}
					block, _ := tc.block(encKey)
					bs := block.BlockSize()
					icvLen := tc.suite.ICVLen()
					for blocks := 1; blocks <= 40; blocks++ {
						const head = 8 // a header that the ICV covers too
						buf := make([]byte, head+bs+blocks*bs+icvLen)
						fill(r, buf)
						op := offload.Op{
							Session: s, Dir: offload.Seal, Buf: buf,
							IV:     offload.Range{Off: head, Len: bs},
							Cipher: offload.Range{Off: head + bs, Len: blocks * bs},
							Auth:   offload.Range{Off: 0, Len: head + bs + blocks*bs},
							ICV:    offload.Range{Off: head + bs + blocks*bs, Len: icvLen},
							SeqHi:  r.Uint32(), NonceLen: uint8(bs),
						}
						copy(op.Nonce[:], buf[head:head+bs])
						want := append([]byte(nil), buf...)
						cipher.NewCBCEncrypter(block, want[head:head+bs]).CryptBlocks(want[head+bs:head+bs+blocks*bs], want[head+bs:head+bs+blocks*bs])
						m := hmac.New(tc.hash, authKey)
						m.Write(want[:head+bs+blocks*bs])
						if esn {
							m.Write(binary.BigEndian.AppendUint32(nil, op.SeqHi))
						}
						copy(want[head+bs+blocks*bs:], m.Sum(nil)[:icvLen])
						plain := append([]byte(nil), buf...)

						s.Process(&op)
						if op.Status != offload.OK || string(buf) != string(want) {
							t.Fatalf("%d blocks: seal %v, got %x, want %x", blocks, op.Status, buf, want)
						}
						op.Dir = offload.Open
						s.Process(&op)
						if n := op.ICV.Off; op.Status != offload.OK || string(buf[:n]) != string(plain[:n]) {
							t.Fatalf("%d blocks: open %v, got %x, want %x", blocks, op.Status, buf, plain)
						}
						s.Process(&offload.Op{Session: s, Dir: offload.Seal, Buf: buf, IV: op.IV, Cipher: op.Cipher, Auth: op.Auth, ICV: op.ICV, SeqHi: op.SeqHi, Nonce: op.Nonce, NonceLen: op.NonceLen})
						buf[len(buf)-1] ^= 1
						sealed := append([]byte(nil), buf...)
						s.Process(&op)
						if op.Status != offload.BadICV || string(buf) != string(sealed) {
							t.Fatalf("%d blocks: open with a flipped ICV bit: %v, text changed %v", blocks, op.Status, string(buf) != string(sealed))
						}
					}
				})
			}
		}
	}
}

// Sealing and opening CBC+HMAC allocate nothing once the shared scratch
// exists.
func TestCBCHMACAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	s, err := NewSession(offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, EncKey: make([]byte, 16), AuthKey: make([]byte, 20)})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8+16+64+12)
	op := offload.Op{Session: s, Buf: buf, IV: offload.Range{Off: 8, Len: 16}, Cipher: offload.Range{Off: 24, Len: 64},
		Auth: offload.Range{Len: 88}, ICV: offload.Range{Off: 88, Len: 12}, NonceLen: 16}
	allocs := testing.AllocsPerRun(1000, func() {
		op.Dir = offload.Seal
		s.Process(&op)
		op.Dir = offload.Open
		s.Process(&op)
	})
	if allocs != 0 || op.Status != offload.OK {
		t.Errorf("%v allocations per seal and open (status %v), want 0", allocs, op.Status)
	}
}

func fill(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// BenchmarkCBCHMAC seals and opens one packet at a time with
// aes-cbc+hmac-sha1-96, the work per packet beyond the engine's batching.
func BenchmarkCBCHMAC(b *testing.B) {
	for _, size := range []int{64, 1024} {
		s, err := NewSession(offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, EncKey: make([]byte, 16), AuthKey: make([]byte, 20)})
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 8+16+size+12)
		op := offload.Op{Session: s, Buf: buf, IV: offload.Range{Off: 8, Len: 16}, Cipher: offload.Range{Off: 24, Len: size},
			Auth: offload.Range{Len: 24 + size}, ICV: offload.Range{Off: 24 + size, Len: 12}, NonceLen: 16}
		for _, dir := range []offload.Direction{offload.Seal, offload.Open} {
			b.Run(fmt.Sprintf("%v/%d", dir, size), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					op.Dir = offload.Seal
					s.Process(&op)
					if dir == offload.Open {
						op.Dir = offload.Open
						s.Process(&op)
					}
				}
			})
		}
	}
}

// Ops on one session at once, some with its CBC modes and some over the
// block cipher while another op has them, all give the standard library's
// answer.
func TestCBCConcurrentOps(t *testing.T) {
	key, iv := make([]byte, 16), make([]byte, 16)
	fill(rand.New(rand.NewPCG(3, 4)), key)
	s, err := NewSession(offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, EncKey: key, AuthKey: make([]byte, 20)})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := aes.NewCipher(key)
	plain := make([]byte, 512)
	want := make([]byte, len(plain))
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(want, plain)
	errs := make(chan string, 8)
	for range 8 {
		go func() {
			buf := make([]byte, 16+512+12)
			for range 300 {
				clear(buf)
				op := offload.Op{Session: s, Dir: offload.Seal, Buf: buf, IV: offload.Range{Len: 16}, Cipher: offload.Range{Off: 16, Len: 512},
					Auth: offload.Range{Len: 528}, ICV: offload.Range{Off: 528, Len: 12}, NonceLen: 16}
				s.Process(&op)
				if op.Status != offload.OK || string(buf[16:528]) != string(want) {
					errs <- fmt.Sprintf("seal: %v, text differs %v", op.Status, string(buf[16:528]) != string(want))
					return
				}
				op.Dir = offload.Open
				s.Process(&op)
				if op.Status != offload.OK || string(buf[16:528]) != string(plain) {
					errs <- fmt.Sprintf("open: %v", op.Status)
					return
				}
			}
			errs <- ""
		}()
	}
	for range 8 {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}

// A session's HMAC keyed states are one allocation of exactly their size:
// a gateway holds one per SA.
func TestHMACPadsOneAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	key := make([]byte, 20)
	hashSHA1.pads(key) // the pool's scratch
	var pads string
	if n := testing.AllocsPerRun(100, func() { pads, _ = hashSHA1.pads(key) }); n != 1 {
		t.Errorf("%v allocations per keyed states, want 1", n)
	}
	if len(pads) != 2*(96-64) {
		t.Errorf("keyed states of %d bytes, want %d", len(pads), 2*(96-64))
	}
}
