package wanrelay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "relay.yaml")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := LoadConfig(write(`
netns: wan
a: gw1
b: gw2
a_to_b:
  loss: 2
  replay: {percent: 1, after: 50ms}
pcap: /tmp/wan.pcap
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Netns != "wan" || c.A != "gw1" || c.AToB.Loss != 2 || c.AToB.Replay.After != 50*time.Millisecond ||
		c.AToB.Reorder.Depth != 3 || c.BToA.Loss != 0 {
		t.Fatalf("decoded %+v", c)
	}
	for src, want := range map[string]string{
		"a: x\nb: y\nloss: 3\n":                            "field loss not found",
		"a_to_b: {loss: 300}\n":                            "loss 300",
		"a: x\na_to_b:\n  loss: 1\n  corrupt: {byts: 1}\n": "line 4: field byts not found",
	} {
		_, err := LoadConfig(write(src))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "relay.yaml") {
			t.Errorf("%q: error %v, want it to name the file and say %q", src, err, want)
		}
	}
}
