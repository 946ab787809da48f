package kernelpeer

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/sa"
)

func key(n int, b byte) sa.Key {
	k := make(sa.Key, n)
	for i := range k {
		k[i] = b
	}
	return k
}

func TestXFRMCommands(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	a6, b6 := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	nets := []sa.Selector{{Src: netip.MustParsePrefix("198.51.100.0/24"), Dst: netip.MustParsePrefix("203.0.113.0/24")}}
	tests := []struct {
		name string
		sa   sa.SA
		dir  Direction
		want []string
	}{{
		name: "aes-cbc sha1 tunnel raw out",
		sa: sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Src: a, Dst: b, Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96},
			EncKey: key(16, 0x11), AuthKey: key(20, 0x22), ReplayWindow: 32, Selectors: nets},
		dir: Outbound,
		want: []string{
			"xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x00001001 reqid 4097 mode tunnel replay-window 32 enc cbc(aes) 0x" + strings.Repeat("11", 16) + " auth-trunc hmac(sha1) 0x" + strings.Repeat("22", 20) + " 96 sel src 198.51.100.0/24 dst 203.0.113.0/24",
			"xfrm policy add src 198.51.100.0/24 dst 203.0.113.0/24 dir out tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 4097 mode tunnel level required",
		},
	}, {
		name: "gcm tunnel udp esn in, across 2^32",
		sa: sa.SA{SPI: 0x2002, Mode: sa.Tunnel, Src: a, Dst: b, Encap: sa.EncapUDP, SrcPort: 4500, DstPort: 4500, Suite: sa.Suite{Cipher: sa.CipherAESGCM16},
			EncKey: key(20, 0x33), ESN: true, ReplayWindow: 128, InitialSeq: 1<<32 | 5, Selectors: nets},
		dir: Inbound,
		want: []string{
			"xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x00002002 reqid 8194 mode tunnel replay-window 128 flag esn replay-seq 5 replay-oseq 5 replay-seq-hi 1 replay-oseq-hi 1 aead rfc4106(gcm(aes)) 0x" + strings.Repeat("33", 20) + " 128 encap espinudp 4500 4500 0.0.0.0 sel src 198.51.100.0/24 dst 203.0.113.0/24",
			"xfrm policy add src 198.51.100.0/24 dst 203.0.113.0/24 dir in tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 8194 mode tunnel level required",
			"xfrm policy add src 198.51.100.0/24 dst 203.0.113.0/24 dir fwd tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 8194 mode tunnel level required",
		},
	}, {
		name: "3des md5 transport v6 with lifetimes and tfc",
		sa: sa.SA{SPI: 0x300, Mode: sa.Transport, Src: a6, Dst: b6, Suite: sa.Suite{Cipher: sa.Cipher3DES, Auth: sa.AuthHMACMD5_96},
			EncKey: key(24, 0x44), AuthKey: key(16, 0x55), TFCPad: 100,
			Soft: sa.Lifetime{Bytes: 1000, Time: time.Minute}, Hard: sa.Lifetime{Packets: 10}},
		dir: Inbound,
		want: []string{
			"xfrm state add src 2001:db8::1 dst 2001:db8::2 proto esp spi 0x00000300 reqid 768 mode transport enc cbc(des3_ede) 0x" + strings.Repeat("44", 24) + " auth-trunc hmac(md5) 0x" + strings.Repeat("55", 16) + " 96 tfcpad 100 limit byte-soft 1000 limit time-soft 60 limit packet-hard 10",
			"xfrm policy add src 2001:db8::1/128 dst 2001:db8::2/128 dir in tmpl src 2001:db8::1 dst 2001:db8::2 proto esp reqid 768 mode transport level required",
		},
	}, {
		name: "aes-ctr sha512 transport udp with a port selector",
		sa: sa.SA{SPI: 0x400, Mode: sa.Transport, Src: a, Dst: b, Encap: sa.EncapUDP, SrcPort: 4501, DstPort: 4502,
			Suite:  sa.Suite{Cipher: sa.CipherAESCTR, Auth: sa.AuthHMACSHA512_256},
			EncKey: key(36, 0x66), AuthKey: key(64, 0x77),
			Selectors: []sa.Selector{{Proto: 17, DstPorts: sa.PortRange{Lo: 53, Hi: 53}}}},
		dir: Outbound,
		want: []string{
			"xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x00000400 reqid 1024 mode transport enc rfc3686(ctr(aes)) 0x" + strings.Repeat("66", 36) + " auth-trunc hmac(sha512) 0x" + strings.Repeat("77", 64) + " 256 encap espinudp 4501 4502 0.0.0.0 sel src 0.0.0.0/0 dst 0.0.0.0/0 proto 17 dport 53",
			"xfrm policy add src 0.0.0.0/0 dst 0.0.0.0/0 proto 17 dport 53 dir out tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 1024 mode transport level required",
		},
	}, {
		name: "sha384",
		sa: sa.SA{SPI: 0x500, Mode: sa.Transport, Src: a, Dst: b, Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA384_192},
			EncKey: key(32, 0x88), AuthKey: key(48, 0x99)},
		dir: Outbound,
		want: []string{
			"xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x00000500 reqid 1280 mode transport enc cbc(aes) 0x" + strings.Repeat("88", 32) + " auth-trunc hmac(sha384) 0x" + strings.Repeat("99", 48) + " 192",
			"xfrm policy add src 192.0.2.1/32 dst 192.0.2.2/32 dir out tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 1280 mode transport level required",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmds, err := XFRMCommands(&tt.sa, tt.dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range cmds {
				got = append(got, strings.Join(c.Args, " "))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestXFRMCommandsRejects(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	good := sa.SA{SPI: 0x1001, Mode: sa.Transport, Src: a, Dst: b, Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96},
		EncKey: key(16, 1), AuthKey: key(20, 2)}
	tests := []struct {
		name   string
		change func(*sa.SA)
		want   string
	}{
		{"short key", func(s *sa.SA) { s.EncKey = key(15, 1) }, "enc-key"},
		{"mixed families", func(s *sa.SA) { s.Dst = netip.MustParseAddr("2001:db8::2") }, "different address families"},
		{"reserved spi", func(s *sa.SA) { s.SPI = 200 }, "reserved"},
		{"esn without window", func(s *sa.SA) { s.ESN = true }, "replay window"},
		{"64-bit seq without esn", func(s *sa.SA) { s.InitialSeq = 1 << 32 }, "without esn"},
		{"tunnel without selectors", func(s *sa.SA) { s.Mode = sa.Tunnel }, "needs selectors"},
		{"port range", func(s *sa.SA) {
			s.Selectors = []sa.Selector{{Proto: 6, DstPorts: sa.PortRange{Lo: 1, Hi: 1024}}}
		}, "one port"},
		{"ports without protocol", func(s *sa.SA) {
			s.Selectors = []sa.Selector{{DstPorts: sa.PortRange{Lo: 80, Hi: 80}}}
		}, "ports need proto"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good
			tt.change(&s)
			_, err := XFRMCommands(&s, Outbound)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %v, want one saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "0101") {
				t.Errorf("error shows key material: %v", err)
			}
		})
	}
}

func TestCommandStringHidesKeys(t *testing.T) {
	s := sa.SA{SPI: 0x1001, Mode: sa.Transport, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, EncKey: key(16, 0xab), AuthKey: key(32, 0xcd)}
	c, err := StateCommand(&s)
	if err != nil {
		t.Fatal(err)
	}
	str := c.String()
	if strings.Contains(str, "abab") || strings.Contains(str, "cdcd") {
		t.Errorf("String shows a key: %s", str)
	}
	if !strings.Contains(str, "<16-byte key>") || !strings.Contains(str, "<32-byte key>") {
		t.Errorf("String does not name the key lengths: %s", str)
	}
	if sc := script([]Command{c}); !strings.Contains(sc, " 0x"+strings.Repeat("ab", 16)+" ") {
		t.Errorf("script lost the key: %s", sc)
	}
}
