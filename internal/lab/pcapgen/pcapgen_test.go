package pcapgen

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

var update = flag.Bool("update", false, "rewrite the bundled captures in scenarios/pcaps")

const bundled = "../../../scenarios/pcaps"

// The committed captures are exactly what the generator writes.
func TestBundledCurrent(t *testing.T) {
	if *update {
		if err := WriteAll(bundled); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range Captures() {
		want, err := c.Generate()
		if err != nil {
			t.Fatal(err)
		}
		again, _ := c.Generate()
		if !bytes.Equal(want, again) {
			t.Fatalf("%s: two generations differ", c.Name)
		}
		got, err := os.ReadFile(filepath.Join(bundled, c.Name))
		if err != nil {
			t.Fatalf("%v (regenerate with: go generate ./internal/pcapgen)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the generator writes: go generate ./internal/pcapgen", c.Name)
		}
		if len(want) > 100<<10 {
			t.Errorf("%s is %d bytes, want < 100 KiB", c.Name, len(want))
		}
	}
}

// Every packet decodes cleanly with checksums that verify.
func TestCapturesDecode(t *testing.T) {
	for _, c := range Captures() {
		b, err := c.Generate()
		if err != nil {
			t.Fatal(err)
		}
		r, err := pcapgo.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if r.LinkType() != layers.LinkTypeRaw {
			t.Fatalf("%s: link type %v, want raw IP", c.Name, r.LinkType())
		}
		n := 0
		for {
			data, _, err := r.ReadPacketData()
			if err != nil {
				break
			}
			n++
			p := gopacket.NewPacket(data, layers.LayerTypeIPv4, gopacket.Default)
			if header.Version(data) == 6 {
				p = gopacket.NewPacket(data, layers.LayerTypeIPv6, gopacket.Default)
			}
			if e := p.ErrorLayer(); e != nil {
				t.Fatalf("%s packet %d: %v", c.Name, n, e.Error())
			}
			if p.TransportLayer() == nil && p.Layer(layers.LayerTypeICMPv4) == nil && p.Layer(layers.LayerTypeICMPv6) == nil {
				t.Fatalf("%s packet %d: no transport layer", c.Name, n)
			}
		}
		if n < 10 {
			t.Errorf("%s: only %d packets", c.Name, n)
		}
	}
}

// tshark, an independent dissector, finds no bad checksum, no malformed
// packet and nothing wrong with the TCP sequence numbers.
func TestCapturesTshark(t *testing.T) {
	labtest.NeedTools(t, "tshark")
	dir := t.TempDir()
	if err := WriteAll(dir); err != nil {
		t.Fatal(err)
	}
	// The judge must see a fault: the same HTTP capture with one byte of its last packet flipped.
	b, _ := os.ReadFile(filepath.Join(dir, "http.pcap"))
	b[len(b)-1] ^= 0x40
	os.WriteFile(filepath.Join(dir, "broken.pcap"), b, 0o644)
	if flagged(t, filepath.Join(dir, "broken.pcap")) == "" {
		t.Fatal("tshark did not flag a capture with a broken checksum: the judge is blind")
	}
	for _, c := range Captures() {
		if s := flagged(t, filepath.Join(dir, c.Name)); s != "" {
			t.Errorf("tshark flags packets of %s:\n%s", c.Name, s)
		}
	}
}

// flagged returns tshark's summary of the packets in file that are
// malformed, have a bad checksum or a TCP sequence problem, or are an
// answerless DNS response.
func flagged(t *testing.T, file string) string {
	return labtest.TsharkFlags(t, file, "_ws.expert.severity >= warning || tcp.analysis.flags || "+
		"dns.flags.response == 1 && dns.count.answers == 0 && dns.flags.rcode == 0")
}
