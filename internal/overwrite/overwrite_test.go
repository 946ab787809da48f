package overwrite_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/overwrite"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.pcap")
	other := filepath.Join(dir, "other.pcap")
	for _, f := range []string{in, other} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sym := filepath.Join(dir, "sym.pcap")
	hard := filepath.Join(dir, "hard.pcap")
	if err := os.Symlink(in, sym); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	dotted := filepath.Join(dir, ".", "sub", "..", "in.pcap")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(dir, "new.pcap")
	input := overwrite.File{Role: "the input capture", Path: in}
	for _, tc := range []struct {
		name    string
		outputs []overwrite.File
		inputs  []overwrite.File
		want    string // in the error; empty for none
	}{
		{"another file", []overwrite.File{{Role: "the output", Path: other}}, []overwrite.File{input}, ""},
		{"a new file", []overwrite.File{{Role: "the output", Path: fresh}}, []overwrite.File{input}, ""},
		{"no file", []overwrite.File{{Role: "the output", Path: ""}}, []overwrite.File{input}, ""},
		{"no input", []overwrite.File{{Role: "the output", Path: in}}, nil, ""},
		{"a device", []overwrite.File{{Role: "the output", Path: os.DevNull}}, []overwrite.File{{Role: "the SA file", Path: os.DevNull}}, ""},
		{"the input", []overwrite.File{{Role: "the output", Path: in}}, []overwrite.File{input},
			`output "` + in + `" (the output) is the input capture "` + in + `": refusing to write over an input`},
		{"a symbolic link to the input", []overwrite.File{{Role: "the output", Path: sym}}, []overwrite.File{input}, "refusing to write over an input"},
		{"a hard link to the input", []overwrite.File{{Role: "the output", Path: hard}}, []overwrite.File{input}, "refusing to write over an input"},
		{"the input by another name", []overwrite.File{{Role: "the output", Path: dotted}}, []overwrite.File{input}, "refusing to write over an input"},
		{"the second input", []overwrite.File{{Role: "--wireshark-sa", Path: other}}, []overwrite.File{input, {Role: "the SA file", Path: other}}, "is the SA file"},
		{"two outputs, one file", []overwrite.File{{Role: "the output", Path: other}, {Role: "--wireshark-sa", Path: hard}, {Role: "--junit", Path: sym}}, nil,
			"(--junit) is also output"},
		{"two new outputs of one name", []overwrite.File{{Role: "the output", Path: fresh}, {Role: "--junit", Path: filepath.Join(dir, "sub", "..", "new.pcap")}}, nil,
			"give each output its own file"},
		{"two new outputs", []overwrite.File{{Role: "the output", Path: fresh}, {Role: "--junit", Path: filepath.Join(dir, "junit.xml")}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := overwrite.Check(tc.outputs, tc.inputs...)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(in); err != nil || string(b) != "x" {
		t.Errorf("the input changed: %q, %v", b, err)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("Check created %s: %v", fresh, err)
	}
}
