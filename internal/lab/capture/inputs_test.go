package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/sa"
)

// `espgw pcap open|seal IN IN` (by name, a symlink or a hard link) is
// refused before the input is truncated.
func TestOutputIsInputRefused(t *testing.T) {
	dir := t.TempDir()
	c := randomSA(interopSuites()[0], sa.Tunnel, false, sa.EncapNone)
	saFile := writeSAFile(t, c)
	in := filepath.Join(dir, "in.pcap")
	writeInnerCapture(t, in, false, []int{100, 200})
	before := readFile(t, in)
	link := filepath.Join(dir, "link.pcap")
	if err := os.Symlink(in, link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.pcap")
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{in, link, hard, filepath.Join(dir, ".", "in.pcap")} {
		for name, run := range map[string]func(context.Context, Options, string, string) (*Report, error){"seal": SealFile, "open": OpenFile} {
			_, err := run(context.Background(), Options{SAFile: saFile, SPI: c.SPI}, in, out)
			if err == nil || !strings.Contains(err.Error(), "is the input capture") {
				t.Errorf("%s %s %s: %v, want a refusal", name, in, out, err)
			}
		}
	}
	// --wireshark-sa pointing at the input is refused too.
	if _, err := SealFile(context.Background(), Options{SAFile: saFile, SPI: c.SPI, WiresharkSA: in}, in, filepath.Join(dir, "out.pcap")); err == nil {
		t.Error("seal with --wireshark-sa = the input: no error")
	}
	if after := readFile(t, in); string(after) != string(before) {
		t.Fatalf("the input capture changed: %d bytes, was %d", len(after), len(before))
	}
}

// A valid pcapng file of only a section header says it holds no packets,
// not "not a pcap or pcapng file: EOF".
func TestPcapngSectionHeaderOnly(t *testing.T) {
	shb := make([]byte, 28)
	binary.LittleEndian.PutUint32(shb[0:], 0x0a0d0d0a)
	binary.LittleEndian.PutUint32(shb[4:], 28)
	binary.LittleEndian.PutUint32(shb[8:], 0x1a2b3c4d)
	binary.LittleEndian.PutUint16(shb[12:], 1)
	binary.LittleEndian.PutUint64(shb[16:], ^uint64(0)) // section length unknown
	binary.LittleEndian.PutUint32(shb[24:], 28)
	_, err := NewReader(bytes.NewReader(shb), "empty.pcapng")
	if err == nil || !strings.Contains(err.Error(), "no packets") {
		t.Fatalf("section header only: %v, want \"no packets\"", err)
	}
	// A section header cut short is still not a pcapng file.
	if _, err := NewReader(strings.NewReader(string(shb[:20])), "cut"); err == nil || strings.Contains(err.Error(), "no packets") {
		t.Errorf("cut section header: %v", err)
	}
}

// Files with keys end up readable only by their owner, even when a
// world-readable file was there before: the SA file and --wireshark-sa.
func TestKeyFilesOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	c := randomSA(interopSuites()[0], sa.Tunnel, false, sa.EncapNone)
	saFile := filepath.Join(dir, "sa.yaml")
	espSA := filepath.Join(dir, "esp_sa")
	for _, p := range []string{saFile, espSA} {
		if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o644)
	}
	if err := sa.WriteFile(saFile, &sa.Config{SAs: []*sa.SA{c}}); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in.pcap")
	writeInnerCapture(t, in, false, []int{100})
	if _, err := SealFile(context.Background(), Options{SAFile: saFile, SPI: c.SPI, WiresharkSA: espSA}, in, filepath.Join(dir, "out.pcap")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{saFile, espSA} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(p), fi.Mode().Perm())
		}
		if strings.HasPrefix(string(readFile(t, p)), "old") {
			t.Errorf("%s was not rewritten", p)
		}
	}
}
