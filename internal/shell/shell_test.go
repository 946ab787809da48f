package shell_test

import (
	"os/exec"
	"testing"

	"github.com/espgw/espgw/internal/shell"
)

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"state", "state"},
		{"0xabcd", "0xabcd"},
		{"192.0.2.1/32", "192.0.2.1/32"},
		{"", "''"},
		{"two words", "'two words'"},
		{"it's", `'it'\''s'`},
		{"$HOME", "'$HOME'"},
		{"a;b", "'a;b'"},
		{"*", "'*'"},
		{"rfc4106(gcm(aes))", "'rfc4106(gcm(aes))'"},
		{"~", "'~'"},
		{"x\ny", "'x\ny'"},
	} {
		if got := shell.Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// sh reads every quoted word back as the word it was.
func TestQuoteRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	words := []string{"plain", "", "two words", "it's", `back\slash`, "$HOME", "`id`", "a;b|c&d", "*?[x]", "\"q\"", "x\ny", "#c", "~", "!"}
	for _, w := range words {
		out, err := exec.Command(sh, "-c", "printf %s "+shell.Quote(w)).Output()
		if err != nil {
			t.Fatalf("sh on %q: %v", w, err)
		}
		if string(out) != w {
			t.Errorf("sh read %s as %q, want %q", shell.Quote(w), out, w)
		}
	}
	line := "for w in"
	for _, w := range words {
		line += " " + shell.Quote(w)
	}
	out, err := exec.Command(sh, "-c", line+`; do printf '<%s>' "$w"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, w := range words {
		want += "<" + w + ">"
	}
	if string(out) != want {
		t.Errorf("sh read the list as %q, want %q", out, want)
	}
}
