package capture

// Helpers shared by the interop tests: the scapy peer (internal/lab/scapy),
// random SAs, and inner packets with correct checksums.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/lab/pcapgen"
	"github.com/espgw/espgw/internal/lab/scapy"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

type peerJob struct {
	Op      string         `json:"op"`
	SA      map[string]any `json:"sa"`
	Packets []string       `json:"packets"`
	Seqs    []uint64       `json:"seqs,omitempty"`
	File    string         `json:"file,omitempty"`
	Link    string         `json:"link,omitempty"`
	Extra   bool           `json:"extra,omitempty"`
}

type peerResult struct {
	Packets []*string `json:"packets"`
	Errors  []*string `json:"errors"`
}

// runPeer runs every job in one scapy process (failing, with what to
// install, where scapy is missing).
func runPeer(t *testing.T, jobs []peerJob) []peerResult {
	t.Helper()
	in, err := json.Marshal(map[string]any{"jobs": jobs})
	if err != nil {
		t.Fatal(err)
	}
	cmd, done, err := scapy.Command("", "jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scapy peer: %v\n%s", err, stderr.String())
	}
	var res struct{ Results []peerResult }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("scapy peer output: %v", err)
	}
	if len(res.Results) != len(jobs) {
		t.Fatalf("scapy peer answered %d jobs of %d", len(res.Results), len(jobs))
	}
	return res.Results
}

// packet returns result i's packet, failing with scapy's error.
func (r peerResult) packet(t *testing.T, what string, i int) []byte {
	t.Helper()
	if r.Packets[i] == nil {
		msg := "?"
		if r.Errors[i] != nil {
			msg = *r.Errors[i]
		}
		t.Fatalf("%s: scapy: %s", what, msg)
	}
	b, err := hex.DecodeString(*r.Packets[i])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func peerSA(c *sa.SA) map[string]any { return scapy.SA(c) }

func hexes(pkts [][]byte) []string {
	out := make([]string, len(pkts))
	for i, p := range pkts {
		out[i] = hex.EncodeToString(p)
	}
	return out
}

// suiteCase is a suite with an AES key size.
type suiteCase struct {
	suite  sa.Suite
	encLen int
}

func (s suiteCase) String() string {
	switch s.suite.Cipher {
	case sa.CipherAESCBC:
		return fmt.Sprintf("aes-cbc-%d+%s", s.encLen*8, s.suite.Auth)
	case sa.CipherAESGCM16:
		return fmt.Sprintf("aes-gcm-16-%d", (s.encLen-4)*8)
	case sa.CipherAESCTR:
		return fmt.Sprintf("aes-ctr-%d+%s", (s.encLen-4)*8, s.suite.Auth)
	case sa.CipherAESCCM8, sa.CipherAESCCM12, sa.CipherAESCCM16:
		return fmt.Sprintf("%s-%d", s.suite, (s.encLen-3)*8)
	}
	return s.suite.String()
}

// scapySuites are the interop suites scapy's ESP does: its AES-GCM
// (cryptography's AESGCM) writes and checks 16-byte ICVs only, so tshark
// and the kernel (internal/lab/interop) judge aes-gcm-12.
func scapySuites() []suiteCase {
	return slices.DeleteFunc(interopSuites(), func(sc suiteCase) bool { return sc.suite.Cipher == sa.CipherAESGCM12 })
}

// interopSuites is every suite scapy has, with every AES-CBC key size and
// the two ends of the AES-CTR, GCM and CCM sizes. scapy has no AES-GMAC:
// the guest kernel judges it (internal/lab/interop).
func interopSuites() []suiteCase {
	var out []suiteCase
	for _, s := range cpu.Suites() {
		switch s.Cipher {
		case sa.CipherAESGMAC:
		case sa.CipherAESCBC:
			for _, n := range []int{16, 24, 32} {
				out = append(out, suiteCase{s, n})
			}
		case sa.CipherAESCTR, sa.CipherAESGCM16:
			out = append(out, suiteCase{s, 20}, suiteCase{s, 36})
		case sa.CipherAESCCM8, sa.CipherAESCCM12, sa.CipherAESCCM16:
			out = append(out, suiteCase{s, 19}, suiteCase{s, 35})
		default:
			out = append(out, suiteCase{s, s.EncKeyLens()[0]})
		}
	}
	return out
}

func randomBytes(n int) sa.Key {
	k := make(sa.Key, n)
	rand.Read(k)
	return k
}

// Inner addresses: tunnel-mode inner packets go between these; in transport
// mode they are the SA's own addresses.
var (
	inner4 = [2]netip.Addr{netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("203.0.113.20")}
	inner6 = [2]netip.Addr{netip.MustParseAddr("2001:db8:1::10"), netip.MustParseAddr("2001:db8:2::20")}
	outer4 = [2]netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}
	outer6 = [2]netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")}
)

// randomSA returns an SA with a random SPI and keys.
func randomSA(sc suiteCase, mode sa.Mode, v6 bool, encap sa.Encap) *sa.SA {
	c := &sa.SA{SPI: 0x100 + mrand.Uint32N(1<<31), Mode: mode, Encap: encap, Suite: sc.suite, ReplayWindow: 64}
	c.Src, c.Dst = outer4[0], outer4[1]
	if v6 {
		c.Src, c.Dst = outer6[0], outer6[1]
	}
	if mode == sa.Transport {
		c.Src, c.Dst = inner4[0], inner4[1]
		if v6 {
			c.Src, c.Dst = inner6[0], inner6[1]
		}
	}
	if encap == sa.EncapUDP {
		c.SrcPort, c.DstPort = sa.DefaultNATTPort, sa.DefaultNATTPort
	}
	c.EncKey = randomBytes(sc.encLen)
	c.AuthKey = randomBytes(sc.suite.AuthKeyLen())
	return c
}

// udpPacket builds an IPv4 or IPv6 UDP packet of total bytes with correct
// IP and UDP checksums; below the size of the two headers, an IP packet of
// protocol 253 (experimental) with no payload beyond what fits.
func udpPacket(v6 bool, total int, id uint16) []byte {
	hl, proto := 20, layers.IPProtocolUDP
	if v6 {
		hl = 40
	}
	total = max(total, hl)
	if total < hl+8 {
		proto = 253
	}
	var ip gopacket.SerializableLayer = &layers.IPv4{Version: 4, TTL: 64, Id: id, Protocol: proto,
		SrcIP: inner4[0].AsSlice(), DstIP: inner4[1].AsSlice()}
	if v6 {
		ip = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: inner6[0].AsSlice(), DstIP: inner6[1].AsSlice()}
	}
	if proto != layers.IPProtocolUDP {
		return serialize(ip, gopacket.Payload(make([]byte, total-hl)))
	}
	payload := make([]byte, total-hl-8)
	for i := range payload {
		payload[i] = byte((hl+8+i)*7) ^ byte(id)
	}
	return serialize(ip, &layers.UDP{SrcPort: layers.UDPPort(40000 + id), DstPort: 9}, gopacket.Payload(payload))
}

// serialize is pcapgen.Serialize for the packets a test builds, which
// always serialize.
func serialize(ls ...gopacket.SerializableLayer) []byte {
	b, err := pcapgen.Serialize(ls...)
	if err != nil {
		panic(fmt.Sprintf("a test packet does not serialize: %v", err))
	}
	return b
}

// newSAs builds working SAs for the configurations on one cpu engine.
func newSAs(t testing.TB, cfgs ...*sa.SA) []*esp.SA {
	t.Helper()
	eng := cpu.New()
	out := make([]*esp.SA, len(cfgs))
	for i, c := range cfgs {
		s, err := esp.NewSA(c, eng, esp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = s
	}
	return out
}

// writeSAFile writes the SAs as an SA file in a test directory.
func writeSAFile(t *testing.T, cfgs ...*sa.SA) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sa.yaml")
	if err := sa.WriteFile(path, &sa.Config{SAs: cfgs}); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ciAt is a capture timestamp i milliseconds into 2026.
func ciAt(i int) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: time.Date(2026, 1, 1, 0, 0, 0, i*1e6, time.UTC)}
}
