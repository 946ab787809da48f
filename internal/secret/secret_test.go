package secret

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// One rule for every quote: harmless words are shown (misspelt ones with
// the nearest valid name), what could be a key or part of one is not.
func TestWord(t *testing.T) {
	algs := []string{"hmac-sha1-96", "hmac-sha2-256-128", "none", "aes-cbc"}
	for _, c := range []struct {
		in, want string // want "" for hidden
	}{
		{"hmac-sha1-69", `"hmac-sha1-69" (did you mean "hmac-sha1-96"?)`},
		{"HMAC-SHA1-96x", `"HMAC-SHA1-96x" (did you mean "hmac-sha1-96"?)`},
		{"AES-CBCC", `"AES-CBCC" (did you mean "aes-cbc"?)`},
		{"AES-CBC", `"AES-CBC"`}, // itself, in another case
		{"bogus", `"bogus"`},
		{"bogus-opt", `"bogus-opt"`},
		{"mypassword", `"mypassword"`},
		{"randomSecretValue", ""}, // base64-like
		{"c2VjcmV0c2VjcmV0c2VjcmV0", ""},
		{"hmac-sha1-96 0011223344556677", ""}, // a folded key
		{"a1b2c3d4e5f6a7b8", ""},              // hex run
		{"0x00112233445566778899aabbccddeeff", ""},
		{"001122334455667788990011223344", ""}, // a long run of digits
		{"", ""},
		{strings.Repeat("hmac-sha1-96", 5), ""},
		{"hmac-\x01sha1", ""},
		{`"quoted"`, ""},
	} {
		got := Word(c.in, algs...)
		if c.want == "" && (strings.HasPrefix(got, `"`) || c.in != "" && strings.Contains(got, c.in)) || c.want != "" && got != c.want {
			t.Errorf("Word(%q) = %s, want %s", c.in, got, cmpOr(c.want, "hidden"))
		}
	}
	if got := Word("AES-CBCC", "NULL", "AES-CBC [RFC3602]"); got != `"AES-CBCC" (did you mean "AES-CBC [RFC3602]"?)` {
		t.Errorf("Word of an esp_sa name: %s", got)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestNumber(t *testing.T) {
	for _, c := range []struct {
		in    string
		shown bool
	}{
		{"1500", true}, {"-5s", true}, {"10ms", true}, {"1Gi", true}, {"192.0.2.300", true},
		{"2001:db8::g", true}, {"nowhere", true}, {"secret", true},
		{"0x1001", true}, {"0xdeadbeef", true}, // an SPI
		{"0xdeadbeef01", false}, {"a1b2c3d4e5f6", false}, // could be a hex key
		{"randomSecretValue", false},
		{"198.51.100.0/24", true}, {"[4500]", true},
	} {
		got := Number(c.in)
		if shown := strings.HasPrefix(got, `"`); shown != c.shown {
			t.Errorf("Number(%q) = %s, shown %v, want %v", c.in, got, shown, c.shown)
		}
	}
}

// A value yaml.v3 cut short ("0011223...") is never shown: its unseen rest
// may be a key.
func TestScrub(t *testing.T) {
	for in, want := range map[string]string{
		"line 3: cannot unmarshal !!str `mysecre...` into int": "line 3: cannot unmarshal !!str (a value, not shown) into int",
		"line 3: cannot unmarshal !!str `0011223...` into int": "line 3: cannot unmarshal !!str (a value, not shown) into int",
		"line 3: cannot unmarshal !!str `-5x` into int":        "line 3: cannot unmarshal !!str `-5x` into int",
		"no quotes here":  "no quotes here",
		"unbalanced `abc": "unbalanced `abc",
	} {
		if got := Scrub(in); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", in, got, want)
		}
	}
}

// A key file ends up 0600 whatever was there before: a world-readable file
// is replaced, a symlink's target too, and no temporary file is left.
func TestWriteFileMode(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "esp_sa")
	if err := os.WriteFile(old, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(target, 0o666)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, check string }{
		{old, old}, {filepath.Join(dir, "new"), filepath.Join(dir, "new")}, {link, target},
	} {
		if err := WriteFile(c.path, []byte("keys")); err != nil {
			t.Fatalf("WriteFile %s: %v", c.path, err)
		}
		fi, err := os.Stat(c.check)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != FileMode {
			t.Errorf("%s: mode %v, want %v", c.check, fi.Mode().Perm(), FileMode)
		}
		if b, _ := os.ReadFile(c.check); string(b) != "keys" {
			t.Errorf("%s holds %q", c.check, b)
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v %v", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	if err := WriteFile(dir, []byte("x")); err == nil {
		t.Error("WriteFile over a directory: no error")
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x"), []byte("x")); err == nil {
		t.Error("WriteFile into a missing directory: no error")
	}
}

func TestName(t *testing.T) {
	for in, shown := range map[string]bool{
		"traffic.steps[0].ping": true, "gw1-to-gw2.corrupted": true, ">= 0.99": true, "delivered - 5": true,
		"0A00000000000000": false, "deadbeefdeadbeef": false, "randomSecretValue": false, `a"b`: false, "": false,
	} {
		if got := Name(in); strings.HasPrefix(got, `"`) != shown {
			t.Errorf("Name(%q) = %s, want shown %v", in, got, shown)
		}
	}
	if got := Scrub("unknown anchor '000000000000000A00' referenced"); strings.Contains(got, "000000000000000A00") {
		t.Errorf("Scrub left an anchor name: %s", got)
	}
}
