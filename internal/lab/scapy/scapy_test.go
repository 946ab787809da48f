package scapy

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/espgw/espgw/sa"
)

// SA names every field as esp_peer.py reads it; the ports come only with
// UDP encapsulation, defaulting to 4500 as the SA does.
func TestSA(t *testing.T) {
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	base := sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Src: src, Dst: dst, Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128},
		EncKey: sa.Key{1, 2}, AuthKey: sa.Key{0xff}, ReplayWindow: 64, InitialSeq: 9}
	want := map[string]any{"spi": uint32(0x1001), "mode": "tunnel", "src": "192.0.2.1", "dst": "192.0.2.2", "encap": base.Encap.String(),
		"enc": sa.CipherAESCBC.String(), "enc_key": "0102", "auth": sa.AuthHMACSHA256_128.String(), "auth_key": "ff", "esn": false,
		"initial_seq": base.InitialSeq, "replay_window": base.ReplayWindow}
	if got := SA(&base); !reflect.DeepEqual(got, want) {
		t.Errorf("raw ESP SA:\n got %v\nwant %v", got, want)
	}
	udp := base
	udp.Encap, udp.SrcPort = sa.EncapUDP, 1234
	got := SA(&udp)
	if got["sport"] != uint16(1234) || got["dport"] != uint16(sa.DefaultNATTPort) || got["encap"] != sa.EncapUDP.String() {
		t.Errorf("UDP SA: sport %v dport %v encap %v", got["sport"], got["dport"], got["encap"])
	}
}

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{{"short", 10, "short"}, {"0123456789", 4, "…6789"}, {"", 3, ""}} {
		if got := tail(tc.s, tc.n); got != tc.want {
			t.Errorf("tail(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
