package scenario

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// A capture folder's esp_sa file names every SA: a line Wireshark reads for
// a suite it has, a comment saying why for one it has not, and espgw reads
// the file back to the SAs it can hold.
func TestEspSAFileNamesEverySA(t *testing.T) {
	a := netip.MustParseAddr
	mk := func(spi uint32, c sa.Cipher, n int) *sa.SA {
		return &sa.SA{SPI: spi, Mode: sa.Tunnel, Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Suite: sa.Suite{Cipher: c},
			EncKey: make(sa.Key, n), ReplayWindow: 64}
	}
	r := &runner{bed: &testbed.Bed{SAs: [2]*sa.SA{mk(0x1001, sa.CipherChaCha20Poly1305, 36), mk(0x1002, sa.CipherAESGMAC, 20)}}}
	dir := t.TempDir()
	if err := r.writeEspSA(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "esp_sa"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"ChaCha20 with Poly1305 [RFC7634]"`) ||
		lines[1] != "# SA 0x1002: Wireshark has no name for aes-gmac" {
		t.Fatalf("esp_sa:\n%s", b)
	}
	c, err := sa.ParseEspSA("esp_sa", b)
	if err != nil || len(c.SAs) != 1 || c.SAs[0].SPI != 0x1001 {
		t.Fatalf("read back: %v %v", c, err)
	}
}
