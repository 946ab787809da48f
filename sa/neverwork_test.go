package sa

import (
	"strings"
	"testing"
)

// SAs that can never carry a packet are refused at load, with the reason.
func TestNeverWorkingSAsRefused(t *testing.T) {
	for _, c := range []struct {
		name, from, to, want string
	}{
		{"spi 0", "spi: 0x1001", "spi: 0", "spi: 0 is reserved"},
		{"spi 1", "spi: 0x1001", "spi: 1", "spi: 1 is reserved"},
		{"spi 255", "spi: 0x1001", "spi: 0xff", "spi: 255 is reserved"},
		{"initial-seq at 2^32-1 without esn", "mode: tunnel", "mode: tunnel\n    initial-seq: 4294967295", "leaves no 32-bit sequence number"},
		{"initial-seq at 2^64-1", "mode: tunnel", "mode: tunnel\n    esn: true\n    initial-seq: 18446744073709551615", "leaves no 64-bit sequence number"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(edit(c.from, c.to)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	// The last usable starts still load.
	for _, ok := range []string{"spi: 256", "spi: 0x1001\n    initial-seq: 4294967294"} {
		if _, err := Parse("t.yaml", []byte(edit("spi: 0x1001", ok))); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	// setkey takes the same rules.
	_, err := ParseSetkey("t", []byte("add 192.0.2.1 192.0.2.2 esp 7 -E aes-cbc 0x"+testEncHex+" -A hmac-sha1 0x"+testAuthHex+";"))
	if err == nil || !strings.Contains(err.Error(), "spi: 7 is reserved") {
		t.Errorf("setkey SPI 7: %v", err)
	}
}
