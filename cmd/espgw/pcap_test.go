package main

// The pcap commands as a user runs them: the built binary, its output and
// its exit status.

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/capture"
	"github.com/espgw/espgw/internal/lab/labtest"
)

// TestMain removes the espgw command the tests built.
func TestMain(m *testing.M) { labtest.Main(m) }

func run(bin string, args ...string) (stdout, stderr string, code int) {
	cmd := exec.Command(bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return o.String(), e.String(), code
}

// rawCapture writes a raw-IP pcap holding one IPv4 UDP packet.
func rawCapture(t *testing.T, path string) {
	t.Helper()
	pkt := make([]byte, 60)
	pkt[0], pkt[8], pkt[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(pkt[2:], 60)
	copy(pkt[12:], []byte{198, 51, 100, 1, 203, 0, 113, 1})
	binary.BigEndian.PutUint16(pkt[24:], 40)
	if err := capture.WriteFile(path, capture.LinkRaw, [][]byte{pkt}); err != nil {
		t.Fatal(err)
	}
}

const saYAML = `sa:
  - spi: 0x1001
    mode: tunnel
    src: 192.0.2.1
    dst: 192.0.2.2
    enc: aes-cbc
    enc-key: 0x00112233445566778899aabbccddeeff
    auth: hmac-sha1-96
    auth-key: 0x0102030405060708090a0b0c0d0e0f1011121314
`

func TestPcapCommands(t *testing.T) {
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	saFile := filepath.Join(dir, "sa.yaml")
	os.WriteFile(saFile, []byte(saYAML), 0o600)
	in := filepath.Join(dir, "in.pcap")
	rawCapture(t, in)
	sealed := filepath.Join(dir, "sealed.pcap")
	opened := filepath.Join(dir, "opened.pcap")
	espSA := filepath.Join(dir, "esp_sa")

	out, errOut, code := run(bin, "pcap", "seal", "--sa", saFile, "--spi", "0x1001", "--wireshark-sa", espSA, in, sealed)
	if code != 0 || !strings.Contains(out, "1 frames read, 1 packets sealed") {
		t.Fatalf("seal: exit %d\n%s%s", code, out, errOut)
	}
	line, _ := os.ReadFile(espSA)
	if want := `"IPv4","192.0.2.1","192.0.2.2","0x00001001","AES-CBC [RFC3602]","0x00112233445566778899aabbccddeeff","HMAC-SHA-1-96 [RFC2404]","0x0102030405060708090a0b0c0d0e0f1011121314"`; strings.TrimSpace(string(line)) != want {
		t.Fatalf("esp_sa:\n%s\nwant\n%s", line, want)
	}
	out, errOut, code = run(bin, "pcap", "open", "--sa", saFile, sealed, opened)
	if code != 0 || !strings.Contains(out, "1 frames read, 1 packets opened") {
		t.Fatalf("open: exit %d\n%s%s", code, out, errOut)
	}
	a, _ := os.ReadFile(in)
	b, _ := os.ReadFile(opened)
	if !bytes.Equal(a[40:], b[len(b)-60:]) {
		t.Fatalf("opened packet differs from the original")
	}

	badSA := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badSA, []byte(strings.Replace(saYAML, "aes-cbc", "aes-cbd", 1)), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pcap", "seal", "--sa", badSA, in, sealed}, "bad.yaml"},
		{[]string{"pcap", "open", "--sa", filepath.Join(dir, "none.yaml"), sealed, opened}, "load SA file"},
		{[]string{"pcap", "open", "--sa", saFile, saFile, opened}, "not a pcap or pcapng file"},
		{[]string{"pcap", "seal", "--sa", saFile, "--spi", "0x2002", in, sealed}, "no SA with SPI 0x2002"},
		{[]string{"pcap", "seal", "--sa", saFile, "--spi", "zz", in, sealed}, "--spi"},
		{[]string{"pcap", "seal", "--sa", saFile, "--engine", "warp", in, sealed}, "unknown offload engine"},
		{[]string{"pcap", "seal", "--sa", saFile, "--link", "tokenring", in, sealed}, "unknown link type"},
		{[]string{"pcap", "seal", in, sealed}, "sa"},
		{[]string{"pcap", "open", "--sa", saFile, in}, "accepts 2 arg"},
	} {
		out, errOut, code := run(bin, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want non-zero and %q (stdout %q)", c.args, code, errOut, c.want, out)
		}
		if strings.Contains(errOut, "panic") || strings.Contains(errOut, "00112233445566778899aabbccddeeff") {
			t.Errorf("%v: %s", c.args, errOut)
		}
	}
}
