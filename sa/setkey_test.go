package sa

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSetkeyExampleMatchesYAML(t *testing.T) {
	y, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Load("testdata/example.setkey")
	if err != nil {
		t.Fatal(err)
	}
	// The setkey file says the same as the YAML one, except what setkey
	// cannot say (ESN, initial-seq, TFC padding, lifetimes in packets, the
	// outer-header options).
	for i, want := range y.SAs {
		w := *want
		w.ESN, w.InitialSeq, w.TFCPad, w.Soft, w.Hard, w.Selectors = false, 0, 0, Lifetime{}, Lifetime{}, s.SAs[i].Selectors
		w.DSCP, w.DecapDSCP, w.DF, w.TTL = DSCP{}, DecapKeep, DFCopy, 0
		if !reflect.DeepEqual(s.SAs[i], &w) {
			t.Errorf("SA %d:\n setkey %+v\n yaml   %+v", i, *s.SAs[i], w)
		}
	}
	if got := s.SAs[1].Selectors; len(got) != 1 || got[0].Src != netip.MustParsePrefix("203.0.113.0/24") {
		t.Errorf("inbound policy did not become the selector of SA 0x2001: %v", got)
	}
	if len(s.SPD) != 3 {
		t.Fatalf("%d policies, want 3", len(s.SPD))
	}
	spd, err := NewSPD(s.SPD, s.SAs)
	if err != nil {
		t.Fatal(err)
	}
	ps := spd.Policies()
	if ps[0].Action != Bypass || ps[1].Action != Protect || ps[1].SA != s.SAs[0] || ps[2].Action != Discard {
		t.Errorf("policies in lookup order: %v", ps)
	}
}

func TestSetkeyFreeBSDTunnel(t *testing.T) {
	c, err := Load("testdata/freebsd-tunnel.setkey")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.SAs) != 3 {
		t.Fatalf("%d SAs, want 3", len(c.SAs))
	}
	out, in, v6 := c.SAs[0], c.SAs[1], c.SAs[2]
	want := &SA{
		SPI: 0x10041, Mode: Tunnel,
		Src: netip.MustParseAddr("192.0.2.10"), Dst: netip.MustParseAddr("192.0.2.20"),
		Suite:   Suite{CipherAESCBC, AuthHMACSHA256_128},
		EncKey:  Key("0123456789abcdef"),
		AuthKey: mustHex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"),
	}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("SA 0x10041:\n got  %+v\n want %+v", *out, *want)
	}
	if in.SPI != 0x10042 || string(in.EncKey) != "fedcba9876543210" || len(in.Selectors) != 1 ||
		in.Selectors[0] != (Selector{Src: netip.MustParsePrefix("203.0.113.0/24"), Dst: netip.MustParsePrefix("198.51.100.0/24")}) {
		t.Errorf("SA 0x10042: %+v", *in)
	}
	wantV6 := &SA{
		SPI: 3001, Mode: Transport,
		Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
		Suite:   Suite{CipherAESCTR, AuthHMACSHA512_256},
		EncKey:  mustHex(strings.Repeat("00", 32) + "deadbeef"),
		AuthKey: mustHex(strings.Repeat("00112233445566778899aabbccddeeff", 4)),
	}
	if !reflect.DeepEqual(v6, wantV6) {
		t.Errorf("SA 3001:\n got  %+v\n want %+v", *v6, *wantV6)
	}
	if len(c.SPD) != 2 || c.SPD[0].SA != out || c.SPD[1].SA != v6 || c.SPD[1].Selector.Proto != 6 {
		t.Errorf("SPD: %v", c.SPD)
	}
}

func TestSetkeyLinuxIPsecTools(t *testing.T) {
	c, err := Load("testdata/linux-ipsec-tools.setkey")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.SAs) != 3 {
		t.Fatalf("%d SAs, want 3", len(c.SAs))
	}
	a, b, g := c.SAs[0], c.SAs[1], c.SAs[2]
	want := &SA{
		SPI: 0x201, Mode: Transport,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		Suite:        Suite{Cipher3DES, AuthHMACMD5_96},
		EncKey:       mustHex("7aeaca3f87d060a12f4a4487d5a5c3355920fae69a96c831"),
		AuthKey:      mustHex("c0291ff014dccdd03874d9e8e4cdf3e6"),
		ReplayWindow: 64,
		Soft:         Lifetime{Time: 3000 * time.Second, Bytes: 900000000},
		Hard:         Lifetime{Time: time.Hour, Bytes: 1000000000},
	}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("SA 0x201:\n got  %+v\n want %+v", *a, *want)
	}
	// in and fwd policies name the same selector once.
	if len(b.Selectors) != 1 || b.Selectors[0].Src != netip.MustParsePrefix("192.0.2.2/32") {
		t.Errorf("SA 0x301 selectors: %v", b.Selectors)
	}
	if g.Encap != EncapUDP || g.SrcPort != 4500 || g.DstPort != 4500 || g.Mode != Tunnel || len(g.EncKey) != 36 || g.Suite != (Suite{CipherAESGCM16, AuthNone}) {
		t.Errorf("SA 0x401: %+v", *g)
	}
	spd, err := NewSPD(c.SPD, c.SAs)
	if err != nil {
		t.Fatal(err)
	}
	// setkey: higher priority first. prio 100 > def+10 > def(0) > low.
	var got []string
	for _, p := range spd.Policies() {
		got = append(got, fmt.Sprintf("%d %s", p.Priority, p.Action))
	}
	if want := []string{"-100 bypass", "-10 protect", "1073741824 discard"}; !reflect.DeepEqual(got, want) {
		t.Errorf("policy order %v, want %v", got, want)
	}
	dns := spd.Lookup(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), 17, 53, 40000)
	if dns == nil || dns.Action != Bypass {
		t.Errorf("DNS from port 53: %v", dns)
	}
	if p := spd.Lookup(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), 6, 40000, 80); p == nil || p.SA != a {
		t.Errorf("TCP 192.0.2.1 -> 192.0.2.2: %v, want SA 0x201", p)
	}
}

func TestSetkeyErrors(t *testing.T) {
	const (
		head = "add 192.0.2.1 192.0.2.2 esp 0x1001"
		enc  = "-E rijndael-cbc 0x" + testEncHex
		auth = "-A hmac-sha1 0x" + testAuthHex
	)
	ok := head + "\n  " + enc + "\n  " + auth + ";\n"
	cases := []struct {
		name, in, want string // want follows "t.setkey:LINE: "; LINE is the line marked #<, else 1
	}{
		{"des", head + " -E des-cbc 0x0123456789abcdef #<\n " + auth + ";", head + `: -E: "des-cbc" (did you mean "3des-cbc"?) is not supported`},
		{"short key", head + "\n -E rijndael-cbc 0x" + testEncHex[:30] + " #<\n " + auth + ";", head + ": -E rijndael-cbc: key is 15 bytes, want [16 24 32]"},
		{"odd key", head + "\n -E rijndael-cbc 0x" + testEncHex[:31] + " #<\n " + auth + ";", head + ": -E rijndael-cbc: odd number of hex digits (31)"},
		{"string key length", head + " " + enc + "\n -A hmac-sha1 \"" + testStrKey + "\" #<\n;", head + ": -A hmac-sha1: key is 19 bytes, want 20"},
		{"key without 0x", head + " -E rijndael-cbc " + testEncHex + " " + auth + ";", head + ": -E rijndael-cbc: missing key"},
		{"no -E", head + " " + auth + ";", head + ": -E: missing: an ESP SA needs -E ealgo key"},
		{"no integrity", head + " " + enc + ";", head + ": aes-cbc needs an auth algorithm"},
		{"gcm with auth", head + " -E aes-gcm-16 0x" + testGCMHex + " " + auth + ";", head + ": aes-gcm-16 is an AEAD cipher: auth must be none"},
		{"ah", "add 192.0.2.1 192.0.2.2 ah 0x1001 -A hmac-sha1 0x" + testAuthHex + ";", `add 192.0.2.1 192.0.2.2 ah 0x1001: protocol: "ah": only esp and esp-udp SAs are supported`},
		{"bad spi", "add 192.0.2.1 192.0.2.2 esp 0x" + testEncHex + " " + enc + ";", "add 192.0.2.1 192.0.2.2 esp (a 34-character value, not shown): spi: (a 34-character value, not shown) is not a 32-bit number"},
		{"hostname", "add gw.example.com 192.0.2.2 esp 0x1001 " + enc + " " + auth + ";", `add gw.example.com 192.0.2.2 esp 0x1001: src: "gw.example.com" is not a numeric IPv4 or IPv6 address`},
		{"family", "add 192.0.2.1 2001:db8::2 esp 0x1001 " + enc + " " + auth + ";", "add 192.0.2.1 2001:db8::2 esp 0x1001: src 192.0.2.1 and dst 2001:db8::2 are of different address families"},
		{"unknown option", head + " -Z 1 " + enc + " " + auth + ";", head + `: unknown option "-Z"`},
		{"replay too big", head + " -r 513 " + enc + " " + auth + ";", head + ": -r: 513 bytes is a window of 4104 packets, more than 4096"},
		{"bad mode", head + " -m tunel " + enc + " " + auth + ";", head + `: -m: "tunel" (did you mean "tunnel"?), want tunnel, transport or any`},
		{"option without value", head + " " + enc + " " + auth + " -m;", head + ": -m: missing value"},
		{"duplicate spi", ok + "add 192.0.2.9 192.0.2.2 esp 4097 #<\n " + enc + " " + auth + ";", "add 192.0.2.9 192.0.2.2 esp 0x1001: spi: duplicate SPI for dst 192.0.2.2 (also added on line 1)"},
		{"not ended", ok + "add 192.0.2.1 192.0.2.3 esp 0x1002 #<\n " + enc + "\n", "add 192.0.2.1 192.0.2.3 esp 0x1002: statement not ended by ;"},
		{"quote not closed", ok + head + " -E rijndael-cbc \"abc #<\n", "quoted string never closed"},
		{"getspi", "getspi 192.0.2.1 192.0.2.2 esp 0x1001;", `getspi 192.0.2.1 192.0.2.2 esp 0x1001: "getspi" is not supported`},
		{"unknown command", ok + "spdadd2 a b c; #<", `spdadd2 a b c: "spdadd2" (did you mean "spdadd"?) is not supported`},
		{"policy without SA", ok + "spdadd 198.51.100.0/24 203.0.113.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.9/require; #<", "spdadd 198.51.100.0/24 203.0.113.0/24 any: ipsec esp/tunnel/192.0.2.1-192.0.2.9/require: no tunnel-mode SA from 192.0.2.1 to 192.0.2.9 was added"},
		{"bundle", ok + "spdadd 192.0.2.1 192.0.2.2 any -P out ipsec esp/transport//require ah/transport//require; #<", "spdadd 192.0.2.1 192.0.2.2 any: more than one rule (SA bundles are not supported)"},
		{"ah rule", ok + "spdadd 192.0.2.1 192.0.2.2 any -P out ipsec ah/transport//require; #<", `spdadd 192.0.2.1 192.0.2.2 any: ipsec: "ah": only esp rules are supported`},
		{"icmp type", ok + "spdadd ::/0 ::/0 icmp6 135,0 -P in none; #<", "spdadd ::/0 ::/0 icmp6 135,0: upperspec: ICMP type/code and GRE key selectors are not supported"},
		{"unique mismatch", "add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -u 5 " + enc + " " + auth + ";\nspdadd 192.0.2.1 192.0.2.2 any -P out ipsec esp/transport//unique:5; #<", "spdadd 192.0.2.1 192.0.2.2 any: ipsec esp/transport//unique:5: SA 0x1001 (-u 5) is in tunnel mode, the policy in transport mode"},
		{"unknown reqid", ok + "spdadd 192.0.2.1 192.0.2.2 any -P out ipsec esp/transport//unique:9; #<", "spdadd 192.0.2.1 192.0.2.2 any: ipsec esp/transport//unique:9: no SA added with -u 9"},
		{"bad direction", ok + "spdadd 192.0.2.1 192.0.2.2 any -P up none; #<", `spdadd 192.0.2.1 192.0.2.2 any: -P: direction "up", want out, in or fwd`},
		{"ports without proto", ok + "spdadd 192.0.2.1[53] 192.0.2.2 any -P out none; #<", "spdadd 192.0.2.1[53] 192.0.2.2 any: upperspec: ports need tcp, udp or sctp, not any"},
		{"bad prefix", ok + "spdadd 192.0.2.1/33 192.0.2.2 any -P out none; #<", `spdadd 192.0.2.1/33 192.0.2.2 any: src_range: "192.0.2.1/33" is not an address prefix`},
		{"delete unknown", ok + "delete 192.0.2.1 192.0.2.2 esp 0x9999; #<", "delete 192.0.2.1 192.0.2.2 esp 0x9999: no such SA was added before"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSetkey("t.setkey", []byte(c.in))
			if err == nil {
				t.Fatalf("no error for\n%s", c.in)
			}
			want := fmt.Sprintf("t.setkey:%d: %s", markedLineOr1(c.in), c.want)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error\n  %s\nwant it to contain\n  %s", err, want)
			}
			assertNoSecret(t, "error", err.Error())
		})
	}
}

func markedLineOr1(s string) int {
	for i, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "#<") {
			return i + 1
		}
	}
	return 1
}

// flush, spdflush, dump and delete are understood; delete undoes an add.
func TestSetkeyDelete(t *testing.T) {
	in := "flush; spdflush;\nadd 192.0.2.1 192.0.2.2 esp 0x1001 -E null -A hmac-sha1 0x" + testAuthHex + ";\n" +
		"add 192.0.2.1 192.0.2.2 esp 0x1002 -E null -A hmac-sha1 0x" + testAuthHex + ";\n" +
		"delete 192.0.2.1 192.0.2.2 esp 0x1001; dump esp; spddump;\n"
	c, err := ParseSetkey("t.setkey", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.SAs) != 1 || c.SAs[0].SPI != 0x1002 || c.SAs[0].Suite != (Suite{CipherNull, AuthHMACSHA1_96}) {
		t.Errorf("after delete: %v", c.SAs)
	}
}

// Format detection: setkey text is read as setkey, YAML as YAML.
func TestParseConfigDetectsFormat(t *testing.T) {
	for in, setkey := range map[string]bool{
		"# comment\nadd 192.0.2.1 192.0.2.2 esp 0x1001 -E null -A hmac-md5 0x00112233445566778899aabbccddeeff;": true,
		"flush;": true, "spdflush ;\n": true,
		baseSA: false, "add: 1\n": false, "# add;\nsa: []\n": false,
	} {
		if got := looksLikeSetkey([]byte(in)); got != setkey {
			t.Errorf("looksLikeSetkey(%q) = %v, want %v", in, got, setkey)
		}
	}
}
