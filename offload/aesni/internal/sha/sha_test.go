package sha

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"math/rand/v2"
	"strings"
	"testing"
)

// kernels lists the kernels this CPU and build can run.
func kernels() []kernel {
	var ks []kernel
	for k := kernelGo; k <= best; k++ {
		ks = append(ks, k)
	}
	return ks
}

func newStd(h Hash) func() hash.Hash {
	if h == SHA1 {
		return sha1.New
	}
	return sha256.New
}

// want is crypto/hmac's answer for a job.
func want(h Hash, key, data []byte, esn bool, seqHi uint32) []byte {
	m := hmac.New(newStd(h), key)
	m.Write(data)
	if esn {
		m.Write(binary.BigEndian.AppendUint32(nil, seqHi))
	}
	return m.Sum(nil)
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestKnownAnswers checks RFC 2202's HMAC-SHA1 and RFC 4231's HMAC-SHA256
// test cases, alone and as one batch, on every kernel.
func TestKnownAnswers(t *testing.T) {
	rep := func(b byte, n int) string { return strings.Repeat(hex.EncodeToString([]byte{b}), n) }
	tests := []struct {
		name      string
		hash      Hash
		key, data string // hex
		mac       string // hex, truncated as the RFC gives it
	}{
		{"rfc2202-1", SHA1, rep(0x0b, 20), hex.EncodeToString([]byte("Hi There")), "b617318655057264e28bc0b6fb378c8ef146be00"},
		{"rfc2202-2", SHA1, hex.EncodeToString([]byte("Jefe")), hex.EncodeToString([]byte("what do ya want for nothing?")), "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"},
		{"rfc2202-3", SHA1, rep(0xaa, 20), rep(0xdd, 50), "125d7342b9ac11cd91a39af48aa17b4f63f175d3"},
		{"rfc2202-4", SHA1, "0102030405060708090a0b0c0d0e0f10111213141516171819", rep(0xcd, 50), "4c9007f4026250c6bc8414f9bf50c86c2d7235da"},
		{"rfc2202-5", SHA1, rep(0x0c, 20), hex.EncodeToString([]byte("Test With Truncation")), "4c1a03424b55e07fe7f27be1d58bb9324a9a5a04"},
		{"rfc2202-6", SHA1, rep(0xaa, 80), hex.EncodeToString([]byte("Test Using Larger Than Block-Size Key - Hash Key First")), "aa4ae5e15272d00e95705637ce8a3b55ed402112"},
		{"rfc2202-7", SHA1, rep(0xaa, 80), hex.EncodeToString([]byte("Test Using Larger Than Block-Size Key and Larger Than One Block-Size Data")), "e8e99d0f45237d786d6bbaa7965c7808bbff1a91"},
		{"rfc4231-1", SHA256, rep(0x0b, 20), "4869205468657265", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{"rfc4231-2", SHA256, "4a656665", "7768617420646f2079612077616e7420666f72206e6f7468696e673f", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
		{"rfc4231-3", SHA256, rep(0xaa, 20), rep(0xdd, 50), "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
		{"rfc4231-4", SHA256, "0102030405060708090a0b0c0d0e0f10111213141516171819", rep(0xcd, 50), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
		{"rfc4231-5", SHA256, rep(0x0c, 20), "546573742057697468205472756e636174696f6e", "a3b6167473100ee06e0c796c2955552b"},
		{"rfc4231-6", SHA256, rep(0xaa, 131), "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579202d2048617368204b6579204669727374", "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
		{"rfc4231-7", SHA256, rep(0xaa, 131), "5468697320697320612074657374207573696e672061206c6172676572207468616e20626c6f636b2d73697a65206b657920616e642061206c6172676572207468616e20626c6f636b2d73697a6520646174612e20546865206b6579206e6565647320746f20626520686173686564206265666f7265206265696e6720757365642062792074686520484d414320616c676f726974686d2e", "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
	}
	for _, kern := range kernels() {
		jobs := make([]Job, len(tests))
		sums := make([][MaxSize]byte, len(tests))
		for i, tt := range tests {
			k, err := NewKey(tt.hash, unhex(t, tt.key))
			if err != nil {
				t.Fatal(err)
			}
			jobs[i] = Job{Key: k, Data: unhex(t, tt.data), Sum: &sums[i]}
			var one [MaxSize]byte
			j := jobs[i]
			j.Sum = &one
			mac(&j, kern)
			if w := unhex(t, tt.mac); !bytes.Equal(one[:len(w)], w) {
				t.Errorf("%s %s alone: %x, want %x", kern, tt.name, one[:len(w)], w)
			}
		}
		var m Macer
		m.batch(jobs, [3]bool{false, true, true}, kern)
		for i, tt := range tests {
			if w := unhex(t, tt.mac); !bytes.Equal(sums[i][:len(w)], w) {
				t.Errorf("%s %s in a batch: %x, want %x", kern, tt.name, sums[i][:len(w)], w)
			}
		}
	}
}

// TestEveryLength compares every data length 0-2048, with and without the
// ESN trailer, with crypto/hmac, on every kernel, one stream and as pairs
// of lanes (each length beside the next, so the lanes differ by one byte).
func TestEveryLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 2049)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, h := range []Hash{SHA1, SHA256} {
		key := data[:20+int(h)*7]
		k, err := NewKey(h, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, kern := range kernels() {
			for _, esn := range []bool{false, true} {
				var m Macer
				var sums [2][MaxSize]byte
				for n := 0; n <= 2048; n++ {
					seqHi := uint32(n) * 0x01010101
					w := want(h, key, data[:n], esn, seqHi)
					j := Job{Key: k, Data: data[:n], ESN: esn, SeqHi: seqHi, Sum: &sums[0]}
					mac(&j, kern)
					if !bytes.Equal(sums[0][:len(w)], w) {
						t.Fatalf("%s %s esn=%v length %d alone: %x, want %x", h, kern, esn, n, sums[0][:len(w)], w)
					}
					jobs := []Job{
						{Key: k, Data: data[1 : n+1], ESN: esn, SeqHi: seqHi, Sum: &sums[0]},
						{Key: k, Data: data[:min(n+1, 2048)], ESN: esn, SeqHi: ^seqHi, Sum: &sums[1]},
					}
					var has [3]bool
					has[h] = true
					m.batch(jobs, has, kern)
					for i, j := range jobs {
						w := want(h, key, j.Data, esn, j.SeqHi)
						if !bytes.Equal(sums[i][:len(w)], w) {
							t.Fatalf("%s %s esn=%v length %d lane %d: %x, want %x", h, kern, esn, len(j.Data), i, sums[i][:len(w)], w)
						}
					}
					// Eight lanes: lengths n, n+1, …, n+7 (the widest
					// kernel's lanes all busy, then retiring one by one).
					var sums8 [Lanes][MaxSize]byte
					jobs8 := make([]Job, 0, Lanes)
					for i := range Lanes {
						d := data[i : i+min(n+i, 2048-i)]
						jobs8 = append(jobs8, Job{Key: k, Data: d, ESN: esn, SeqHi: seqHi + uint32(i), Sum: &sums8[i]})
					}
					m.batch(jobs8, has, kern)
					for i, j := range jobs8 {
						w := want(h, key, j.Data, esn, j.SeqHi)
						if !bytes.Equal(sums8[i][:len(w)], w) {
							t.Fatalf("%s %s esn=%v length %d, lane %d of 8: %x, want %x", h, kern, esn, len(j.Data), i, sums8[i][:len(w)], w)
						}
					}
				}
			}
		}
	}
}

// TestBatches runs batches of every size 1-40 of random lengths, keys,
// hashes and ESN trailers through MACBatch and each kernel.
func TestBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 40*2100)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	type keyed struct {
		raw []byte
		k   *Key
	}
	var keys []keyed
	for i, n := range []int{0, 1, 20, 32, 64, 65, 100} {
		for _, h := range []Hash{SHA1, SHA256} {
			raw := buf[i*7 : i*7+n]
			k, err := NewKey(h, raw)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, keyed{raw, k})
		}
	}
	var m Macer
	for _, kern := range kernels() {
		for n := 1; n <= 40; n++ {
			for round := range 5 {
				jobs := make([]Job, n)
				raws := make([][]byte, n)
				sums := make([][MaxSize]byte, n)
				var has [3]bool
				for i := range jobs {
					kk := keys[rng.IntN(len(keys))]
					if round == 0 {
						kk = keys[2] // one key, one hash
					}
					size := rng.IntN(2049)
					if round == 1 {
						size = 64 * rng.IntN(33) // whole blocks only
					}
					off := i * 2100
					jobs[i] = Job{Key: kk.k, Data: buf[off : off+size], ESN: rng.IntN(2) == 0, SeqHi: rng.Uint32(), Sum: &sums[i]}
					raws[i] = kk.raw
					has[kk.k.hash] = true
				}
				m.batch(jobs, has, kern)
				for i, j := range jobs {
					w := want(j.Key.hash, raws[i], j.Data, j.ESN, j.SeqHi)
					if !bytes.Equal(sums[i][:len(w)], w) {
						t.Fatalf("%s batch of %d, job %d (%s, %d bytes, esn=%v): %x, want %x", kern, n, i, j.Key.hash, len(j.Data), j.ESN, sums[i][:len(w)], w)
					}
				}
			}
		}
	}
}

func TestErrors(t *testing.T) {
	var sum [MaxSize]byte
	if _, err := NewKey(Hash(9), nil); err == nil || !strings.Contains(err.Error(), "unknown hash") {
		t.Errorf("NewKey with hash 9: %v, want an unknown hash error", err)
	}
	var unset Key
	if err := unset.MAC(&sum, nil, false, 0); err == nil || !strings.Contains(err.Error(), "not initialised") {
		t.Errorf("MAC with a zero Key: %v", err)
	}
	k, _ := NewKey(SHA1, []byte("k"))
	var m Macer
	err := m.MACBatch([]Job{{Key: k, Sum: &sum}, {Key: k}})
	if err == nil || !strings.Contains(err.Error(), "job 1 of 2: no place for the sum") {
		t.Errorf("MACBatch with no Sum: %v", err)
	}
	if err := m.MACBatch([]Job{{Sum: &sum}}); err == nil || !strings.Contains(err.Error(), "job 0 of 1: no key") {
		t.Errorf("MACBatch with no Key: %v", err)
	}
}

// TestNoAllocs checks that MAC and MACBatch allocate nothing.
func TestNoAllocs(t *testing.T) {
	k, _ := NewKey(SHA256, []byte("key"))
	data := make([]byte, 1500)
	var m Macer
	sums := make([][MaxSize]byte, 8)
	jobs := make([]Job, 8)
	for i := range jobs {
		jobs[i] = Job{Key: k, Data: data[:1400-i*100], ESN: true, Sum: &sums[i]}
	}
	if n := testing.AllocsPerRun(100, func() { _ = k.MAC(&sums[0], data, true, 1) }); n != 0 {
		t.Errorf("MAC: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = m.MACBatch(jobs) }); n != 0 {
		t.Errorf("MACBatch: %v allocations, want 0", n)
	}
}

// TestImplementation checks that the assembly runs where the CPU has the
// SHA extensions, so that the tests above test it.
func TestImplementation(t *testing.T) {
	t.Logf("implementation: %s", Implementation())
	if hasSHAExtensions() && !Accelerated() {
		t.Errorf("the CPU has the SHA extensions but the implementation is %s", Implementation())
	}
}

// FuzzMAC holds a batch built from the input (data split into up to 12
// packets, each with or without the ESN trailer) against crypto/hmac.
func FuzzMAC(f *testing.F) {
	f.Add([]byte("key"), []byte("some data to split into packets"), uint32(7), byte(3))
	f.Add(bytes.Repeat([]byte{0xaa}, 100), bytes.Repeat([]byte{1}, 3000), uint32(0xffffffff), byte(0xff))
	f.Fuzz(func(t *testing.T, key, data []byte, seqHi uint32, shape byte) {
		n := 1 + int(shape)%12
		var m Macer
		for _, h := range []Hash{SHA1, SHA256} {
			k, err := NewKey(h, key)
			if err != nil {
				t.Fatal(err)
			}
			jobs := make([]Job, n)
			sums := make([][MaxSize]byte, n)
			for i := range jobs {
				part := data[i*len(data)/n : (i+1)*len(data)/n]
				jobs[i] = Job{Key: k, Data: part, ESN: (int(shape)>>i)&1 == 1, SeqHi: seqHi + uint32(i), Sum: &sums[i]}
			}
			if err := m.MACBatch(jobs); err != nil {
				t.Fatal(err)
			}
			for i, j := range jobs {
				w := want(h, key, j.Data, j.ESN, j.SeqHi)
				if !bytes.Equal(sums[i][:len(w)], w) {
					t.Fatalf("%s job %d of %d (%d bytes, esn=%v): %x, want %x", h, i, n, len(j.Data), j.ESN, sums[i][:len(w)], w)
				}
				var one [MaxSize]byte
				if err := k.MAC(&one, j.Data, j.ESN, j.SeqHi); err != nil || !bytes.Equal(one[:len(w)], w) {
					t.Fatalf("%s MAC of job %d: %x, want %x (%v)", h, i, one[:len(w)], w, err)
				}
			}
		}
	})
}
