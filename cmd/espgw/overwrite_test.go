package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/labtest"
)

// runStdin is run with standard input read from the file stdin.
func runStdin(bin, stdin string, args ...string) (stdout, stderr string, code int) {
	f, err := os.Open(stdin)
	if err != nil {
		return "", err.Error(), -1
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = f
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		return o.String(), e.String(), -1
	}
	return o.String(), e.String(), 0
}

// No command writes over one of its inputs: an output that is the SA file,
// the input capture or the scenario file (by name, a symbolic link, a hard
// link or a redirected standard input) is refused before anything is
// written, and the input is left as it was.
func TestNoCommandWritesOverItsInput(t *testing.T) {
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "k.setkey")
	setkey := "add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -E aes-cbc 0x00112233445566778899aabbccddeeff -A hmac-sha1 0x0102030405060708090a0b0c0d0e0f1011121314;\n"
	os.WriteFile(keys, []byte(setkey), 0o600)
	link := filepath.Join(dir, "link.setkey")
	if err := os.Symlink(keys, link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.setkey")
	if err := os.Link(keys, hard); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in.pcap")
	rawCapture(t, in)
	esp := filepath.Join(dir, "esp.pcap")
	if _, errOut, code := run(bin, "pcap", "seal", "--sa", keys, in, esp); code != 0 {
		t.Fatalf("seal: %s", errOut)
	}
	scen := filepath.Join(dir, "s.yaml")
	data, err := os.ReadFile("../../scenarios/df-fragment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(scen, data, 0o644)
	out := filepath.Join(dir, "out.pcap")
	for _, c := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{args: []string{"pcap", "open", "--sa", keys, esp, keys}, want: `output "` + keys + `" (the output capture) is the SA file`},
		{args: []string{"pcap", "open", "--sa", keys, esp, link}, want: "is the SA file"},
		{args: []string{"pcap", "open", "--sa", link, esp, hard}, want: "is the SA file"},
		{args: []string{"pcap", "seal", "--sa", keys, in, keys}, want: "is the SA file"},
		{args: []string{"pcap", "seal", "--sa", keys, "--wireshark-sa", hard, in, out}, want: "(--wireshark-sa) is the SA file"},
		{args: []string{"pcap", "open", "--sa", keys, "--wireshark-sa", esp, esp, out}, want: "(--wireshark-sa) is the input capture"},
		{args: []string{"pcap", "seal", "--sa", keys, "--wireshark-sa", out, in, out}, want: "is also output"},
		{args: []string{"pcap", "seal", "--sa", keys, in, in}, want: "is the input capture"},
		{args: []string{"sa", "convert", "--to", "yaml", keys, keys}, want: "(OUT) is the input"},
		{args: []string{"sa", "convert", "--to", "setkey", link, hard}, want: "(OUT) is the input"},
		{args: []string{"sa", "convert", "--to", "yaml", "-", keys}, stdin: keys, want: "(OUT) is the input standard input"},
		{args: []string{"scenario", "run", "--junit", scen, scen}, want: "(--junit) is the scenario file"},
	} {
		var errOut string
		var code int
		if c.stdin != "" {
			_, errOut, code = runStdin(bin, c.stdin, c.args...)
		} else {
			_, errOut, code = run(bin, c.args...)
		}
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q, want a refusal saying %q", c.args, code, errOut, c.want)
		}
		if strings.Contains(errOut, "00112233445566778899") {
			t.Errorf("%v: the error shows a key: %s", c.args, errOut)
		}
		if b, _ := os.ReadFile(keys); string(b) != setkey {
			t.Fatalf("%v wrote over the SA file: now %d bytes", c.args, len(b))
		}
		if b, _ := os.ReadFile(scen); string(b) != string(data) {
			t.Fatalf("%v wrote over the scenario file", c.args)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused command left %s behind", out)
	}
	// sa convert - reads standard input.
	yamlOut, errOut, code := runStdin(bin, keys, "sa", "convert", "--to", "yaml", "-")
	if code != 0 || !strings.Contains(yamlOut, "spi: 0x1001") {
		t.Errorf("sa convert - < k.setkey: exit %d, %q %q", code, yamlOut, errOut)
	}
}
