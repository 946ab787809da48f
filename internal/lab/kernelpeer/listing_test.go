package kernelpeer

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/espgw/espgw/sa"
)

// Keys of the states the listing tests give the guest.
const (
	listingEncKey  = "0xa1b2c3d4e5f6a7b8c9dad1e2f3a4b5c6"
	listingAuthKey = "0xb1c2d3e4f5a6b7c8d9eae1f2a3b4c5d6e7f8a9ba"
	listingSHA256  = "0xb1c2d3e4f5a6b7c8d9eae1f2a3b4c5d6a1b2c3d4e5f6a7b8c9dad1e2f3a4b5c6"
	listingGCMKey  = "0xc1d2e3f4a5b6c7d8e9fac1d2e3f4a5b6c7d8e9fa"
)

// carriedStates are `ip xfrm state add` commands (after "ip") that set
// every state flag and extra flag espgw carries, if_id and output-mark,
// and AES-GCM with each of RFC 4106's ICV lengths,
// each state with reqid = its SPI, as espgw writes them, and replay-seq =
// replay-oseq, the one sequence number espgw keeps.
var carriedStates = []string{
	"xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x1001 reqid 4097 mode tunnel replay-window 64" +
		" flag esn decap-dscp nopmtudisc extra-flag dont-encap-dscp replay-seq 0x10 replay-oseq 0x10 replay-seq-hi 1 replay-oseq-hi 1" +
		" aead rfc4106(gcm(aes)) " + listingGCMKey + " 128 encap espinudp 4500 4500 0.0.0.0 sel src 198.51.100.0/24 dst 203.0.113.0/24",
	"xfrm state add src 192.0.2.2 dst 192.0.2.1 proto esp spi 0x2002 reqid 8194 mode tunnel replay-window 32 flag af-unspec" +
		" enc cbc(aes) " + listingEncKey + " auth-trunc hmac(sha256) " + listingSHA256 + " 128 if_id 7 output-mark 0x10 mask 0xff",
	"xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x3003 reqid 12291 mode transport replay-seq 5 replay-oseq 5" +
		" enc cbc(aes) " + listingEncKey + " auth-trunc hmac(sha1) " + listingAuthKey + " 96 if_id 9",
	"xfrm state add src 2001:db8:1::1 dst 2001:db8:1::2 proto esp spi 0x4004 reqid 16388 mode tunnel replay-window 128" +
		" flag decap-dscp extra-flag dont-encap-dscp aead rfc4106(gcm(aes)) " + listingGCMKey + " 128" +
		" sel src 2001:db8:2::/64 dst 2001:db8:3::/64",
	"xfrm state add src 192.0.2.2 dst 192.0.2.1 proto esp spi 0x6006 reqid 24582 mode tunnel replay-window 32" +
		" enc cbc(aes) " + listingEncKey + " auth-trunc hmac(sha1) " + listingAuthKey + " 96",
	"xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x7007 reqid 28679 mode transport" +
		" aead rfc4106(gcm(aes)) " + listingGCMKey + " 96",
	"xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x8008 reqid 32776 mode transport" +
		" aead rfc4106(gcm(aes)) " + listingGCMKey + " 64",
}

// refusedStates each set one flag espgw refuses, with the words the
// refusal must name.
var refusedStates = map[string]string{
	"flag noecn":               "flag noecn",
	"flag wildrecv":            "flag wildrecv",
	"flag icmp":                "flag icmp",
	"flag align4":              "flag align4",
	"extra-flag oseq-may-wrap": "extra_flag oseq-may-wrap",
}

func quoteArgs(args string) string {
	var b strings.Builder
	b.WriteString("ip")
	for _, a := range strings.Fields(args) {
		b.WriteString(" '" + a + "'")
	}
	return b.String()
}

// TestKernelListingRoundTrip gives the guest's kernel states with every
// flag espgw carries, if_id and output-mark set, lists them with `ip -s
// xfrm state`, imports the listing, writes it back as ip xfrm commands,
// runs those in the guest and lists again: the two listings must show the
// same states, flag for flag. States with a flag espgw cannot follow are
// refused by name when imported from the guest's listing.
func TestKernelListingRoundTrip(t *testing.T) {
	p := sharedPeer(t)
	ctx := context.Background()
	var script strings.Builder
	script.WriteString("set -e\nip xfrm state flush\nip xfrm policy flush\n")
	for _, c := range carriedStates {
		script.WriteString(quoteArgs(c) + "\n")
	}
	script.WriteString("ip -s xfrm state\n")
	first, err := p.Run(ctx, script.String())
	if err != nil {
		t.Fatalf("add the states: %v\n%s", err, first)
	}
	cfg, err := sa.ParseConfig("the guest's ip -s xfrm state", []byte(first))
	if err != nil {
		t.Fatalf("import the guest's listing: %v\n%s", err, first)
	}
	bySPI := map[uint32]*sa.SA{}
	for _, s := range cfg.SAs {
		bySPI[s.SPI] = s
	}
	want := map[uint32]func(*sa.SA) bool{
		0x1001: func(s *sa.SA) bool {
			return s.ESN && s.DecapDSCP == sa.DecapCopy && s.DF == sa.DFClear && s.DSCP == sa.DSCP{Fixed: true} && s.InitialSeq == 1<<32|0x10
		},
		0x2002: func(s *sa.SA) bool {
			return s.IfID == 7 && s.OutputMark == sa.Mark{Value: 0x10, Mask: 0xff} && len(s.Selectors) == 0
		},
		0x3003: func(s *sa.SA) bool { return s.IfID == 9 && s.OutputMark.IsZero() && s.InitialSeq == 5 },
		0x4004: func(s *sa.SA) bool { return s.DecapDSCP == sa.DecapCopy && s.DSCP == sa.DSCP{Fixed: true} && !s.ESN },
		0x7007: func(s *sa.SA) bool { return s.Suite.Cipher == sa.CipherAESGCM12 },
		0x8008: func(s *sa.SA) bool { return s.Suite.Cipher == sa.CipherAESGCM8 },
		// Without af-unspec the kernel carries IPv4 inside only.
		0x6006: func(s *sa.SA) bool {
			return len(s.Selectors) == 1 && s.Selectors[0].Src == netip.MustParsePrefix("0.0.0.0/0") && s.Selectors[0].Dst == netip.MustParsePrefix("0.0.0.0/0")
		},
	}
	for spi, ok := range want {
		if s := bySPI[spi]; s == nil || !ok(s) {
			t.Errorf("SA %#x not imported as the kernel holds it: %+v", spi, s)
		}
	}
	out, err := sa.MarshalXFRM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Run(ctx, "ip xfrm state flush\nip xfrm policy flush\n"+string(out)+"\nip -s xfrm state\n")
	if err != nil {
		t.Fatalf("re-add what espgw wrote: %v\n%s", err, out)
	}
	if a, b := stateBlocks(first), stateBlocks(second); !slices.Equal(a, b) {
		t.Errorf("the states differ after the round trip:\nfirst:\n%s\nsecond:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}

	for words, name := range refusedStates {
		add := quoteArgs("xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x5005 reqid 20485 mode tunnel " + words +
			" enc cbc(aes) " + listingEncKey + " auth-trunc hmac(sha1) " + listingAuthKey + " 96")
		listing, err := p.Run(ctx, "set -e\nip xfrm state flush\n"+add+"\nip -s xfrm state\n")
		if err != nil {
			t.Fatalf("%s: %v\n%s", words, err, listing)
		}
		_, err = sa.ParseConfig("listing", []byte(listing))
		if err == nil || !strings.Contains(err.Error(), name+" is not supported by espgw") {
			t.Errorf("%s: the guest's listing imported with error %v, want %q refused\n%s", words, err, name, listing)
		}
	}
	if _, err := p.Run(ctx, "ip xfrm state flush\nip xfrm policy flush"); err != nil {
		t.Error(err)
	}
}

// stateBlocks splits a listing into its states, sorted, without what the
// kernel counts or stamps (lifetime current, stats).
func stateBlocks(listing string) []string {
	var blocks []string
	var cur []string
	skip := false
	flush := func() {
		if cur != nil {
			blocks = append(blocks, strings.Join(cur, "\n"))
		}
		cur, skip = nil, false
	}
	for _, l := range strings.Split(listing, "\n") {
		switch t := strings.TrimSpace(l); {
		case t == "":
		case !strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, " "):
			flush()
			cur = []string{l}
		case t == "lifetime current:" || t == "stats:":
			skip = true
		case t == "lifetime config:":
			skip = false
			cur = append(cur, l)
		case !skip:
			cur = append(cur, l)
		}
	}
	flush()
	slices.Sort(blocks)
	return blocks
}

// TestKernelTakesPoliciesForTheDevice installs what `espgw sa convert --to
// ip-xfrm --local 198.51.100.129` makes of gw1's setkey file in the guest:
// the kernel must take every command, and hold gw1's outbound policies as
// the device's inbound and forward ones, gw1's inbound one as its
// outbound one, gw1's bypass as allow policies both ways, and nothing of
// gw1's discard.
func TestKernelTakesPoliciesForTheDevice(t *testing.T) {
	p := sharedPeer(t)
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "sa", "testdata", "gw1.setkey"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := sa.ConvertFor("gw1.setkey", data, "", sa.FormatXFRM, netip.MustParseAddr("198.51.100.129"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Run(ctx, "ip xfrm state flush\nip xfrm policy flush\n"+string(script)+"\nip xfrm policy\nip xfrm state flush\nip xfrm policy flush\n")
	if err != nil {
		t.Fatalf("the guest refused the commands: %v\n%s", err, out)
	}
	var blocks []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "src ") {
			blocks = append(blocks, "")
		}
		if len(blocks) > 0 {
			blocks[len(blocks)-1] += " " + l
		}
	}
	var pols []string
	for _, block := range blocks {
		f := strings.Fields(block)[1:]
		if slices.Contains(f, "socket") {
			continue // the guest's own per-socket policies
		}
		dir := ""
		if i := slices.Index(f, "dir"); i >= 0 && i+1 < len(f) {
			dir = f[i+1]
		}
		action := "protect"
		if slices.Contains(f, "allow") || !slices.Contains(f, "tmpl") {
			action = "allow"
		}
		if slices.Contains(f, "block") {
			action = "block"
		}
		port := ""
		for _, w := range []string{"sport", "dport"} {
			if i := slices.Index(f, w); i >= 0 {
				port = " " + w + " " + f[i+1]
			}
		}
		pols = append(pols, f[0]+" "+f[2]+port+" "+dir+" "+action)
	}
	slices.Sort(pols)
	want := []string{
		"198.51.100.0/25 203.0.113.0/24 dport 22 fwd allow",
		"198.51.100.0/25 203.0.113.0/24 dport 22 in allow",
		"198.51.100.0/25 203.0.113.0/24 fwd protect",
		"198.51.100.0/25 203.0.113.0/24 in protect",
		"203.0.113.0/24 198.51.100.0/25 out protect",
		"203.0.113.0/24 198.51.100.0/25 sport 22 out allow",
	}
	if !slices.Equal(pols, want) {
		t.Errorf("the guest holds the policies\n%s\nwant\n%s\n%s", strings.Join(pols, "\n"), strings.Join(want, "\n"), out)
	}
}
