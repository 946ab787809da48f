package tun

import (
	"strings"
	"testing"
)

func TestInnerMTU(t *testing.T) {
	esp := func(ip, udp, iv, block, icv int) Overhead {
		return Overhead{OuterIP: ip, UDP: udp, ESPHeader: 8, IV: iv, Block: block, ICV: icv}
	}
	tests := []struct {
		name  string
		outer int
		o     Overhead
		want  int
	}{
		// 1500-20-8-16-12 = 1444 → 1440 (×16) → 1438: the classic AES-CBC/SHA1 tunnel MTU.
		{"aes-cbc+sha1 v4 raw", 1500, esp(20, 0, 16, 16, 12), 1438},
		{"aes-cbc+sha1 v4 udp", 1500, esp(20, 8, 16, 16, 12), 1422},
		{"aes-cbc+sha1 v6 raw", 1500, esp(40, 0, 16, 16, 12), 1422},
		{"aes-cbc+sha1 v6 udp", 1500, esp(40, 8, 16, 16, 12), 1406},
		{"aes-cbc+sha256 v4 raw", 1500, esp(20, 0, 16, 16, 16), 1438},
		{"aes-cbc+sha512 v4 raw", 1500, esp(20, 0, 16, 16, 32), 1422},
		// 1500-20-8-8-16 = 1448 (×4) → 1446.
		{"aes-gcm-16 v4 raw", 1500, esp(20, 0, 8, 4, 16), 1446},
		{"aes-gcm-16 v6 udp", 1500, esp(40, 8, 8, 4, 16), 1418},
		// block 1 still aligns to 4: 1500-20-8-8-12 = 1452 → 1450.
		{"aes-ctr+sha1 v4 raw", 1500, esp(20, 0, 8, 1, 12), 1450},
		// 1500-20-8-8-12 = 1452 (×8) → 1448 → 1446.
		{"3des+sha1 v4 raw", 1500, esp(20, 0, 8, 8, 12), 1446},
		{"null+sha1 v4 raw", 1500, esp(20, 0, 0, 4, 12), 1458},
		{"aes-cbc+sha1 v4 raw 9000", 9000, esp(20, 0, 16, 16, 12), 8942},
		{"aes-cbc+sha1 v6 raw 1280", 1280, esp(40, 0, 16, 16, 12), 1198},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := InnerMTU(tt.outer, tt.o)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("InnerMTU(%d) = %d, want %d", tt.outer, got, tt.want)
			}
			// The definition: the largest inner length that fits.
			if p := tt.o.Packet(got); p > tt.outer {
				t.Errorf("inner %d gives outer packet %d > %d", got, p, tt.outer)
			}
			if p := tt.o.Packet(got + 1); p <= tt.outer {
				t.Errorf("inner %d+1 still fits (outer %d ≤ %d): MTU not maximal", got, p, tt.outer)
			}
		})
	}
}

func TestInnerMTUExhaustive(t *testing.T) {
	// Against brute force over every size, for every alignment the suites use.
	for _, block := range []int{1, 4, 8, 16} {
		for _, outer := range []int{576, 1280, 1400, 1500, 1501, 1502, 1503, 1517} {
			o := Overhead{OuterIP: 40, UDP: 8, ESPHeader: 8, IV: 8, Block: block, ICV: 16}
			want := 0
			for n := 1; n < outer; n++ {
				if o.Packet(n) <= outer {
					want = n
				}
			}
			got, err := InnerMTU(outer, o)
			if err != nil || got != want {
				t.Errorf("block %d outer %d: got %d, %v; brute force %d", block, outer, got, err, want)
			}
		}
	}
}

func TestInnerMTUErrors(t *testing.T) {
	ok := Overhead{OuterIP: 20, ESPHeader: 8, IV: 16, Block: 16, ICV: 12}
	tests := []struct {
		name  string
		outer int
		o     Overhead
		want  string
	}{
		{"outer IP 30", 1500, Overhead{OuterIP: 30, ESPHeader: 8, Block: 4}, "outer IP header"},
		{"udp 4", 1500, Overhead{OuterIP: 20, UDP: 4, ESPHeader: 8, Block: 4}, "UDP header"},
		{"esp 4", 1500, Overhead{OuterIP: 20, ESPHeader: 4, Block: 4}, "ESP header"},
		{"block 0", 1500, Overhead{OuterIP: 20, ESPHeader: 8, Block: 0}, "block length"},
		{"negative icv", 1500, Overhead{OuterIP: 20, ESPHeader: 8, Block: 4, ICV: -1}, "ICV length"},
		{"tiny outer", 100, ok, "below IPv4's minimum"},
		{"negative outer", -5, ok, "below IPv4's minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := InnerMTU(tt.outer, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("InnerMTU(%d, %+v) error = %v, want it to mention %q", tt.outer, tt.o, err, tt.want)
			}
		})
	}
}
