package sa

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/espgw/espgw/internal/errlist"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

const baseSA = `sa:
  - spi: 0x1001
    mode: tunnel
    src: 192.0.2.1
    dst: 192.0.2.2
    enc: aes-cbc
    enc-key: 0x` + testEncHex + `
    auth: hmac-sha1-96
    auth-key: 0x` + testAuthHex + `
`

// edit returns baseSA with one line replaced (or removed when to is "").
func edit(from, to string) string {
	if !strings.Contains(baseSA, from) {
		panic("edit: no " + from)
	}
	if to == "" {
		lines := strings.Split(baseSA, "\n")
		for i, l := range lines {
			if strings.Contains(l, from) {
				return strings.Join(append(lines[:i:i], lines[i+1:]...), "\n")
			}
		}
	}
	return strings.Replace(baseSA, from, to, 1)
}

func TestParseYAMLExample(t *testing.T) {
	c, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.SAs) != 2 || len(c.SPD) != 3 {
		t.Fatalf("got %d SAs and %d policies, want 2 and 3", len(c.SAs), len(c.SPD))
	}
	a, b := c.SAs[0], c.SAs[1]
	wantA := &SA{
		SPI: 0x1001, Mode: Tunnel,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		Suite:        Suite{CipherAESCBC, AuthHMACSHA1_96},
		EncKey:       mustHex("00112233445566778899aabbccddeeff"),
		AuthKey:      mustHex("0102030405060708090a0b0c0d0e0f1011121314"),
		ReplayWindow: 64,
		TTL:          64,
		Soft:         Lifetime{Bytes: 900e6, Packets: 900000, Time: 50 * time.Minute},
		Hard:         Lifetime{Bytes: 1e9, Packets: 1000000, Time: time.Hour},
		Selectors: []Selector{{
			Src: netip.MustParsePrefix("198.51.100.0/24"),
			Dst: netip.MustParsePrefix("203.0.113.0/24"),
		}},
	}
	if !reflect.DeepEqual(a, wantA) {
		t.Errorf("sa[0] = %+v\nwant     %+v", *a, *wantA)
	}
	wantB := &SA{
		SPI: 0x2001, Mode: Tunnel,
		Src: netip.MustParseAddr("192.0.2.2"), Dst: netip.MustParseAddr("192.0.2.1"),
		Encap: EncapUDP, SrcPort: 4500, DstPort: 4501,
		Suite:        Suite{CipherAESGCM16, AuthNone},
		EncKey:       mustHex("000102030405060708090a0b0c0d0e0f10111213"),
		ESN:          true,
		ReplayWindow: 4096,
		InitialSeq:   0xfffffff0,
		TFCPad:       256,
		DSCP:         DSCP{Fixed: true, Value: 46},
		DecapDSCP:    DecapCopy,
		DF:           DFClear,
		TTL:          32,
	}
	if !reflect.DeepEqual(b, wantB) {
		t.Errorf("sa[1] = %+v\nwant     %+v", *b, *wantB)
	}
	if c.SPD[1].SA != a || c.SPD[1].Action != Protect || c.SPD[0].Action != Bypass || c.SPD[2].Action != Discard {
		t.Errorf("policies not bound as written: %v", c.SPD)
	}
}

// The README's example is the one the tests load.
func TestReadmeExampleIsTested(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"testdata/example.yaml", "testdata/example.setkey"} {
		ex, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(readme, ex) {
			t.Errorf("README.md does not contain %s verbatim", f)
		}
	}
}

func mustHex(s string) Key {
	k, err := ParseKeyHex(s)
	if err != nil {
		panic(err)
	}
	return k
}

// Keys as users write them, including leading zero bytes that a YAML
// library would drop if it read 0x… as a number.
func TestKeyForms(t *testing.T) {
	want := mustHex("000000000000000000000000000000ff")
	for _, form := range []string{
		"0x000000000000000000000000000000ff",
		"0X000000000000000000000000000000FF",
		`"0x000000000000000000000000000000ff"`,
		`'0x000000000000000000000000000000ff'`,
		"000000000000000000000000000000ff",
		`"000000000000000000000000000000ff"`,
		"00000000000000000000000000000255" + "", // all digits: YAML would make it an int
	} {
		in := edit("enc-key: 0x"+testEncHex, "enc-key: "+form)
		sas, err := Parse("t.yaml", []byte(in))
		if err != nil {
			t.Errorf("%s: %v", form, err)
			continue
		}
		got := sas[0].EncKey
		w := want
		if strings.HasSuffix(form, "255") {
			w = mustHex("00000000000000000000000000000255")
		}
		if !bytes.Equal(got, w) {
			t.Errorf("%s: read %x, want %x", form, []byte(got), []byte(w))
		}
	}
}

func TestRandomKeys(t *testing.T) {
	cases := []struct {
		enc, auth, encKey string
		encLen, authLen   int
	}{
		{"aes-cbc", "hmac-sha1-96", "random", 16, 20},
		{"aes-cbc", "hmac-sha2-512-256", "random-256", 32, 64},
		{"aes-cbc", "hmac-sha2-384-192", "random-192", 24, 48},
		{"3des-cbc", "hmac-md5-96", "random", 24, 16},
		{"aes-ctr", "hmac-sha2-256-128", "random-256", 36, 32},
		{"aes-gcm-16", "none", "random", 20, 0},
	}
	for _, c := range cases {
		in := fmt.Sprintf("sa:\n  - {spi: 0x1001, src: 192.0.2.1, dst: 192.0.2.2, enc: %s, enc-key: %s, auth: %s", c.enc, c.encKey, c.auth)
		if c.authLen > 0 {
			in += ", auth-key: random"
		}
		in += "}\n"
		sas1, err := Parse("t.yaml", []byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		sas2, _ := Parse("t.yaml", []byte(in))
		s := sas1[0]
		if len(s.EncKey) != c.encLen || len(s.AuthKey) != c.authLen {
			t.Errorf("%s/%s %s: keys of %d and %d bytes, want %d and %d", c.enc, c.auth, c.encKey, len(s.EncKey), len(s.AuthKey), c.encLen, c.authLen)
		}
		if bytes.Equal(s.EncKey, sas2[0].EncKey) {
			t.Errorf("%s: two loads drew the same random key", c.enc)
		}
	}
}

// Every error names file:line, the entry and the field, and shows no key.
func TestParseYAMLErrors(t *testing.T) {
	const e = "sa[0] (spi 0x1001): "
	cases := []struct {
		name, in string
		want     string // expected after "t.yaml:LINE: "; LINE is the line marked #<, else the entry's line
	}{
		{"short enc key", edit("enc-key: 0x"+testEncHex, "enc-key: 0x"+testEncHex[:30]+" #<"), e + "enc-key: 15 bytes, want [16 24 32]"},
		{"long auth key", edit("auth-key: 0x"+testAuthHex, "auth-key: 0x"+testAuthHex+"00 #<"), e + "auth-key: 21 bytes, want 20"},
		{"odd hex", edit("enc-key: 0x"+testEncHex, "enc-key: 0x"+testEncHex[:31]+" #<"), e + "enc-key: odd number of hex digits (31)"},
		{"not hex", edit("enc-key: 0x"+testEncHex, "enc-key: 0x"+testEncHex[:10]+"zz"+testEncHex[12:]+" #<"), e + "enc-key: not hexadecimal (character 11 of the key)"},
		{"key with space", edit("enc-key: 0x"+testEncHex, "enc-key: 0x"+testEncHex[:16]+" "+testEncHex[16:]+" #<"), e + "enc-key: not hexadecimal"},
		{"empty key", edit("enc-key: 0x"+testEncHex, `enc-key: "" #<`), e + "enc-key: empty key"},
		{"key is a list", edit("enc-key: 0x"+testEncHex, "enc-key: [0x"+testEncHex+"] #<"), e + "enc-key: want a single value, got a list"},
		{"3des key length", mark(edit("enc: aes-cbc", "enc: 3des-cbc"), "enc-key:"), e + "enc-key: 16 bytes, want 24"},
		{"missing enc-key", edit("enc-key: 0x"+testEncHex, ""), e + "enc-key: missing ([16 24 32] bytes)"},
		{"missing auth-key", edit("auth-key: 0x"+testAuthHex, ""), e + "auth-key: missing (20 bytes)"},
		{"missing spi", strings.Replace(edit("  - spi: 0x1001", "  - mode: tunnel"), "    mode: tunnel\n", "", 1), "sa[0]: spi: missing"},
		{"missing dst", edit("dst: 192.0.2.2", ""), e + "dst: missing"},
		{"unknown field", edit("enc-key: 0x"+testEncHex, "enc_key: 0x"+testEncHex+" #<"), e + "unknown field"},
		{"unknown short field", edit("mode: tunnel", "mdoe: tunnel #<"), e + `unknown field "mdoe" (did you mean "mode"?) (want one of spi, mode,`},
		{"repeated field", edit("mode: tunnel", "mode: tunnel\n    mode: transport #<"), e + "mode: given twice (first on line 3)"},
		{"bad spi", edit("spi: 0x1001", "spi: 0x100000000 #<"), "sa[0]: spi: \"0x100000000\" is not a 32-bit number"},
		{"spi not a number", edit("spi: 0x1001", "spi: one #<"), `sa[0]: spi: "one" is not a 32-bit number`},
		{"bad mode", edit("mode: tunnel", "mode: tunel #<"), e + `mode: "tunel" (did you mean "tunnel"?), want tunnel or transport`},
		{"dscp too big", edit("mode: tunnel", "mode: tunnel\n    dscp: 64 #<"), e + `dscp: "64", want copy or a DSCP value 0..63`},
		{"dscp word", edit("mode: tunnel", "mode: tunnel\n    dscp: ef #<"), e + `dscp: "ef", want copy or a DSCP value 0..63`},
		{"bad df", edit("mode: tunnel", "mode: tunnel\n    df: yes #<"), e + `df: "yes", want copy, set or clear`},
		{"bad decap-dscp", edit("mode: tunnel", "mode: tunnel\n    decap-dscp: true #<"), e + `decap-dscp: "true", want keep or copy`},
		{"ttl zero", edit("mode: tunnel", "mode: tunnel\n    ttl: 0 #<"), e + `ttl: "0", want an outer TTL 1..255`},
		{"ttl too big", edit("mode: tunnel", "mode: tunnel\n    ttl: 256 #<"), e + `ttl: "256", want an outer TTL 1..255`},
		{"dscp in transport mode", edit("mode: tunnel", "mode: transport\n    dscp: 10"), e + "dscp: transport mode has no outer header"},
		{"df on IPv6 outer", strings.Replace(strings.Replace(edit("mode: tunnel", "mode: tunnel\n    df: set"), "192.0.2.1", "2001:db8::1", 1), "192.0.2.2", "2001:db8::2", 1), e + "df: IPv6 outer headers have no DF bit"},
		{"bad src", edit("src: 192.0.2.1", "src: 192.0.2.300 #<"), e + `src: "192.0.2.300" is not an IPv4 or IPv6 address`},
		{"family mismatch", edit("dst: 192.0.2.2", "dst: 2001:db8::2 #<"), e + "dst: 2001:db8::2 is not of the same address family as src 192.0.2.1"},
		{"unspecified dst", edit("dst: 192.0.2.2", "dst: 0.0.0.0 #<"), e + "dst: 0.0.0.0 is the unspecified address"},
		{"bad cipher", edit("enc: aes-cbc", "enc: aes-cbcx #<"), e + `enc: unknown cipher "aes-cbcx"`},
		{"bad auth", edit("auth: hmac-sha1-96", "auth: hmac-sha1 #<"), e + `auth: unknown integrity algorithm "hmac-sha1"`},
		{"aead with auth", mark(edit("enc: aes-cbc", "enc: aes-gcm-16"), "auth: hmac"), e + "auth: aes-gcm-16 is an AEAD cipher: auth must be none, not hmac-sha1-96"},
		{"missing auth", edit("auth: hmac-sha1-96", ""), e + "auth: missing: aes-cbc needs hmac-sha1-96"},
		{"auth-key with aead", mark(strings.Replace(edit("auth: hmac-sha1-96", "auth: none"), "enc: aes-cbc", "enc: aes-gcm-16", 1), "auth-key"), e + "auth-key: not used with this suite: leave it out"},
		{"no integrity", edit("auth: hmac-sha1-96", "auth: none #<"), e + "auth: aes-cbc needs an auth algorithm"},
		{"port without udp", edit("mode: tunnel", "mode: tunnel\n    sport: 4500 #<"), e + "sport: a port needs encap: udp"},
		{"bad port", edit("mode: tunnel", "mode: tunnel\n    encap: udp\n    dport: 70000 #<"), e + `dport: "70000" is not a port 1..65535`},
		{"bad encap", edit("mode: tunnel", "mode: tunnel\n    encap: tcp #<"), e + `encap: "tcp", want none or udp`},
		{"window too big", edit("mode: tunnel", "mode: tunnel\n    replay-window: 4097 #<"), e + `replay-window: "4097", want 0..4096 packets`},
		{"window negative", edit("mode: tunnel", "mode: tunnel\n    replay-window: -1 #<"), e + `replay-window: "-1", want 0..4096`},
		{"esn not bool", edit("mode: tunnel", "mode: tunnel\n    esn: flase #<"), e + `esn: "flase" (did you mean "false"?), want true or false`},
		{"initial-seq without esn", edit("mode: tunnel", "mode: tunnel\n    initial-seq: 0x100000000 #<"), e + "initial-seq: 4294967296 does not fit 32 bits: set esn: true"},
		{"tfc-pad too big", edit("mode: tunnel", "mode: tunnel\n    tfc-pad: 65536 #<"), e + `tfc-pad: "65536", want 0..65535 bytes`},
		{"random size", edit("enc-key: 0x"+testEncHex, "enc-key: random-512 #<"), e + `enc-key: (a 10-character value, not shown), want random, random-128, random-192 or random-256`},
		{"soft over hard", edit("mode: tunnel", "mode: tunnel\n    lifetimes: #<\n      soft: {bytes: 2G}\n      hard: {bytes: 1G}"), e + "lifetimes: soft bytes 2000000000 exceeds hard 1000000000"},
		{"lifetime unknown", edit("mode: tunnel", "mode: tunnel\n    lifetimes:\n      soft: {minutes: 5} #<"), e[:len(e)-2] + ` lifetimes soft: unknown field "minutes" (want one of bytes, packets, seconds, time)`},
		{"lifetime bad time", edit("mode: tunnel", "mode: tunnel\n    lifetimes:\n      hard: {time: soon} #<"), e[:len(e)-2] + ` lifetimes hard: time: "soon" is not a duration`},
		{"lifetime both", edit("mode: tunnel", "mode: tunnel\n    lifetimes:\n      hard: {seconds: 5, time: 5s} #<"), e[:len(e)-2] + " lifetimes hard: time: give seconds or time, not both"},
		{"selector ports without proto", edit("mode: tunnel", "mode: tunnel\n    selectors:\n      - {src: 198.51.100.0/24, dport: 80} #<"), e[:len(e)-2] + " selectors[0]: dport: ports need proto tcp, udp, sctp or udplite, not any"},
		{"selector bad proto", edit("mode: tunnel", "mode: tunnel\n    selectors:\n      - {proto: tcpp} #<"), e[:len(e)-2] + ` selectors[0]: proto: unknown protocol "tcpp"`},
		{"selector host bits", edit("mode: tunnel", "mode: tunnel\n    selectors:\n      - {src: 198.51.100.1/24} #<"), e[:len(e)-2] + " selectors[0]: src: 198.51.100.1/24 has host bits set (did you mean 198.51.100.0/24?)"},
		{"selector family", edit("mode: tunnel", "mode: tunnel\n    selectors:\n      - {src: 198.51.100.0/24, dst: 2001:db8::/32} #<"), e[:len(e)-2] + " selectors[0]: dst: 2001:db8::/32 is not of the same address family as src 198.51.100.0/24"},
		{"selector port range", edit("mode: tunnel", "mode: tunnel\n    selectors:\n      - {proto: udp, sport: 2000-1000} #<"), e[:len(e)-2] + " selectors[0]: sport: port range 2000-1000 is backwards"},
		{"transport selector family", edit("mode: tunnel", "mode: transport\n    selectors:\n      - {dst: 2001:db8::/32} #<"), e[:len(e)-2] + " selectors[0]: 2001:db8::/32 is of another address family than this transport-mode SA"},
		{"duplicate spi", baseSA + mark(baseSA[len("sa:\n"):], "- spi"), "sa[1] (spi 0x1001): spi: duplicate SPI for dst 192.0.2.2 (also sa[0] (spi 0x1001) on line 2)"},
		{"top-level typo", strings.Replace(baseSA, "sa:", "sas: #<", 1), `unknown field "sas" (did you mean "sa"?) (want one of sa, spd)`},
		{"sa not a list", "sa: {spi: 1} #<\n", "sa: want a list of SAs, got a mapping"},
		{"empty sa list", "sa: [] #<\n", "sa: empty list"},
		{"spd protect without sa", baseSA + "spd:\n  - {action: protect} #<\n", "spd[0]: sa: missing: a protect policy names the SPI of its outbound SA"},
		{"spd unknown sa", baseSA + "spd:\n  - {action: protect, sa: 0x2002} #<\n", "spd[0]: sa: no SA with SPI 0x2002"},
		{"spd bypass with sa", baseSA + "spd:\n  - {action: bypass, sa: 0x1001} #<\n", "spd[0]: sa: only a protect policy names an SA"},
		{"spd bad action", baseSA + "spd:\n  - {action: allow} #<\n", `spd[0]: action: unknown action "allow" (want protect, bypass or discard)`},
		{"spd no action", baseSA + "spd:\n  - {src: 10.0.0.0/8} #<\n", "spd[0]: action: missing (protect, bypass or discard)"},
		{"spd bad priority", baseSA + "spd:\n  - {action: discard, priority: high} #<\n", `spd[0]: priority: "high" is not a number`},
		{"spd unknown field", baseSA + "spd:\n  - {action: discard, prio: 1} #<\n", `spd[0]: unknown field "prio"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(c.in))
			if err == nil {
				t.Fatalf("no error for\n%s", c.in)
			}
			line := markedLine(c.in)

			want := fmt.Sprintf("t.yaml:%d: %s", line, c.want)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error\n  %s\nwant it to contain\n  %s", err, want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != "t.yaml" || ce.Line == 0 {
				t.Errorf("error is not a *ConfigError with file and line: %#v", err)
			}
			assertNoSecret(t, "error", err.Error())
		})
	}
}

// mark appends the #< marker to the first line containing sub.
func mark(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.Contains(l, sub) {
			lines[i] += " #<"
			break
		}
	}
	return strings.Join(lines, "\n")
}

// A forgotten line break or colon makes YAML fold a key into the previous
// value; the error about that value must not show it.
func TestParseYAMLFoldedKeyNotShown(t *testing.T) {
	in := edit("enc: aes-cbc", "enc: aes-cbc\n      0x"+testEncHex)
	_, err := Parse("t.yaml", []byte(in))
	want := "t.yaml:6: sa[0] (spi 0x1001): enc: unknown cipher (a 42-character value, not shown)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v\nwant %s", err, want)
	}
	assertNoSecret(t, "error", fmt.Sprint(err))
}

// markedLine is the 1-based line holding "#<", or the line of the first
// "- spi" entry when none is marked.
func markedLine(s string) int {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.Contains(l, "#<") {
			return i + 1
		}
	}
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "- ") {
			return i + 1
		}
	}
	return 1
}

// Input that is not an SA file at all still gets a clear error with the file name.
func TestParseYAMLNotAnSAFile(t *testing.T) {
	for _, in := range []string{"", "sa: [\n", "- 1\n- 2\n", "just text\n", "sa:\n  - 0x" + testEncHex + "\n", "sa: 1\n---\nsa: 2\n"} {
		_, err := Parse("t.yaml", []byte(in))
		if err == nil {
			t.Errorf("%q: no error", in)
			continue
		}
		if !strings.HasPrefix(err.Error(), "t.yaml") {
			t.Errorf("%q: error does not name the file: %v", in, err)
		}
		assertNoSecret(t, "error", err.Error())
	}
}

// Many problems are all reported, in line order, up to a bound.
func TestParseYAMLReportsEveryProblem(t *testing.T) {
	in := strings.Replace(edit("mode: tunnel", "mode: tunel"), "enc: aes-cbc", "enc: aes", 1)
	_, err := Parse("t.yaml", []byte(in))
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !regexp.MustCompile(`(?s)t\.yaml:3: .*mode.*\nt\.yaml:6: .*enc: unknown cipher`).MatchString(msg) {
		t.Errorf("want both problems in line order, got:\n%s", msg)
	}
	var many strings.Builder
	many.WriteString("sa:\n")
	for range 50 {
		many.WriteString("  - {spi: x}\n")
	}
	_, err = Parse("t.yaml", []byte(many.String()))
	if n := strings.Count(err.Error(), "\n") + 1; n > errlist.Max+1 {
		t.Errorf("%d errors reported, want at most %d", n, errlist.Max+1)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	for _, f := range []string{"testdata/example.yaml", "testdata/example.setkey"} {
		c, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseConfig("marshalled.yaml", out)
		if err != nil {
			t.Fatalf("%s: marshalled file does not load: %v\n%s", f, err, out)
		}
		if !reflect.DeepEqual(back.SAs, c.SAs) {
			t.Errorf("%s: SAs changed in the round trip:\n%v\n%v", f, back.SAs, c.SAs)
		}
		if len(back.SPD) != len(c.SPD) {
			t.Fatalf("%s: %d policies back, want %d", f, len(back.SPD), len(c.SPD))
		}
		for i := range c.SPD {
			a, b := back.SPD[i], c.SPD[i]
			if a.Priority != b.Priority || a.Selector != b.Selector || a.Action != b.Action || a.SPI != b.SPI {
				t.Errorf("%s: policy %d: %v, want %v", f, i, &a, &b)
			}
		}
	}
}

// Random keys written out come back byte for byte, leading zeros included.
func TestMarshalRandomKeysRoundTrip(t *testing.T) {
	for i := range 64 {
		enc, auth, err := RandomKeys(Suite{CipherAESCTR, AuthHMACSHA256_128}, 256)
		if err != nil {
			t.Fatal(err)
		}
		enc[0], auth[0] = 0, byte(i%2) // leading zero bytes must survive
		s := &SA{SPI: uint32(0x100 + i), Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
			Suite: Suite{CipherAESCTR, AuthHMACSHA256_128}, EncKey: enc, AuthKey: auth, ReplayWindow: 128}
		path := t.TempDir() + "/sa.yaml"
		if err := WriteFile(path, &Config{SAs: []*SA{s}}); err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Errorf("SA file mode %v, want 0600", fi.Mode().Perm())
		}
		sas, err := LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(sas[0], s) {
			t.Fatalf("round trip changed the SA: %+v, want %+v", *sas[0], *s)
		}
	}
}

func TestMarshalRejectsInvalidSA(t *testing.T) {
	s := &SA{SPI: 0x101, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		Suite: Suite{CipherAESCBC, AuthHMACSHA1_96}, EncKey: mustHex(testEncHex[:30]), AuthKey: mustHex(testAuthHex)}
	_, err := Marshal(&Config{SAs: []*SA{s}})
	if err == nil || !strings.Contains(err.Error(), "enc-key for aes-cbc is 15 bytes") {
		t.Errorf("got %v", err)
	}
	assertNoSecret(t, "error", fmt.Sprint(err))
}

// Anchors and merge keys share fields between entries; an entry's own
// fields win over merged ones.
func TestParseYAMLAnchorsAndMerge(t *testing.T) {
	in := `sa:
  - &out
    spi: 0x1001
    mode: tunnel
    src: 192.0.2.1
    dst: 192.0.2.2
    enc: aes-cbc
    enc-key: &k 0x` + testEncHex + `
    auth: hmac-sha1-96
    auth-key: 0x` + testAuthHex + `
    selectors: &sel
      - {src: 198.51.100.0/24}
  - <<: *out
    spi: 0x1002
    dst: 192.0.2.3
    replay-window: 128
  - <<: [*out]
    spi: 0x1003
    enc-key: *k
    selectors: *sel
`
	sas, err := Parse("t.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(sas) != 3 {
		t.Fatalf("%d SAs", len(sas))
	}
	b := sas[1]
	if b.SPI != 0x1002 || b.Dst != netip.MustParseAddr("192.0.2.3") || b.ReplayWindow != 128 ||
		!bytes.Equal(b.EncKey, sas[0].EncKey) || len(b.Selectors) != 1 || b.Src != sas[0].Src {
		t.Errorf("merged SA: %+v", *b)
	}
	if c := sas[2]; c.SPI != 0x1003 || !bytes.Equal(c.EncKey, sas[0].EncKey) || len(c.Selectors) != 1 {
		t.Errorf("SA from a merge list: %+v", *c)
	}
	// A self-referencing alias is an error, not a hang.
	for _, bad := range []string{"sa: &a [*a]\n", "sa:\n  - &a {<<: *a}\n", "a: &a {<<: *a}\n"} {
		if _, err := Parse("t.yaml", []byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// Merges of merges cannot multiply into a long parse.
func TestParseYAMLMergeBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 {mode: tunnel}\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "a%d: &a%d {<<: [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]}\n")
	}
	b.WriteString("sa:\n  - {<<: *a8, spi: 1}\n")
	_, err := Parse("t.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "<<: merges nested more than 8 deep or more than 10000 in all") {
		t.Errorf("got %v", err)
	}
}
