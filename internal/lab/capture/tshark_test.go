package capture

// tshark decrypts what `espgw pcap seal` writes, with the esp_sa file that
// --wireshark-sa writes, and must find a good ICV on every packet and the
// inner packet behind ESP. tshark 4.0 has no ESN, so these SAs have none,
// and no ChaCha20-Poly1305, AES-GMAC or AES-CCM, so those suites are left to
// scapy and the guest kernel.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/sa"
)

// concatCaptures copies the packets of several raw-IP captures into one
// Ethernet capture, and then a copy of the first packet with its last byte
// (ICV) flipped.
func concatCaptures(t *testing.T, out string, ins []string) {
	t.Helper()
	var pkts [][]byte
	for _, in := range ins {
		pkts = append(pkts, readIPs(t, in)...)
	}
	tampered := bytes.Clone(pkts[0])
	tampered[len(tampered)-1] ^= 1
	if err := WriteFile(out, LinkEthernet, append(pkts, tampered)); err != nil {
		t.Fatal(err)
	}
}

func TestTsharkOpensSealedCaptures(t *testing.T) {
	labtest.NeedTools(t, "tshark")
	dir := t.TempDir()
	var cfgs []*sa.SA
	for _, sc := range interopSuites() {
		if !TsharkDecrypts(sc.suite.Cipher) {
			continue
		}
		for _, v := range []struct {
			mode  sa.Mode
			v6    bool
			encap sa.Encap
		}{{sa.Tunnel, false, sa.EncapNone}, {sa.Tunnel, true, sa.EncapUDP}, {sa.Transport, false, sa.EncapUDP}, {sa.Transport, true, sa.EncapNone}} {
			cfgs = append(cfgs, randomSA(sc, v.mode, v.v6, v.encap))
		}
	}
	// Distinct outer addresses per SA would not matter to Wireshark, which
	// matches on SPI and addresses; the SPIs are random and distinct.
	saFile := writeSAFile(t, cfgs...)
	espSA := filepath.Join(dir, "esp_sa")
	var outs []string
	want := map[uint32]*sa.SA{}
	for i, c := range cfgs {
		want[c.SPI] = c
		v6 := c.Src.Is6()
		if c.Mode == sa.Tunnel && c.Encap == sa.EncapUDP {
			v6 = !v6 // the other family inside
		}
		in := filepath.Join(dir, fmt.Sprintf("in%d.pcap", i))
		writeInnerCapture(t, in, v6, []int{40 + i%5, 700, 1500})
		out := filepath.Join(dir, fmt.Sprintf("out%d.pcap", i))
		rep, err := SealFile(context.Background(), Options{SAFile: saFile, SPI: c.SPI, WiresharkSA: espSA}, in, out)
		if err != nil {
			t.Fatalf("seal with %v: %v", c, err)
		}
		if rep.Written != 3 {
			t.Fatalf("seal with %v: %+v", c, rep)
		}
		outs = append(outs, out)
	}
	all := filepath.Join(dir, "all.pcap")
	concatCaptures(t, all, outs)

	// A Wireshark configuration directory holding only the esp_sa file.
	conf := filepath.Join(dir, "wireshark")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "esp_sa"), readFile(t, espSA), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("tshark", "-n", "-r", all,
		"-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE",
		"-T", "fields", "-E", "separator=|", "-e", "frame.number", "-e", "esp.spi", "-e", "esp.icv_good", "-e", "frame.protocols")
	cmd.Env = append(os.Environ(), "WIRESHARK_CONFIG_DIR="+conf, "HOME="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3*len(cfgs)+1 {
		t.Fatalf("tshark printed %d lines for %d packets:\n%s", len(lines), 3*len(cfgs)+1, out)
	}
	// The judge judges: the tampered copy at the end has a bad ICV.
	if f := strings.Split(lines[len(lines)-1], "|"); len(f) != 4 || (f[2] != "0" && f[2] != "False") {
		t.Fatalf("tshark on a packet with a flipped ICV bit: %q, want esp.icv_good 0", lines[len(lines)-1])
	}
	lines = lines[:len(lines)-1]
	seen := map[uint32]int{}
	for _, line := range lines {
		f := strings.Split(line, "|")
		if len(f) != 4 {
			t.Fatalf("tshark line %q", line)
		}
		var spi uint32
		fmt.Sscanf(f[1], "0x%x", &spi)
		c := want[spi]
		if c == nil {
			t.Fatalf("frame %s: SPI %q not one of ours", f[0], f[1])
		}
		seen[spi]++
		if f[2] != "1" && f[2] != "True" {
			t.Errorf("frame %s (%v): esp.icv_good=%q, want 1", f[0], c, f[2])
		}
		inner := "esp:ip"
		if c.Mode == sa.Transport {
			inner = "esp:udp"
		}
		if !strings.Contains(f[3], inner) {
			t.Errorf("frame %s (%v): frame.protocols %q lacks %s", f[0], c, f[3], inner)
		}
	}
	for spi, c := range want {
		if seen[spi] != 3 {
			t.Errorf("%v: tshark saw %d packets, want 3", c, seen[spi])
		}
	}
}

// writeInnerCapture writes a raw-IP capture of UDP packets of the given sizes.
func writeInnerCapture(t *testing.T, path string, v6 bool, sizes []int) [][]byte {
	t.Helper()
	var pkts [][]byte
	for i, n := range sizes {
		pkts = append(pkts, udpPacket(v6, max(n, 48), uint16(i)))
	}
	if err := WriteFile(path, LinkRaw, pkts); err != nil {
		t.Fatal(err)
	}
	return pkts
}
