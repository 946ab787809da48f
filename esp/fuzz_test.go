package esp_test

// Fuzz targets for the open path. FuzzOpen hands arbitrary bytes to Open as
// an ESP packet: it must never panic, and every input must come out counted
// under one reason. FuzzOpenPlaintext gets past the ICV: it seals arbitrary
// plaintext (payload, padding and trailer as the fuzzer writes them) with a
// valid ICV, so the checks behind the ICV — padding, next header, the inner
// packet's own length, transport header restore — see hostile input.
//
//	go test ./esp -run '^$' -fuzz FuzzOpen$ -fuzztime 30s
//	go test ./esp -run '^$' -fuzz FuzzOpenPlaintext -fuzztime 30s

import (
	"crypto/rand"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

var fuzzSuites = []sa.Suite{
	{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96},
	{Cipher: sa.Cipher3DES, Auth: sa.AuthHMACMD5_96},
	{Cipher: sa.CipherAESCTR, Auth: sa.AuthHMACSHA256_128},
	{Cipher: sa.CipherNull, Auth: sa.AuthHMACSHA512_256},
	{Cipher: sa.CipherAESGCM16},
}

// fuzzSAs builds one receiving SA per suite and mode (ESN on for half).
func fuzzSAs(t testing.TB) []*esp.SA {
	var out []*esp.SA
	for i, suite := range fuzzSuites {
		for _, mode := range []sa.Mode{sa.Tunnel, sa.Transport} {
			cfg := testSA(t, suite, mode, i%2 == 1)
			cfg.ESN = i%2 == 0
			s, err := esp.NewSA(cfg, cpu.New(), esp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
	}
	return out
}

// openCounted opens data with s (transport mode: behind an IPv4 header) and
// checks the outcome is OK or counted under exactly the reason returned.
func openCounted(t *testing.T, s *esp.SA, data []byte) esp.Reason {
	hdr := 0
	pkt := data
	if s.Config.Mode == sa.Transport {
		pkt = append(ipv4(50, len(data)), data...)
		hdr = 20
	}
	before := s.Snapshot()
	out, r := openOne(t, s, pkt, hdr)
	after := s.Snapshot()
	if r == esp.OK {
		if after.OpenedPackets != before.OpenedPackets+1 {
			t.Fatalf("opened packet not counted")
		}
		if len(out) > len(pkt) {
			t.Fatalf("opened %d bytes out of %d", len(out), len(pkt))
		}
		return r
	}
	if after.Drops[r.String()] != before.Drops[r.String()]+1 {
		t.Fatalf("drop %v not counted: %v → %v", r, before.Drops, after.Drops)
	}
	return r
}

func FuzzOpen(f *testing.F) {
	sas := fuzzSAs(f)
	// Seeds: real packets of every suite, and short garbage.
	for i, suite := range fuzzSuites {
		tx, _ := newPair(f, testSA(f, suite, sa.Tunnel, i%2 == 1))
		buf := make([]byte, esp.Headroom+100+esp.Tailroom)
		inner := udpPacket(false, 50)
		copy(buf[esp.Headroom:], inner)
		p := &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(inner)}
		tx.PrepareSeal(p)
		offload.Process(&p.Op)
		f.Add(uint8(i), p.Data())
	}
	f.Add(uint8(0), []byte{})
	f.Add(uint8(3), []byte{0, 0, 0x10, 0x01, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		s := sas[int(which)%len(sas)]
		if r := openCounted(t, s, data); r == esp.OK {
			t.Fatalf("random bytes opened on %v", s.Config)
		}
	})
}

func FuzzOpenPlaintext(f *testing.F) {
	sas := fuzzSAs(f)
	f.Add(uint8(0), udpPacket(false, 10), uint8(4))
	f.Add(uint8(1), udpPacket(true, 10), uint8(41))
	f.Add(uint8(2), []byte{1, 2, 3, 59}, uint8(59))
	f.Fuzz(func(t *testing.T, which uint8, plaintext []byte, nh uint8) {
		s := sas[int(which)%len(sas)]
		// Align the fuzzer's bytes to the cipher block and end them with
		// the fuzzer's next header; the pad length byte is the fuzzer's.
		b := s.Config.Suite.BlockLen()
		pt := append([]byte(nil), plaintext...)
		pt = append(pt, nh)
		for len(pt)%b != 0 || len(pt) < 2 {
			pt = append([]byte{0}, pt...)
		}
		pkt := forge(t, s.Config, uint32(s.HighestAccepted()+1), pt)
		r := openCounted(t, s, pkt)
		switch r {
		case esp.OK, esp.BadPadding, esp.BadNextHeader, esp.Dummy:
		default:
			t.Fatalf("valid ICV, got %v", r)
		}
	})
}

// TestOpenRandomBytes runs a bounded burst of random inputs on every run, in
// addition to the fuzz targets' seed corpora.
func TestOpenRandomBytes(t *testing.T) {
	sas := fuzzSAs(t)
	buf := make([]byte, 300)
	for i := 0; i < 5000; i++ {
		s := sas[i%len(sas)]
		n := i % len(buf)
		rand.Read(buf[:n])
		if i%3 == 0 && n >= 4 {
			copy(buf, []byte{0, 0, 0x10, 0x01}) // the SA's own SPI
		}
		if r := openCounted(t, s, buf[:n]); r == esp.OK {
			t.Fatalf("random bytes opened")
		}
	}
}
