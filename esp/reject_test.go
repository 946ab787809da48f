package esp_test

// Every way a packet can be wrong yields its own reason: flipped bits
// anywhere, truncation, bad padding and next headers behind a valid ICV,
// expired SAs, sequence number exhaustion, and ESN across 2^32.

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// sealN seals n packets of size bytes with s and returns the ESP packets.
func sealN(t *testing.T, s *esp.SA, n, size int, v6 bool) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range out {
		out[i] = sealOne(t, s, udpPacket(v6, size))
	}
	return out
}

// windowModel is the reference anti-replay window: every number seen, and
// the highest.
type windowModel struct {
	size    uint64
	highest uint64
	seen    map[uint64]bool
}

func newWindowModel(size int) *windowModel {
	return &windowModel{size: uint64(size), seen: map[uint64]bool{}}
}

// verdict is what the model says of seq, without recording it.
func (m *windowModel) verdict(seq uint64) esp.Reason {
	switch {
	case seq == 0:
		return esp.OutsideWindow
	case seq > m.highest:
		return esp.OK
	case m.highest-seq >= m.size:
		return esp.OutsideWindow
	case m.seen[seq]:
		return esp.Replay
	}
	return esp.OK
}

func (m *windowModel) accept(seq uint64) {
	m.seen[seq] = true
	m.highest = max(m.highest, seq)
}

// TestFlippedBitsRejected flips every bit of a sealed packet, one at a
// time, and checks the reason: the SPI no longer finds the SA, a sequence
// number the window takes fails the ICV (one it does not take is a replay or
// outside the window), and every other bit fails the ICV.
func TestFlippedBitsRejected(t *testing.T) {
	for _, suite := range cpu.Suites() {
		t.Run(suite.String(), func(t *testing.T) {
			cfg := testSA(t, suite, sa.Tunnel, false)
			cfg.ReplayWindow = 32
			tx, rx := newPair(t, cfg)
			sad, err := sa.NewSAD([]*sa.SA{cfg})
			if err != nil {
				t.Fatal(err)
			}
			pkts := sealN(t, tx, 100, 61, false)
			model := newWindowModel(cfg.ReplayWindow)
			// Accept 1…99 except 70, so the window holds both seen and unseen numbers.
			for i, p := range pkts[:99] {
				if i+1 == 70 {
					continue
				}
				if _, r := openOne(t, rx, p, 0); r != esp.OK {
					t.Fatalf("open seq %d: %v", i+1, r)
				}
				model.accept(uint64(i + 1))
			}
			for _, target := range []int{70, 100} {
				orig := pkts[target-1]
				for bit := 0; bit < len(orig)*8; bit++ {
					pkt := append([]byte(nil), orig...)
					pkt[bit/8] ^= 1 << (bit % 8)
					spi, _ := esp.SPIOf(pkt)
					if bit < 32 {
						if sad.Lookup(spi) != nil || sad.LookupDst(spi, cfg.Dst) != nil {
							t.Fatalf("bit %d: flipped SPI %#x still finds an SA", bit, spi)
						}
						continue
					}
					if sad.Lookup(spi) != cfg {
						t.Fatalf("bit %d: SPI %#x does not find the SA", bit, spi)
					}
					s := rx
					var want esp.Reason
					switch {
					case bit < 64:
						want = model.verdict(uint64(binary.BigEndian.Uint32(pkt[4:8])))
						if want == esp.OK {
							want = esp.BadICV
						}
					default:
						want = esp.BadICV
					}
					if _, got := openOne(t, s, pkt, 0); got != want {
						t.Fatalf("seq %d bit %d flipped: %v, want %v", target, bit, got, want)
					}
				}
			}
			// Nothing forged moved the window: both targets still open.
			for _, target := range []int{70, 100} {
				if _, r := openOne(t, rx, pkts[target-1], 0); r != esp.OK {
					t.Fatalf("seq %d after the forgeries: %v", target, r)
				}
			}
			snap := rx.Snapshot()
			if snap.Drops["bad-icv"] == 0 || snap.OpenedPackets != 100 {
				t.Fatalf("counters: %+v", snap)
			}
		})
	}
}

func TestTruncatedRejected(t *testing.T) {
	for _, suite := range cpu.Suites() {
		t.Run(suite.String(), func(t *testing.T) {
			tx, rx := newPair(t, testSA(t, suite, sa.Tunnel, true))
			pkt := sealOne(t, tx, udpPacket(true, 100))
			for n := 0; n < len(pkt); n++ {
				_, r := openOne(t, rx, pkt[:n], 0)
				if r != esp.Truncated && r != esp.BadICV {
					t.Fatalf("truncated to %d of %d bytes: %v, want truncated or bad-icv", n, len(pkt), r)
				}
				if n < esp.HeaderLen+suite.IVLen()+2+suite.ICVLen() && r != esp.Truncated {
					t.Fatalf("%d bytes, shorter than any packet: %v", n, r)
				}
			}
			if _, r := openOne(t, rx, pkt, 0); r != esp.OK {
				t.Fatalf("whole packet after the truncations: %v", r)
			}
		})
	}
}

// forge seals a hand-built ESP plaintext (payload, padding, pad length and
// next header as given) with a valid ICV under cfg's keys, so that the open
// path gets past the ICV to the checks behind it.
func forge(t *testing.T, cfg *sa.SA, seq uint32, plaintext []byte) []byte {
	t.Helper()
	sess, err := cpu.NewSession(offload.SessionConfig{Suite: cfg.Suite, EncKey: cfg.EncKey, AuthKey: cfg.AuthKey, ESN: cfg.ESN})
	if err != nil {
		t.Fatal(err)
	}
	ivLen, icvLen := cfg.Suite.IVLen(), cfg.Suite.ICVLen()
	pkt := make([]byte, esp.HeaderLen+ivLen+len(plaintext)+icvLen)
	binary.BigEndian.PutUint32(pkt, cfg.SPI)
	binary.BigEndian.PutUint32(pkt[4:], seq)
	rand.Read(pkt[esp.HeaderLen : esp.HeaderLen+ivLen])
	copy(pkt[esp.HeaderLen+ivLen:], plaintext)
	var op offload.Op
	layout := esp.NewLayout(cfg.Suite, cfg.EncKey, cfg.ESN)
	layout.Op(&op, sess, offload.Seal, pkt, 0)
	sess.Process(&op)
	if op.Status != offload.OK {
		t.Fatalf("forge: %v", op.Status)
	}
	return pkt
}

// trailer pads payload to the suite's block with the given padding bytes
// (nil: the correct 1, 2, 3 …) and appends pad length and next header.
func trailer(suite sa.Suite, payload []byte, pad []byte, nh byte) []byte {
	b := suite.BlockLen()
	n := (b - (len(payload)+2)%b) % b
	if pad == nil {
		pad = make([]byte, n)
		for i := range pad {
			pad[i] = byte(i + 1)
		}
	}
	out := append(append([]byte(nil), payload...), pad...)
	return append(out, byte(len(pad)), nh)
}

func TestPaddingAndNextHeaderBehindAValidICV(t *testing.T) {
	v4 := udpPacket(false, 33)
	v6 := udpPacket(true, 33)
	for _, suite := range cpu.Suites() {
		b := suite.BlockLen()
		// n bytes of payload so that payload+pad+2 is aligned with a pad of want bytes.
		cases := []struct {
			name      string
			mode      sa.Mode
			plaintext []byte
			want      esp.Reason
		}{
			{"good", sa.Tunnel, trailer(suite, v4, nil, 4), esp.OK},
			{"good-extra-padding", sa.Tunnel, trailer(suite, v4, seqBytes(len(padFor(suite, v4))+b), 4), esp.OK},
			{"pad-bytes-wrong", sa.Tunnel, trailer(suite, v4, wrongPad(suite, v4, b), 4), esp.BadPadding},
			{"pad-length-overruns", sa.Tunnel, overrun(suite, v4), esp.BadPadding},
			{"dummy-59", sa.Tunnel, trailer(suite, v4, nil, 59), esp.Dummy},
			{"nh-4-carries-ipv6", sa.Tunnel, trailer(suite, v6, nil, 4), esp.BadNextHeader},
			{"nh-41-carries-ipv4", sa.Tunnel, trailer(suite, v4, nil, 41), esp.BadNextHeader},
			{"nh-17-in-tunnel", sa.Tunnel, trailer(suite, v4, nil, 17), esp.BadNextHeader},
			{"ipv4-length-past-payload", sa.Tunnel, trailer(suite, longerThanItIs(v4), nil, 4), esp.BadNextHeader},
			{"transport-dummy", sa.Transport, trailer(suite, v4[20:], nil, 59), esp.Dummy},
			{"transport-good", sa.Transport, trailer(suite, v4[20:], nil, 17), esp.OK},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%s", suite, c.name), func(t *testing.T) {
				cfg := testSA(t, suite, c.mode, false)
				rx, _ := newPairFrom(t, cfg)
				pkt := forge(t, cfg, 1, c.plaintext)
				hdr := 0
				if c.mode == sa.Transport {
					pkt = append(ipv4(50, len(pkt)), pkt...)
					hdr = 20
				}
				if _, r := openOne(t, rx, pkt, hdr); r != c.want {
					t.Fatalf("got %v, want %v", r, c.want)
				}
				if c.want != esp.OK && rx.Snapshot().Drops[c.want.String()] != 1 {
					t.Fatalf("not counted under %v: %+v", c.want, rx.Snapshot())
				}
			})
		}
	}
}

func padFor(suite sa.Suite, payload []byte) []byte {
	tr := trailer(suite, payload, nil, 0)
	return tr[len(payload) : len(tr)-2]
}

func seqBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i + 1)
	}
	return b
}

// wrongPad is a correct-length padding with one byte wrong; a block more
// of it when the suite would need none.
func wrongPad(suite sa.Suite, payload []byte, block int) []byte {
	p := padFor(suite, payload)
	if len(p) == 0 {
		p = seqBytes(block)
	}
	p[len(p)-1] ^= 0x80
	return p
}

// overrun ends the plaintext with a pad length larger than the plaintext.
func overrun(suite sa.Suite, payload []byte) []byte {
	tr := trailer(suite, payload, nil, 4)
	tr[len(tr)-2] = 255
	return tr
}

func longerThanItIs(pkt []byte) []byte {
	p := append([]byte(nil), pkt...)
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)+8))
	return p
}

func TestExpiredSA(t *testing.T) {
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}
	cfg := testSA(t, suite, sa.Tunnel, false)
	cfg.Hard.Packets = 3
	soft := 0
	cfg.Soft.Packets = 2
	tx, err := esp.NewSA(cfg, cpu.New(), esp.Options{OnSoftExpire: func(*esp.SA) { soft++ }})
	if err != nil {
		t.Fatal(err)
	}
	rx, _ := newPairFrom(t, cfg)
	pkts := sealN(t, tx, 3, 10, false)
	if !tx.Expired() || soft != 1 {
		t.Fatalf("after 3 packets: expired %v, soft fired %d times", tx.Expired(), soft)
	}
	buf := make([]byte, 200)
	p := &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(udpPacket(false, 10))}
	copy(buf[esp.Headroom:], udpPacket(false, 10))
	if r := tx.PrepareSeal(p); r != esp.Expired {
		t.Fatalf("seal on an expired SA: %v", r)
	}
	for i, pkt := range pkts {
		if _, r := openOne(t, rx, pkt, 0); r != esp.OK {
			t.Fatalf("open %d: %v", i, r)
		}
	}
	extra := sealOne(t, mustSA(t, cfg, 3), udpPacket(false, 10)) // seq 4 from a fresh sender
	if _, r := openOne(t, rx, extra, 0); r != esp.Expired {
		t.Fatalf("open on an expired SA: %v", r)
	}

	// Time lifetimes are applied by CheckTime.
	now := time.Unix(1000, 0)
	tcfg := testSA(t, suite, sa.Tunnel, false)
	tcfg.Hard.Time = time.Minute
	ts, err := esp.NewSA(tcfg, cpu.New(), esp.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ts.CheckTime(now.Add(59 * time.Second))
	if ts.Expired() {
		t.Fatal("expired before its time")
	}
	ts.CheckTime(now.Add(time.Minute))
	if !ts.Expired() {
		t.Fatal("not expired at its hard time")
	}
}

// mustSA returns an SA for cfg whose next packet is number last+1.
func mustSA(t *testing.T, cfg *sa.SA, last uint64) *esp.SA {
	t.Helper()
	c := *cfg
	c.InitialSeq = last
	c.Hard, c.Soft = sa.Lifetime{}, sa.Lifetime{}
	s, err := esp.NewSA(&c, cpu.New(), esp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSequenceExhaustion(t *testing.T) {
	cfg := testSA(t, sa.Suite{Cipher: sa.CipherAESCTR, Auth: sa.AuthHMACSHA1_96}, sa.Tunnel, false)
	tx := mustSA(t, cfg, math.MaxUint32-2)
	pkts := sealN(t, tx, 2, 20, false) // 2^32-2, 2^32-1
	if got := binary.BigEndian.Uint32(pkts[1][4:]); got != math.MaxUint32 {
		t.Fatalf("last sequence number %#x", got)
	}
	for i := 0; i < 3; i++ {
		inner := udpPacket(false, 20)
		buf := make([]byte, esp.Headroom+len(inner)+esp.Tailroom)
		copy(buf[esp.Headroom:], inner)
		p := &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(inner)}
		if r := tx.PrepareSeal(p); r != esp.SeqExhausted {
			t.Fatalf("seal %d past 2^32-1: %v, want seq-exhausted", i, r)
		}
	}
	if n := tx.Snapshot().Drops["seq-exhausted"]; n != 3 {
		t.Fatalf("seq-exhausted counted %d times", n)
	}
}

func TestESNAcross2To32(t *testing.T) {
	for _, suite := range []sa.Suite{{Cipher: sa.CipherAESGCM16}, {Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}} {
		t.Run(suite.String(), func(t *testing.T) {
			cfg := testSA(t, suite, sa.Tunnel, false)
			cfg.ESN = true
			tx := mustSA(t, cfg, 1<<32-5)
			pkts := sealN(t, tx, 12, 40, false) // 2^32-4 … 2^32+7
			if lo := binary.BigEndian.Uint32(pkts[4][4:]); lo != 0 {
				t.Fatalf("the fifth packet carries low bits %#x, want 0", lo)
			}
			inOrder, _ := newPairFrom(t, cfg)
			for i, p := range pkts {
				if _, r := openOne(t, inOrder, p, 0); r != esp.OK {
					t.Fatalf("in order, packet %d: %v", i, r)
				}
			}
			if h := inOrder.HighestAccepted(); h != 1<<32+7 {
				t.Fatalf("highest %#x", h)
			}
			outOfOrder, _ := newPairFrom(t, cfg)
			for _, i := range []int{0, 5, 2, 1, 11, 3, 4, 8, 6, 10, 7, 9} {
				if _, r := openOne(t, outOfOrder, pkts[i], 0); r != esp.OK {
					t.Fatalf("out of order, packet %d: %v", i, r)
				}
			}
			for _, i := range []int{0, 4, 11} {
				if _, r := openOne(t, outOfOrder, pkts[i], 0); r != esp.Replay {
					t.Fatalf("replayed packet %d: %v", i, r)
				}
			}
			// A receiver that takes the high bits as zero fails the ICV on
			// every packet past 2^32: the high bits are in the ICV.
			noESN := *cfg
			noESN.ESN = false
			plain, _ := newPairFrom(t, &noESN)
			if _, r := openOne(t, plain, pkts[6], 0); r != esp.BadICV {
				t.Fatalf("packet 2^32+2 opened without ESN: %v, want bad-icv", r)
			}
		})
	}
}

// TestReplayWindowAgainstModel opens random arrival orders — reordering,
// duplicates, packets far older than the window — through an SA and
// compares every verdict with the model.
func TestReplayWindowAgainstModel(t *testing.T) {
	suite := sa.Suite{Cipher: sa.CipherNull, Auth: sa.AuthHMACSHA1_96}
	for _, c := range []struct {
		window int
		esn    bool
	}{{1, false}, {32, false}, {64, false}, {1024, false}, {4096, false}, {64, true}, {1024, true}} {
		t.Run(fmt.Sprintf("window=%d/esn=%v", c.window, c.esn), func(t *testing.T) {
			rng := mrand.New(mrand.NewPCG(uint64(c.window), 7))
			cfg := testSA(t, suite, sa.Tunnel, false)
			cfg.ReplayWindow, cfg.ESN = c.window, c.esn
			start := uint64(0)
			if c.esn {
				start = 1<<32 - uint64(c.window) - 50 // cross 2^32 midway
			}
			n := 3*c.window + 200
			tx := mustSA(t, cfg, start)
			pkts := sealN(t, tx, n, 0, false)
			rx, _ := newPairFrom(t, cfg)
			rx.StartReceiveAfter(start)
			model := newWindowModel(c.window)
			model.highest = start
			for _, i := range arrivalOrder(rng, n, c.window) {
				seq := start + 1 + uint64(i)
				want := model.verdict(seq)
				_, got := openOne(t, rx, pkts[i], 0)
				if want == esp.OutsideWindow && c.esn && got == esp.BadICV {
					// ESN: a packet older than the window is taken for one
					// 2^32 ahead (RFC 4303 A2.2), and its ICV fails.
					continue
				}
				if got != want {
					t.Fatalf("seq %#x (highest %#x): %v, model says %v", seq, model.highest, got, want)
				}
				if got == esp.OK {
					model.accept(seq)
				}
			}
		})
	}
}

// arrivalOrder returns packet indexes 0…n-1 mostly in order but shuffled
// within a span larger than the window, with duplicates and stragglers from
// far behind.
func arrivalOrder(rng *mrand.Rand, n, window int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	span := window + window/2 + 2
	for i := range order {
		j := i + rng.IntN(span)
		if j < n {
			order[i], order[j] = order[j], order[i]
		}
	}
	out := make([]int, 0, n+n/4)
	for i, k := range order {
		out = append(out, k)
		switch rng.IntN(8) {
		case 0:
			out = append(out, k) // immediate duplicate
		case 1:
			out = append(out, order[rng.IntN(i+1)]) // something earlier again
		}
	}
	return out
}

// TestWindowUpdatedOnlyAfterICV: a forged packet far ahead must not move the
// window.
func TestWindowUpdatedOnlyAfterICV(t *testing.T) {
	cfg := testSA(t, sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, sa.Tunnel, false)
	cfg.ReplayWindow = 32
	tx, rx := newPair(t, cfg)
	pkts := sealN(t, tx, 11, 20, false)
	for _, p := range pkts[:10] {
		if _, r := openOne(t, rx, p, 0); r != esp.OK {
			t.Fatal(r)
		}
	}
	forged := append([]byte(nil), pkts[10]...)
	binary.BigEndian.PutUint32(forged[4:], 1000)
	if _, r := openOne(t, rx, forged, 0); r != esp.BadICV {
		t.Fatalf("forged: %v", r)
	}
	if _, r := openOne(t, rx, pkts[10], 0); r != esp.OK {
		t.Fatalf("seq 11 after a forged 1000: %v", r)
	}
}

// TestNothingDecryptedBeforeTheICV: a packet whose ICV fails releases no
// plaintext. With the HMAC suites the buffer stays as it came, ciphertext
// included: the ICV is checked before any decryption in place. Go's AES-GCM
// decrypts and authenticates in one pass and, on a bad tag, wipes what it
// wrote, as ChaCha20-Poly1305 and CCM do: the payload comes back zeroed,
// never as plaintext. null and aes-gmac send the payload in clear.
func TestNothingDecryptedBeforeTheICV(t *testing.T) {
	for _, suite := range cpu.Suites() {
		t.Run(suite.String(), func(t *testing.T) {
			tx, rx := newPair(t, testSA(t, suite, sa.Tunnel, false))
			inner := udpPacket(false, 200)
			pkt := sealOne(t, tx, inner)
			pkt[len(pkt)-1] ^= 1
			buf := append([]byte(nil), pkt...)
			p := &esp.Packet{Buf: buf, Off: 0, Len: len(buf), SA: rx}
			if err := esp.NewProcessor(rx.Engine()).Open(t.Context(), []*esp.Packet{p}); err != nil || p.Drop != esp.BadICV {
				t.Fatalf("open: %v %v", err, p.Drop)
			}
			if suite.Cipher.Encrypts() && bytes.Contains(buf, inner[20:]) {
				t.Fatalf("plaintext released from a packet with a bad ICV")
			}
			if bytes.Equal(buf, pkt) {
				return
			}
			body := buf[esp.HeaderLen+suite.IVLen() : len(buf)-suite.ICVLen()]
			if !suite.Cipher.IsAEAD() || !bytes.Equal(body, make([]byte, len(body))) {
				t.Fatalf("a packet with a bad ICV was changed in place, not only wiped")
			}
		})
	}
}
