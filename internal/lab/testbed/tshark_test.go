package testbed

import (
	"context"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/espgw/espgw/internal/lab/capture"
	"github.com/espgw/espgw/sa"
)

// tshark gets the keys through a private esp_sa file, not its command line
// (where ps shows them to every user), and still decrypts and checks every
// packet: the judge is real.
func TestTsharkKeysOffCommandLine(t *testing.T) {
	if _, err := os.Stat("/usr/bin/tshark"); err != nil {
		t.Fatalf("tshark is needed to judge espgw's output (apt-get install -y tshark): %v", err)
	}
	dir := t.TempDir()
	s := &sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, ReplayWindow: 64}
	var err error
	if s.EncKey, s.AuthKey, err = sa.RandomKeys(s.Suite, 128); err != nil {
		t.Fatal(err)
	}
	saFile := filepath.Join(dir, "sa.yaml")
	if err := sa.WriteFile(saFile, &sa.Config{SAs: []*sa.SA{s}}); err != nil {
		t.Fatal(err)
	}
	in, out := filepath.Join(dir, "in.pcap"), filepath.Join(dir, "out.pcap")
	writeUDPCapture(t, in, 3)
	if _, err := capture.SealFile(context.Background(), capture.Options{SAFile: saFile}, in, out); err != nil {
		t.Fatal(err)
	}
	line := EspSALine(s)
	keys := []string{hex.EncodeToString(s.EncKey), hex.EncodeToString(s.AuthKey)}

	cmd, done, err := TsharkCommand(context.Background(), []string{line}, "-r", out)
	if err != nil {
		t.Fatal(err)
	}
	conf := ""
	for _, e := range cmd.Env {
		if v, ok := strings.CutPrefix(e, "WIRESHARK_CONFIG_DIR="); ok {
			conf = v
		}
	}
	for _, k := range keys {
		if strings.Contains(strings.Join(cmd.Args, " "), k) || strings.Contains(strings.Join(cmd.Env, " "), k) {
			t.Errorf("a key is on tshark's command line or in its environment: %q", cmd.Args)
		}
	}
	for p, want := range map[string]os.FileMode{conf: 0o700, filepath.Join(conf, "esp_sa"): 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %v", p, fi.Mode().Perm(), err, want)
		}
	}
	done()
	if _, err := os.Stat(conf); !os.IsNotExist(err) {
		t.Errorf("done left the configuration directory %s: %v", conf, err)
	}

	v, err := Tshark(context.Background(), out, []string{line})
	if err != nil {
		t.Fatal(err)
	}
	if v.ESP != 3 || v.ICVGood != 3 || v.Decrypted != 3 {
		t.Fatalf("tshark: %+v, want 3 ESP packets, all with a good ICV and decrypted", v)
	}
	// Without the keys tshark decrypts nothing: the esp_sa file is what it read.
	if v, err := Tshark(context.Background(), out, nil); err != nil || v.ICVGood != 0 {
		t.Fatalf("tshark without SAs: %+v, %v", v, err)
	}
}

func writeUDPCapture(t *testing.T, path string, n int) {
	t.Helper()
	var pkts [][]byte
	for i := range n {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(198, 51, 100, 1), DstIP: net.IPv4(203, 0, 113, 1), Id: uint16(i)}
		udp := &layers.UDP{SrcPort: 40000, DstPort: 9000}
		udp.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ip, udp, gopacket.Payload(make([]byte, 100))); err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, buf.Bytes())
	}
	if err := capture.WriteFile(path, capture.LinkRaw, pkts); err != nil {
		t.Fatal(err)
	}
}
