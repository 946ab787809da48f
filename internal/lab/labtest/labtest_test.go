package labtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Get makes the fixture once, however many tests ask; Close closes it
// once, only if it was made, and a failure to close fails the binary.
func TestShared(t *testing.T) {
	var s Shared[*int]
	builds := 0
	build := func() (*int, error) { builds++; v := 42; return &v, nil }
	a := s.Get(t, "the answer", build)
	b := s.Get(t, "the answer", build)
	if builds != 1 || a != b || *a != 42 {
		t.Errorf("%d builds, %p and %p", builds, a, b)
	}
	if v, made := s.Made(); !made || v != a {
		t.Errorf("Made() = %v, %v", v, made)
	}
	code, closes := 0, 0
	s.Close(&code, "the answer", func(*int) error { closes++; return nil })
	if code != 0 || closes != 1 {
		t.Errorf("close: code %d, %d closes", code, closes)
	}
	s.Close(&code, "the answer", func(*int) error { return errors.New("stuck") })
	if code != 1 {
		t.Errorf("a failed close left code %d", code)
	}

	var never Shared[int]
	code = 0
	never.Close(&code, "unmade", func(int) error { t.Error("closed a fixture never made"); return nil })
	if _, made := never.Made(); made || code != 0 {
		t.Errorf("unmade fixture: made %v, code %d", made, code)
	}
}

// tshark finds nothing wrong in a bundled capture, and flags the packet
// whose IPv4 header checksum was broken.
func TestTsharkFlags(t *testing.T) {
	good := filepath.Join("..", "..", "..", "scenarios", "pcaps", "icmp.pcap")
	if got := TsharkFlags(t, good, ""); got != "" {
		t.Fatalf("tshark flags the bundled capture: %s", got)
	}
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	// Raw IP link type: the first packet's IPv4 header starts after the
	// 24-byte file header and the 16-byte record header.
	if b[20] != 101 || b[40] != 0x45 {
		t.Fatalf("icmp.pcap is not a raw-IP capture starting with IPv4: link %d, first byte %#x", b[20], b[40])
	}
	b[50] ^= 0xff
	bad := filepath.Join(t.TempDir(), "bad.pcap")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got := TsharkFlags(t, bad, "")
	if !strings.Contains(got, "192.0.2.10") || strings.Count(got, "\n") != 0 {
		t.Errorf("tshark on a broken checksum: %q, want the first packet alone", got)
	}
	if got := TsharkFlags(t, good, "icmp.type == 0"); !strings.Contains(got, "reply") {
		t.Errorf("the extra filter matched nothing: %q", got)
	}
}
