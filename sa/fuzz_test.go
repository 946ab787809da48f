package sa

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// seeds adds every file of testdata matching the pattern to the corpus.
func seeds(f *testing.F, pattern string) {
	files, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed files %s: %v", pattern, err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FuzzParseYAML: any input yields SAs or an error, never a panic; what
// parses survives Marshal and parses back to the same SAs.
func FuzzParseYAML(f *testing.F) {
	seeds(f, "*.yaml")
	f.Add([]byte(baseSA))
	f.Add([]byte("sa:\n  - {spi: 1, src: ::1, dst: ::2, enc: aes-gcm-16, enc-key: random-256}\n"))
	f.Add([]byte("sa:\n  - {spi: 0x101, src: ::1, dst: ::2, enc: chacha20-poly1305, enc-key: random}\n"))
	f.Add([]byte("sa:\n  - {spi: 0x102, src: 192.0.2.1, dst: 192.0.2.2, enc: aes-ccm-12, enc-key: random-192}\n"))
	f.Add([]byte("sa: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseYAML("f.yaml", data)
		if err != nil {
			assertNoInputKey(t, data, err)
			return
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatalf("parsed config does not marshal: %v", err)
		}
		back, err := ParseYAML("marshalled.yaml", out)
		if err != nil {
			t.Fatalf("marshalled config does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back.SAs, c.SAs) {
			t.Fatalf("round trip changed the SAs")
		}
		if _, err := NewSAD(c.SAs); err != nil {
			t.Fatalf("parsed SAs rejected by NewSAD: %v", err)
		}
		if _, err := NewSPD(c.SPD, c.SAs); err != nil {
			t.Fatalf("parsed policies rejected by NewSPD: %v", err)
		}
	})
}

// FuzzParseSetkey: any input yields SAs or an error, never a panic; what
// is imported is valid and marshals.
func FuzzParseSetkey(f *testing.F) {
	seeds(f, "*.setkey")
	f.Add([]byte("add 192.0.2.1 192.0.2.2 esp 0x1001 -E null -A hmac-md5 \"0123456789abcdef\";"))
	f.Add([]byte("spdadd 0.0.0.0/0 0.0.0.0/0 any -P out prio high - 5 discard;"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseSetkey("f.setkey", data)
		if err != nil {
			assertNoInputKey(t, data, err)
			return
		}
		if _, err := NewSAD(c.SAs); err != nil {
			t.Fatalf("imported SAs rejected by NewSAD: %v", err)
		}
		if _, err := NewSPD(c.SPD, c.SAs); err != nil {
			t.Fatalf("imported policies rejected by NewSPD: %v", err)
		}
		if _, err := Marshal(c); err != nil {
			t.Fatalf("imported config does not marshal: %v", err)
		}
	})
}

// keyLike matches what may be key material in an input: 16 or more hex
// digits with at least one letter (long decimal numbers are not keys).
var keyLike = regexp.MustCompile(`[0-9a-fA-F]{16,}`)

// assertNoInputKey fails if the error repeats a key-like run of the input.
func assertNoInputKey(t *testing.T, input []byte, err error) {
	t.Helper()
	msg := err.Error()
	for _, run := range keyLike.FindAllString(msg, -1) {
		if strings.ContainsAny(run, "abcdefABCDEF") && bytes.Contains(input, []byte(run)) {
			t.Fatalf("error repeats key-like input %q: %s", run, msg)
		}
	}
}

// FuzzParseOtherFormats: ip xfrm listings and commands, esp_sa tables and
// charon logs yield SAs or an error naming no key, never a panic; what
// parses is valid and writes back as YAML that reads to the same SAs.
func FuzzParseOtherFormats(f *testing.F) {
	seeds(f, "*.txt")
	seeds(f, "*.log")
	f.Add([]byte("ip xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x1001 mode tunnel aead 'rfc4106(gcm(aes))' 0x" + testGCMHex + " 128\nip xfrm policy add src 198.51.100.0/24 dst 203.0.113.0/24 dir out tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 4097 mode tunnel\n"))
	f.Add([]byte("ip xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x1002 mode tunnel aead 'rfc4309(ccm(aes))' 0x" + testGCMHex[:38] + " 96\n"))
	f.Add([]byte(`"IPv4","192.0.2.1","192.0.2.2","0x00001001","AES-CBC [RFC3602]","0x` + testEncHex + `","HMAC-SHA-1-96 [RFC2404]","0x` + testAuthHex + `"` + "\n"))
	f.Add([]byte("src 0.0.0.0 dst 0.0.0.0 \n lifetime config: \n limit:")) // once a slice out of range
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := ParseXFRMStates("f", data); err != nil {
			assertNoInputKey(t, data, err)
		}
		for _, p := range []func(string, []byte) (*Config, error){ParseXFRMState, ParseXFRMCommands, ParseEspSA, ParseCharonLog} {
			c, err := p("f", data)
			if err != nil {
				assertNoInputKey(t, data, err)
				continue
			}
			for _, s := range c.SAs {
				if err := s.Validate(); err != nil {
					t.Fatalf("parsed SA does not validate: %v", err)
				}
			}
			out, err := Marshal(c)
			if err != nil {
				t.Fatalf("parsed config does not marshal: %v", err)
			}
			back, err := ParseYAML("m.yaml", out)
			if err != nil || !reflect.DeepEqual(back.SAs, c.SAs) {
				t.Fatalf("YAML round trip: %v", err)
			}
		}
	})
}
