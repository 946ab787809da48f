package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/labtest"
)

// espgw sa convert writes every format, each file of them reads back
// (espgw sa convert --to yaml gives the same YAML), `espgw pcap open`
// takes any of them, an error names file, line and field without a key,
// and output files are the owner's only.
func TestSAConvert(t *testing.T) {
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	yamlFile := filepath.Join(dir, "sa.yaml")
	os.WriteFile(yamlFile, []byte(saYAML), 0o600)
	in := filepath.Join(dir, "in.pcap")
	rawCapture(t, in)
	sealed := filepath.Join(dir, "sealed.pcap")
	if _, errOut, code := run(bin, "pcap", "seal", "--sa", yamlFile, in, sealed); code != 0 {
		t.Fatalf("seal: %s", errOut)
	}
	canonical, errOut, code := run(bin, "sa", "convert", "--to", "yaml", yamlFile)
	if code != 0 {
		t.Fatalf("convert to yaml: %s", errOut)
	}
	for _, f := range []string{"setkey", "ip-xfrm", "esp-sa"} {
		out := filepath.Join(dir, "sa."+f)
		os.WriteFile(out, []byte("world-readable before"), 0o644)
		if _, errOut, code := run(bin, "sa", "convert", "--to", f, yamlFile, out); code != 0 {
			t.Fatalf("convert to %s: %s", f, errOut)
		}
		if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s written with mode %v, want 0600", f, fi.Mode().Perm())
		}
		back, errOut, code := run(bin, "sa", "convert", "--to", "yaml", out)
		if code != 0 {
			t.Fatalf("%s back to yaml: %s", f, errOut)
		}
		// esp_sa carries no mode, encapsulation or window: this SA has
		// the values its reader gives them.
		if back != canonical {
			t.Errorf("%s round trip:\n%s\nwant\n%s", f, back, canonical)
		}
		opened := filepath.Join(dir, "opened-"+f+".pcap")
		if out, errOut, code := run(bin, "pcap", "open", "--sa", out, sealed, opened); code != 0 || !strings.Contains(out, "1 packets opened") {
			t.Errorf("pcap open with the %s file: exit %d\n%s%s", f, code, out, errOut)
		}
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("ip xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x1001 mode tunnel enc 'cbc(aes)' 0x00112233445566778899aabbccddee auth-trunc 'hmac(sha1)' 0x0102030405060708090a0b0c0d0e0f1011121314 96\n"), 0o600)
	_, errOut, code = run(bin, "sa", "convert", "--to", "setkey", bad)
	if code == 0 || !strings.Contains(errOut, "bad.txt:1: xfrm state add spi 0x1001: enc: key is 15 bytes") {
		t.Errorf("bad key length: exit %d, %q", code, errOut)
	}
	if strings.Contains(errOut, "0011223344") || strings.Contains(errOut, "0102030405") {
		t.Errorf("error shows a key: %s", errOut)
	}
	if _, errOut, code := run(bin, "sa", "convert", "--to", "pem", yamlFile); code == 0 || !strings.Contains(errOut, "cannot write SA format") {
		t.Errorf("--to pem: exit %d, %q", code, errOut)
	}
}
