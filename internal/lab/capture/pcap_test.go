package capture

// `espgw pcap open` on captures scapy made, with keys and SPIs chosen here at
// random; seal → open round trips through files; malformed captures and SA
// files.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/espgw/espgw/sa"
)

// readCapture reads the capture at path with ReadAll.
func readCapture(t *testing.T, path string) ([]Frame, Stats) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	frames, st, err := ReadAll(f, path)
	if err != nil {
		t.Fatal(err)
	}
	return frames, st
}

// readIPs returns the packets of a capture written by Writer.
func readIPs(t *testing.T, path string) [][]byte {
	t.Helper()
	frames, st := readCapture(t, path)
	if len(st.Skipped) > 0 {
		t.Fatalf("%s: skipped %v", path, st.Skipped)
	}
	out := make([][]byte, len(frames))
	for i, fr := range frames {
		out[i] = fr.IP
	}
	return out
}

func TestOpenScapyCaptures(t *testing.T) {
	dir := t.TempDir()
	type capCase struct {
		name   string
		cfg    *sa.SA
		link   string
		inners [][]byte
		file   string
	}
	var cases []*capCase
	links := []string{"ether", "raw", "sll"}
	i := 0
	for _, sc := range scapySuites() {
		for _, v := range []struct {
			mode  sa.Mode
			v6    bool
			encap sa.Encap
		}{{sa.Tunnel, false, sa.EncapUDP}, {sa.Transport, true, sa.EncapNone}} {
			c := &capCase{cfg: randomSA(sc, v.mode, v.v6, v.encap), link: links[i%3]}
			c.name = fmt.Sprintf("%s/%s/v6=%v/%s/%s", sc, v.mode, v.v6, v.encap, c.link)
			for j, n := range []int{48, 333, 1500} {
				c.inners = append(c.inners, udpPacket(v.v6, n, uint16(i*3+j)))
			}
			c.file = filepath.Join(dir, fmt.Sprintf("scapy%d.pcap", i))
			cases = append(cases, c)
			i++
		}
	}
	var jobs []peerJob
	var cfgs []*sa.SA
	for _, c := range cases {
		jobs = append(jobs, peerJob{Op: "pcap", SA: peerSA(c.cfg), Packets: hexes(c.inners), File: c.file, Link: c.link, Extra: true})
		cfgs = append(cfgs, c.cfg)
	}
	runPeer(t, jobs)
	// One SA file with every SA, as a user would keep them.
	saFile := writeSAFile(t, cfgs...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, filepath.Base(c.file)+".open.pcap")
			rep, err := OpenFile(context.Background(), Options{SAFile: saFile}, c.file, out)
			if err != nil {
				t.Fatal(err)
			}
			got := readIPs(t, out)
			if len(got) != len(c.inners) || rep.Written != len(c.inners) {
				t.Fatalf("opened %d packets, want %d; report %+v", len(got), len(c.inners), rep)
			}
			for j := range got {
				if !bytes.Equal(got[j], c.inners[j]) {
					t.Fatalf("packet %d:\n got %x\nwant %x", j, got[j], c.inners[j])
				}
			}
			// The extras: a NAT keepalive, an IKE packet behind the
			// non-ESP marker, a DNS packet (and ARP on Ethernet).
			want := map[string]uint64{"nat-keepalive": 1, "non-esp-marker": 1, "not-esp": 1}
			if c.link == "ether" {
				want["not-ip"] = 1
			}
			if fmt.Sprint(rep.Skipped) != fmt.Sprint(want) || len(rep.Rejects) != 0 {
				t.Fatalf("skipped %v, want %v; rejects %v", rep.Skipped, want, rep.Rejects)
			}
			for _, s := range rep.SAs {
				n := uint64(0)
				if s.SPI == c.cfg.SPI {
					n = 3
				}
				if s.Packets != n {
					t.Fatalf("SA %#x opened %d packets, want %d", s.SPI, s.Packets, n)
				}
			}
		})
	}
}

// TestSealOpenFiles seals captures with `pcap seal` and opens them with
// `pcap open`: every link type in, raw and Ethernet out, pcapng in, several
// SAs in one file, unknown SPIs and tampered packets counted.
func TestSealOpenFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := randomSA(suiteCase{sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, 32}, sa.Tunnel, false, sa.EncapNone)
	b := randomSA(suiteCase{sa.Suite{Cipher: sa.CipherAESGCM16}, 20}, sa.Transport, true, sa.EncapUDP)
	b.ESN, b.InitialSeq = true, 1<<32-2
	saFile := writeSAFile(t, a, b)

	in4 := filepath.Join(dir, "in4.pcap")
	inner4 := writeInnerCapture(t, in4, false, []int{28, 100, 1500})
	in6 := filepath.Join(dir, "in6.pcapng")
	inner6 := writeNg(t, in6, true, []int{48, 100, 1500, 900})

	// Several SAs and no --spi: a clear error.
	if _, err := SealFile(ctx, Options{SAFile: saFile}, in4, filepath.Join(dir, "x.pcap")); err == nil || !strings.Contains(err.Error(), "--spi") {
		t.Fatalf("seal without --spi: %v", err)
	}
	sa4 := filepath.Join(dir, "sa4.pcap")
	if _, err := SealFile(ctx, Options{SAFile: saFile, SPI: a.SPI, Link: LinkEthernet}, in4, sa4); err != nil {
		t.Fatal(err)
	}
	sa6 := filepath.Join(dir, "sa6.pcap")
	if _, err := SealFile(ctx, Options{SAFile: saFile, SPI: b.SPI}, in6, sa6); err != nil {
		t.Fatal(err)
	}
	// b crosses 2^32 with ESN: the numbers on the wire are 2^32-1, 0, 1, 2.
	sealed6 := readIPs(t, sa6)
	if lo := sealed6[1][40+8+4 : 40+8+8]; !bytes.Equal(lo, []byte{0, 0, 0, 0}) {
		t.Fatalf("second packet's sequence number %x, want 0 (ESN past 2^32)", lo)
	}

	// Mix both into one capture, add a packet of an unknown SPI and a
	// tampered one.
	mixed := filepath.Join(dir, "mixed.pcap")
	pkts := append(readIPs(t, sa4), sealed6...)
	unknown := append([]byte(nil), pkts[0]...)
	unknown[20] ^= 0xff // SPI
	tampered := append([]byte(nil), pkts[1]...)
	tampered[len(tampered)-1] ^= 1                              // ICV
	pkts = append([][]byte{tampered}, append(pkts, unknown)...) // tampered before its original
	if err := WriteFile(mixed, LinkRaw, pkts); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "opened.pcap")
	rep, err := OpenFile(ctx, Options{SAFile: saFile}, mixed, out)
	if err != nil {
		t.Fatal(err)
	}
	got := readIPs(t, out)
	want := append(inner4, inner6...)
	if len(got) != len(want) {
		t.Fatalf("opened %d packets, want %d: %+v", len(got), len(want), rep)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d:\n got %x\nwant %x", i, got[i], want[i])
		}
	}
	if rep.Rejects["unknown-spi"] != 1 || rep.Rejects["bad-icv"] != 1 || len(rep.Rejects) != 2 {
		t.Fatalf("rejects %v", rep.Rejects)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for _, s := range []string{"9 frames read, 7 packets opened", "bad-icv=1 unknown-spi=1", fmt.Sprintf("%#x", a.SPI)} {
		if !strings.Contains(text.String(), s) {
			t.Fatalf("report lacks %q:\n%s", s, text.String())
		}
	}
}

func longer(p []byte) []byte {
	q := append([]byte(nil), p...)
	q[2], q[3] = 0x07, 0xd0
	return q
}

// writeNg writes a pcapng capture of UDP packets with an Ethernet link.
func writeNg(t testing.TB, path string, v6 bool, sizes []int) [][]byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := pcapgo.NewNgWriter(f, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	var pkts [][]byte
	for i, n := range sizes {
		p := udpPacket(v6, n, uint16(i))
		pkts = append(pkts, p)
		frame := append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd}, p...)
		frame = append(frame, 0, 0, 0, 0) // a trailer the IP length must cut off
		ci := ciAt(i)
		ci.CaptureLength, ci.Length = len(frame), len(frame)
		if err := w.WritePacket(ci, frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return pkts
}

func TestMalformedInputs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := randomSA(suiteCase{sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, 16}, sa.Tunnel, false, sa.EncapNone)
	saFile := writeSAFile(t, cfg)
	good := filepath.Join(dir, "good.pcap")
	writeInnerCapture(t, good, false, []int{100})

	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A pcap header with link type 147 (user 0).
	hdr := []byte{0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 147, 0, 0, 0}
	goodBytes := readFile(t, good)
	badSA := write("bad.yaml", []byte("sa:\n  - spi: 0x1001\n    mode: tunnel\n    enc: aes-cbc\n    enc-key: 0x0011\n"))
	cases := []struct {
		name    string
		in, sa  string
		wantErr string
	}{
		{"missing input", filepath.Join(dir, "nope.pcap"), saFile, "open input capture"},
		{"empty input", write("empty.pcap", nil), saFile, "too short for a pcap or pcapng header"},
		{"not a capture", write("text.pcap", []byte("hello, this is not a capture file at all")), saFile, "not a pcap or pcapng file"},
		{"unknown link type", write("user0.pcap", hdr), saFile, "unsupported link type"},
		{"truncated record", write("cut.pcap", goodBytes[:len(goodBytes)-10]), saFile, "frame 1"},
		{"huge pcap record", write("huge.pcap", hugeRecord(goodBytes)), saFile, "exceeds snap length"},
		{"huge pcapng record", write("huge.pcapng", hugeNgRecord(t, dir)), saFile, "does not fit the block"},
		{"missing SA file", good, filepath.Join(dir, "nope.yaml"), "load SA file"},
		{"bad SA file", good, badSA, "bad.yaml"},
	}
	for _, c := range cases {
		for _, op := range []string{"seal", "open"} {
			t.Run(op+"/"+c.name, func(t *testing.T) {
				out := filepath.Join(dir, op+".out.pcap")
				var err error
				if op == "seal" {
					_, err = SealFile(ctx, Options{SAFile: c.sa}, c.in, out)
				} else {
					_, err = OpenFile(ctx, Options{SAFile: c.sa}, c.in, out)
				}
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, c.wantErr)
				}
				if strings.Contains(err.Error(), fmt.Sprintf("%x", []byte(cfg.EncKey))) {
					t.Fatalf("error shows a key: %v", err)
				}
			})
		}
	}

	// Frames that are not IP, or not whole, are counted, not fatal.
	frames := filepath.Join(dir, "frames.pcap")
	f, _ := os.Create(frames)
	w := pcapgo.NewWriter(f)
	w.WriteFileHeader(65535, layers.LinkTypeRaw)
	inner := udpPacket(false, 60, 1)
	for _, fr := range [][]byte{
		{0x45, 0, 0},     // an IPv4 header cut short
		{0x75, 0, 0, 20}, // IP version 7
		longer(inner),    // a total length past the data
		inner,
	} {
		ci := ciAt(0)
		ci.CaptureLength, ci.Length = len(fr), len(fr)
		w.WritePacket(ci, fr)
	}
	ci := ciAt(1)
	ci.CaptureLength, ci.Length = len(inner), len(inner)+100 // snapped
	w.WritePacket(ci, inner)
	f.Close()
	rep, err := SealFile(ctx, Options{SAFile: saFile}, frames, filepath.Join(dir, "frames.out"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Written != 1 || rep.Skipped["truncated-capture"] != 1 || rep.Skipped["malformed-ip"] != 3 {
		t.Fatalf("%+v", rep)
	}
}

// hugeRecord declares a 4 GB snap length and a 2 GB first record.
func hugeRecord(pcap []byte) []byte {
	b := append([]byte(nil), pcap...)
	binary.LittleEndian.PutUint32(b[16:], 0xffffffff)
	binary.LittleEndian.PutUint32(b[24+8:], 0x7fffffff)
	binary.LittleEndian.PutUint32(b[24+12:], 0x7fffffff)
	return b
}

// hugeNgRecord is a pcapng capture whose first packet block declares a
// 2 GB capture length.
func hugeNgRecord(t *testing.T, dir string) []byte {
	path := filepath.Join(dir, "ng.pcapng")
	pkts := writeNg(t, path, false, []int{100})
	b := readFile(t, path)
	n := uint32(len(pkts[0]) + 18) // Ethernet header and trailer
	var pair [8]byte
	binary.LittleEndian.PutUint32(pair[0:], n)
	binary.LittleEndian.PutUint32(pair[4:], n)
	i := bytes.Index(b, pair[:])
	if i < 0 {
		t.Fatal("no packet block lengths in the pcapng file")
	}
	binary.LittleEndian.PutUint32(b[i:], 0x7fffffff)
	return b
}
