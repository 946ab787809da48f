package sa

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

// flagListing is one tunnel state of `ip -s xfrm state` (iproute2 6.1),
// its replay-window line's flags given by flags and extra lines after it.
func flagListing(flags string, extra ...string) string {
	lines := []string{
		"src 192.0.2.1 dst 192.0.2.2",
		"\tproto esp spi 0x00001001(4097) reqid 4097(0x00001001) mode tunnel",
		"\treplay-window 32 seq 0x00000000 flag " + flags + " (0x00000000)",
	}
	lines = append(lines, extra...)
	lines = append(lines,
		"\tauth-trunc hmac(sha1) 0x"+testAuthHex+" (160 bits) 96",
		"\tenc cbc(aes) 0x"+testEncHex+" (128 bits)",
		"\tanti-replay context: seq 0x0, oseq 0x5, bitmap 0x00000000",
		"\tsel src 198.51.100.0/24 dst 203.0.113.0/24 uid 0",
		"\tlifetime config:",
		"\t  limit: soft (INF)(bytes), hard (INF)(bytes)",
		"\t  limit: soft (INF)(packets), hard (INF)(packets)",
		"\t  expire add: soft 0(sec), hard 0(sec)",
		"\t  expire use: soft 0(sec), hard 0(sec)",
		"\tlifetime current:",
		"\t  0(bytes), 0(packets)",
		"\t  add 2026-12-01 20:00:00 use -",
		"\tstats:",
		"\t  replay-window 0 replay 0 failed 0",
	)
	return strings.Join(lines, "\n") + "\n"
}

// flagCommand is an `ip xfrm state add` of the same state with words.
func flagCommand(words string) string {
	return "ip xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x1001 reqid 4097 mode tunnel replay-window 32 " + words +
		" auth-trunc 'hmac(sha1)' 0x" + testAuthHex + " 96 enc 'cbc(aes)' 0x" + testEncHex + " sel src 198.51.100.0/24 dst 203.0.113.0/24\n"
}

// Every state flag and extra flag of the kernel is carried into the SA
// where espgw does the same, or refused by name — in a listing, inline or
// on a line of its own, and in commands; never dropped.
func TestXFRMFlagsCarriedOrRefused(t *testing.T) {
	cases := []struct {
		name    string
		listing string // the flags of the replay-window line
		lines   []string
		command string // the same as ip xfrm state add words
		check   func(*SA) bool
		err     string
	}{
		{name: "none", command: "", check: func(s *SA) bool { return s.DSCP == DSCP{} && s.DF == DFCopy && s.DecapDSCP == DecapKeep }},
		{name: "esn", listing: "esn", command: "flag esn", check: func(s *SA) bool { return s.ESN }},
		{name: "decap-dscp", listing: "decap-dscp", command: "flag decap-dscp", check: func(s *SA) bool { return s.DecapDSCP == DecapCopy }},
		{name: "nopmtudisc", listing: "nopmtudisc", command: "flag nopmtudisc", check: func(s *SA) bool { return s.DF == DFClear }},
		{name: "af-unspec", listing: "af-unspec", command: "flag af-unspec", check: func(s *SA) bool { return s.Mode == Tunnel }},
		{name: "dont-encap-dscp inline", listing: "extra_flag dont-encap-dscp", command: "extra-flag dont-encap-dscp",
			check: func(s *SA) bool { return s.DSCP == DSCP{Fixed: true, Value: 0} }},
		{name: "dont-encap-dscp after flags, as iproute2 6.1 prints them", listing: "decap-dscp esnextra_flag dont-encap-dscp", command: "flag decap-dscp esn extra-flag dont-encap-dscp",
			check: func(s *SA) bool { return s.DSCP == DSCP{Fixed: true} && s.ESN && s.DecapDSCP == DecapCopy }},
		{name: "dont-encap-dscp on its own line", lines: []string{"\textra_flag dont-encap-dscp"},
			check: func(s *SA) bool { return s.DSCP == DSCP{Fixed: true} }},
		{name: "flags on their own line", lines: []string{"\tflag nopmtudisc decap-dscp"},
			check: func(s *SA) bool { return s.DF == DFClear && s.DecapDSCP == DecapCopy }},
		{name: "noecn", listing: "noecn", command: "flag noecn", err: "flag noecn is not supported by espgw"},
		{name: "noecn on its own line", lines: []string{"\tflag noecn"}, err: "flag noecn is not supported by espgw"},
		{name: "wildrecv", listing: "wildrecv", command: "flag wildrecv", err: "flag wildrecv is not supported by espgw"},
		{name: "icmp", listing: "icmp", command: "flag icmp", err: "flag icmp is not supported by espgw"},
		{name: "align4", listing: "align4", command: "flag align4", err: "flag align4 is not supported by espgw"},
		{name: "oseq-may-wrap", listing: "extra_flag oseq-may-wrap", command: "extra-flag oseq-may-wrap", err: "extra_flag oseq-may-wrap is not supported by espgw"},
		{name: "unknown bits", listing: "esn 40", err: "flag bits 0x40 unknown to iproute2"},
		{name: "flags as a number", command: "flag 4", err: "name the flags"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inputs := map[string]string{}
			switch {
			case c.lines != nil:
				inputs["listing"] = flagListing("", c.lines...)
			case c.listing != "" || c.name == "none":
				inputs["listing"] = flagListing(c.listing)
			}
			if c.command != "" || c.name == "none" {
				inputs["command"] = flagCommand(c.command)
			}
			for what, in := range inputs {
				cfg, err := ParseConfig("f", []byte(in))
				if c.err != "" {
					if err == nil || !strings.Contains(err.Error(), c.err) {
						t.Errorf("%s: error %v, want one containing %q\n%s", what, err, c.err, in)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v\n%s", what, err, in)
					continue
				}
				if s := cfg.SAs[0]; !c.check(s) {
					t.Errorf("%s: the flags did not reach the SA: dscp %s, df %s, decap-dscp %s, esn %v", what, s.DSCP, s.DF, s.DecapDSCP, s.ESN)
				}
			}
		})
	}
}

// `ip xfrm state` without -s does not print the extra flags: its listing
// would import dont-encap-dscp as dscp: copy, so it is refused.
func TestXFRMListingWithoutStatsRefused(t *testing.T) {
	in := "src 192.0.2.1 dst 192.0.2.2\n\tproto esp spi 0x00001001 reqid 4097 mode tunnel\n\treplay-window 32 \n" +
		"\tauth-trunc hmac(sha1) 0x" + testAuthHex + " 96\n\tenc cbc(aes) 0x" + testEncHex + "\n" +
		"\tanti-replay context: seq 0x0, oseq 0x5, bitmap 0x00000000\n\tsel src 198.51.100.0/24 dst 203.0.113.0/24 \n"
	_, err := ParseConfig("f", []byte(in))
	if err == nil || !strings.Contains(err.Error(), "ip -s xfrm state") {
		t.Fatalf("a listing without -s: error %v, want one asking for ip -s xfrm state", err)
	}
	if _, err := ParseXFRMStates("f", []byte(in)); err != nil {
		t.Errorf("the counters of a listing without -s: %v", err)
	}
}

// if_id and output-mark (route-based VPNs on xfrm interfaces) are read
// from listings and commands, kept by YAML and ip-xfrm, refused by setkey.
func TestXFRMIfIDAndOutputMark(t *testing.T) {
	want := func(s *SA) bool { return s.IfID == 7 && s.OutputMark == Mark{Value: 0x10, Mask: 0xff} }
	for what, in := range map[string]string{
		"listing":         flagListing("", "\toutput-mark 0x10/0xff", "\tif_id 0x7"),
		"listing (mark)":  flagListing("", "\tif_id 0x7", "\toutput-mark 0x10/0xff"),
		"command":         flagCommand("if_id 7 output-mark 0x10 mask 0xff"),
		"command (order)": flagCommand("output-mark 16 mask 255 if_id 0x7"),
	} {
		cfg, err := ParseConfig("f", []byte(in))
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		if !want(cfg.SAs[0]) {
			t.Errorf("%s: if_id %d, output-mark %s", what, cfg.SAs[0].IfID, cfg.SAs[0].OutputMark)
		}
	}
	cfg, err := ParseConfig("f", []byte(flagCommand("if_id 7 output-mark 0x10 mask 0xff")))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []Format{FormatYAML, FormatXFRM} {
		data, err := Encode(cfg, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		back, err := ParseConfig("f", data)
		if err != nil {
			t.Fatalf("%s back: %v\n%s", f, err, data)
		}
		if !want(back.SAs[0]) {
			t.Errorf("%s lost them: if_id %d, output-mark %s\n%s", f, back.SAs[0].IfID, back.SAs[0].OutputMark, data)
		}
	}
	if _, err := Encode(cfg, FormatSetkey); err == nil || !strings.Contains(err.Error(), "if-id, output-mark") {
		t.Errorf("setkey: error %v, want it to name if-id and output-mark", err)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"if-id: 0", "if-id"},
		{"if-id: x", "if-id"},
		{"output-mark: 0x100/0xff", "bits outside its mask"},
		{"output-mark: 0/0", "sets no bit"},
	} {
		in := "sa:\n  - spi: 0x1001\n    mode: tunnel\n    src: 192.0.2.1\n    dst: 192.0.2.2\n    enc: aes-cbc\n    enc-key: 0x" + testEncHex +
			"\n    auth: hmac-sha1-96\n    auth-key: 0x" + testAuthHex + "\n    " + bad.yaml + "\n"
		if _, err := ParseConfig("f", []byte(in)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.yaml, err, bad.want)
		}
	}
}

// setkey(8) has no words for the outer-header options: writing an SA that
// sets one is an error naming it, not a file that silently drops it.
func TestSetkeyRefusesHeaderOptions(t *testing.T) {
	base := func() *SA {
		return &SA{SPI: 0x1001, Mode: Tunnel, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
			Suite: Suite{CipherAESCBC, AuthHMACSHA1_96}, EncKey: mustHex(testEncHex), AuthKey: mustHex(testAuthHex), ReplayWindow: 32}
	}
	for name, set := range map[string]func(*SA){
		"dscp":       func(s *SA) { s.DSCP = DSCP{Fixed: true} },
		"decap-dscp": func(s *SA) { s.DecapDSCP = DecapCopy },
		"df":         func(s *SA) { s.DF = DFClear },
		"ttl":        func(s *SA) { s.TTL = 9 },
	} {
		s := base()
		set(s)
		if _, err := MarshalSetkey(&Config{SAs: []*SA{s}}); err == nil || !strings.Contains(err.Error(), "cannot say "+name) {
			t.Errorf("%s: error %v, want setkey cannot say %s", name, err, name)
		}
	}
}

// testdata/ip-s-xfrm-state-flags.txt is the guest kernel's `ip -s xfrm
// state` (Debian 6.1, iproute2 6.1) of states with every flag espgw
// carries, if_id, output-mark and AES-GCM's three ICV lengths
// (internal/lab/kernelpeer's
// TestKernelListingRoundTrip makes it); each reads into the SA the kernel
// holds. testdata/ip-s-xfrm-state-refused-flags.txt has one state per flag
// espgw cannot follow: each is refused by name.
func TestParseKernelListingsWithFlags(t *testing.T) {
	c, err := Load("testdata/ip-s-xfrm-state-flags.txt")
	if err != nil {
		t.Fatal(err)
	}
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	gcm, cbc, sha1, sha256 := mustHex(testGCMHex), mustHex(testEncHex), mustHex(testAuthHex), mustHex(testAuthHex[:32]+testEncHex)
	want := map[uint32]*SA{
		0x1001: {SPI: 0x1001, Mode: Tunnel, Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Encap: EncapUDP, SrcPort: 4500, DstPort: 4500,
			Suite: Suite{CipherAESGCM16, AuthNone}, EncKey: gcm, ESN: true, ReplayWindow: 64, InitialSeq: 1<<32 | 0x10,
			DSCP: DSCP{Fixed: true}, DF: DFClear, DecapDSCP: DecapCopy,
			Selectors: []Selector{{Src: p("198.51.100.0/24"), Dst: p("203.0.113.0/24")}}},
		0x2002: {SPI: 0x2002, Mode: Tunnel, Src: a("192.0.2.2"), Dst: a("192.0.2.1"),
			Suite: Suite{CipherAESCBC, AuthHMACSHA256_128}, EncKey: cbc, AuthKey: sha256, ReplayWindow: 32,
			IfID: 7, OutputMark: Mark{Value: 0x10, Mask: 0xff}},
		0x3003: {SPI: 0x3003, Mode: Transport, Src: a("192.0.2.1"), Dst: a("192.0.2.2"),
			Suite: Suite{CipherAESCBC, AuthHMACSHA1_96}, EncKey: cbc, AuthKey: sha1, InitialSeq: 5, IfID: 9},
		0x4004: {SPI: 0x4004, Mode: Tunnel, Src: a("2001:db8:1::1"), Dst: a("2001:db8:1::2"),
			Suite: Suite{CipherAESGCM16, AuthNone}, EncKey: gcm, ReplayWindow: 128, DSCP: DSCP{Fixed: true}, DecapDSCP: DecapCopy,
			Selectors: []Selector{{Src: p("2001:db8:2::/64"), Dst: p("2001:db8:3::/64")}}},
		0x7007: {SPI: 0x7007, Mode: Transport, Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Suite: Suite{CipherAESGCM12, AuthNone}, EncKey: gcm},
		0x8008: {SPI: 0x8008, Mode: Transport, Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Suite: Suite{CipherAESGCM8, AuthNone}, EncKey: gcm},
		0x6006: {SPI: 0x6006, Mode: Tunnel, Src: a("192.0.2.2"), Dst: a("192.0.2.1"),
			Suite: Suite{CipherAESCBC, AuthHMACSHA1_96}, EncKey: cbc, AuthKey: sha1, ReplayWindow: 32,
			Selectors: []Selector{{Src: p("0.0.0.0/0"), Dst: p("0.0.0.0/0")}}},
	}
	if len(c.SAs) != len(want) {
		t.Fatalf("%d SAs, want %d", len(c.SAs), len(want))
	}
	for _, s := range c.SAs {
		w := want[s.SPI]
		if w == nil {
			t.Fatalf("unexpected SA %#x", s.SPI)
		}
		sameConfig(t, s.String(), &Config{SAs: []*SA{s}}, &Config{SAs: []*SA{w}})
	}
	// Written back as commands, they read back the same.
	out, err := MarshalXFRM(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseXFRMCommands("back", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	sameConfig(t, "written back", back, &Config{SAs: c.SAs})

	refused, err := os.ReadFile("testdata/ip-s-xfrm-state-refused-flags.txt")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseConfig("refused", refused)
	for _, name := range []string{"flag noecn", "flag wildrecv", "flag icmp", "flag align4", "extra_flag oseq-may-wrap"} {
		if err == nil || !strings.Contains(err.Error(), name+" is not supported by espgw") {
			t.Errorf("error %v, want %s refused", err, name)
		}
	}
}

// RFC 4106's 8- and 12-octet ICVs read from ip xfrm (aead … 64 and 96),
// esp_sa and charon names, and are written back; a length RFC 4106 does
// not have is refused; setkey, which names only the 16-octet one, refuses
// them.
func TestGCMShortICVs(t *testing.T) {
	for bits, c := range map[string]Cipher{"64": CipherAESGCM8, "96": CipherAESGCM12, "128": CipherAESGCM16} {
		in := "ip xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x1001 mode tunnel aead 'rfc4106(gcm(aes))' 0x" + testGCMHex + " " + bits +
			" sel src 198.51.100.0/24 dst 203.0.113.0/24\n"
		cfg, err := ParseConfig("f", []byte(in))
		if err != nil {
			t.Fatalf("%s bits: %v", bits, err)
		}
		if got := cfg.SAs[0].Suite; got != (Suite{Cipher: c}) || got.ICVLen()*8 != map[Cipher]int{CipherAESGCM8: 64, CipherAESGCM12: 96, CipherAESGCM16: 128}[c] {
			t.Errorf("%s bits: suite %s", bits, got)
		}
		for _, f := range []Format{FormatXFRM, FormatYAML, FormatEspSA} {
			data, err := Encode(cfg, f)
			if err != nil {
				t.Fatalf("%s bits as %s: %v", bits, f, err)
			}
			back, err := ParseConfig("back", data)
			if err != nil || back.SAs[0].Suite.Cipher != c {
				t.Errorf("%s bits as %s: read back %v, %v\n%s", bits, f, back, err, data)
			}
		}
		_, err = Encode(cfg, FormatSetkey)
		if c != CipherAESGCM16 && (err == nil || !strings.Contains(err.Error(), "enc "+c.String())) {
			t.Errorf("%s bits as setkey: error %v, want it to name enc %s", bits, err, c)
		}
	}
	in := "ip xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x1001 mode tunnel aead 'rfc4106(gcm(aes))' 0x" + testGCMHex + " 32\n"
	if _, err := ParseConfig("f", []byte(in)); err == nil || !strings.Contains(err.Error(), "rfc4106(gcm(aes)) with a 32-bit ICV: espgw does 64, 96, 128 bits") {
		t.Errorf("a 32-bit ICV: %v", err)
	}
}
