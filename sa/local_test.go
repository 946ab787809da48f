package sa

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

// ip-xfrm output for a host (--local) turns every policy to that host's
// view: from gw1's file, the appliance gets dir in and fwd where gw1 has
// dir out, dir out where gw1 has dir in, gw1's bypass as allow both ways
// and no counterpart of gw1's discard; gw1 gets its file as it is.
func TestMarshalXFRMForTurnsPoliciesToTheHost(t *testing.T) {
	data, err := os.ReadFile("testdata/gw1.setkey")
	if err != nil {
		t.Fatal(err)
	}
	const (
		gwNets  = "src 198.51.100.0/25 dst 203.0.113.0/24"
		devNets = "src 203.0.113.0/24 dst 198.51.100.0/25"
		toDev   = "tmpl src 192.0.2.1 dst 198.51.100.129 proto esp reqid 4097 mode tunnel level required"
		toGw    = "tmpl src 198.51.100.129 dst 192.0.2.1 proto esp reqid 8193 mode tunnel level required"
	)
	cases := []struct {
		local     string
		want, not []string
	}{{
		local: "198.51.100.129",
		want: []string{
			"ip xfrm policy add " + gwNets + " dir in priority 9 " + toDev,
			"ip xfrm policy add " + gwNets + " dir fwd priority 9 " + toDev,
			"ip xfrm policy add " + devNets + " dir out priority 1073741835 " + toGw,
			"ip xfrm policy add " + gwNets + " proto 6 dport 22 dir in action allow",
			"ip xfrm policy add " + gwNets + " proto 6 dport 22 dir fwd action allow",
			"ip xfrm policy add " + devNets + " proto 6 sport 22 dir out action allow",
			"# spd[2] (discard) is 192.0.2.1's outbound policy: this host has none like it.",
		},
		not: []string{gwNets + " dir out", devNets + " dir in", "action block"},
	}, {
		local: "192.0.2.1",
		want: []string{
			"ip xfrm policy add " + gwNets + " dir out priority 9 " + toDev,
			"ip xfrm policy add " + devNets + " dir in " + toGw,
			"ip xfrm policy add " + devNets + " dir fwd " + toGw,
			"ip xfrm policy add " + gwNets + " proto 6 dport 22 dir out action allow",
			"ip xfrm policy add src 0.0.0.0/0 dst 0.0.0.0/0 dir out priority 1073741834 action block",
		},
		not: []string{gwNets + " dir in", devNets + " dir out"},
	}}
	for _, c := range cases {
		out, err := ConvertFor("gw1.setkey", data, "", FormatXFRM, netip.MustParseAddr(c.local))
		if err != nil {
			t.Fatalf("for %s: %v", c.local, err)
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w+"\n") {
				t.Errorf("for %s: no line %q in\n%s", c.local, w, out)
			}
		}
		for _, n := range c.not {
			if strings.Contains(string(out), n) {
				t.Errorf("for %s: %q in\n%s", c.local, n, out)
			}
		}
		if strings.Contains(string(out), "priority -") {
			t.Errorf("for %s: a negative priority, which ip xfrm refuses:\n%s", c.local, out)
		}
		back, err := ParseXFRMCommands("out", out)
		if err != nil {
			t.Fatalf("for %s: the output does not read back: %v\n%s", c.local, err, out)
		}
		if len(back.SAs) != 2 {
			t.Errorf("for %s: %d SAs read back", c.local, len(back.SAs))
		}
	}
}

// A local address no SA is from or to, or one SA is neither from nor to,
// is an error; so is a local address for a format that does not use it.
func TestConvertForRefusesALocalAddressItCannotUse(t *testing.T) {
	data, err := os.ReadFile("testdata/gw1.setkey")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		local string
		to    Format
		data  string
		want  string
	}{
		{"192.0.2.9", FormatXFRM, string(data), "local address 192.0.2.9: no SA is from or to it (the SAs' ends are 192.0.2.1, 198.51.100.129)"},
		{"192.0.2.1", FormatYAML, string(data), "a local address is for ip-xfrm output only: yaml output"},
		{"192.0.2.1", FormatSetkey, string(data), "for ip-xfrm output only"},
		{"192.0.2.1", FormatEspSA, string(data), "for ip-xfrm output only"},
		{"192.0.2.1", FormatXFRM, string(data) + "add 192.0.2.7 192.0.2.8 esp 0x3001 -m tunnel\n\t-E rijndael-cbc 0x" + testEncHex + "\n\t-A hmac-sha1 0x" + testAuthHex + " ;\n",
			"SA 0x3001 (192.0.2.7→192.0.2.8) is neither from nor to it"},
	}
	for _, c := range cases {
		_, err := ConvertFor("gw1.setkey", []byte(c.data), "", c.to, netip.MustParseAddr(c.local))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--local %s --to %s: error %v, want %q", c.local, c.to, err, c.want)
		}
	}
}
