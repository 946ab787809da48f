package secret

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWord(t *testing.T) {
	algs := []string{"hmac-sha1-96", "hmac-sha2-256-128", "none"}
	for _, c := range []struct {
		in    string
		shown bool
	}{
		{"hmac-sha1-69", true},  // a typo is worth pointing at
		{"hmac-sha1", true},     // setkey's name in a YAML file
		{"HMAC-SHA1-96x", true}, // case does not matter
		{"nome", true},
		{"randomSecretValue", false}, // an ASCII key in auth:
		{"mypassword", false},
		{"hmac-sha1-96 0011223344556677", false}, // spaces: a folded key
		{"a1b2c3d4e5f6a7b8", false},              // hex run
		{"", false},
		{strings.Repeat("hmac-sha1-96", 5), false},
		{"hmac-\x01sha1", false},
	} {
		got := Word(c.in, algs...)
		if shown := strings.HasPrefix(got, `"`); shown != c.shown {
			t.Errorf("Word(%q) = %s, shown %v, want %v", c.in, got, shown, c.shown)
		}
		if !c.shown && c.in != "" && strings.Contains(got, c.in) {
			t.Errorf("Word(%q) = %s shows it", c.in, got)
		}
	}
	if got := Word("tunnel"); strings.Contains(got, "tunnel") {
		t.Errorf("Word with no known words shows %s", got)
	}
}

func TestNumber(t *testing.T) {
	for _, c := range []struct {
		in    string
		shown bool
	}{
		{"1500", true}, {"-5s", true}, {"10ms", true}, {"1Gi", true}, {"192.0.2.300", true},
		{"2001:db8::g", false},                 // g is no number character
		{"0x1001", true}, {"0xdeadbeef", true}, // an SPI
		{"0xdeadbeef01", false}, {"a1b2c3d4e5f6", false}, // could be a hex key
		{"randomSecret", false}, {"s3cret", false}, {"secret", false}, // no digit
		{"198.51.100.0/24", true}, {"[4500]", true},
	} {
		got := Number(c.in)
		if shown := strings.HasPrefix(got, `"`); shown != c.shown {
			t.Errorf("Number(%q) = %s, shown %v, want %v", c.in, got, shown, c.shown)
		}
	}
}

func TestScrub(t *testing.T) {
	for in, want := range map[string]string{
		"line 3: cannot unmarshal !!str `mysecre...` into int": "line 3: cannot unmarshal !!str (a value, not shown) into int",
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
		"0A00000000000000": false, "deadbeefdeadbeef": false, "Secret": false, `a"b`: false, "": false,
	} {
		if got := Name(in); strings.HasPrefix(got, `"`) != shown {
			t.Errorf("Name(%q) = %s, want shown %v", in, got, shown)
		}
	}
	if got := Scrub("unknown anchor '000000000000000A00' referenced"); strings.Contains(got, "000000000000000A00") {
		t.Errorf("Scrub left an anchor name: %s", got)
	}
}
