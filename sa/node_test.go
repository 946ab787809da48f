package sa

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// A gateway config embeds sa: and spd: lists, or only spd: with the SAs in
// another file.
func TestParseNodes(t *testing.T) {
	const doc = `local: 192.0.2.1
spd:
  - {dst: 203.0.113.0/24, action: protect, sa: 0x1001}
  - {action: discard}
`
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	spdNode := root.Content[0].Content[3]
	c, err := ParseNodes("gw.yaml", nil, spdNode)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.SAs) != 0 || len(c.SPD) != 2 || c.SPD[0].SPI != 0x1001 || c.SPD[0].SA != nil {
		t.Fatalf("got %+v", c)
	}
	sas, err := Parse("sas.yaml", []byte(baseSA))
	if err != nil {
		t.Fatal(err)
	}
	spd, err := NewSPD(c.SPD, sas)
	if err != nil {
		t.Fatal(err)
	}
	if spd.Policies()[0].SA != sas[0] {
		t.Error("NewSPD did not bind the policy to SA 0x1001")
	}

	var full yaml.Node
	if err := yaml.Unmarshal([]byte("local: 192.0.2.1\n"+baseSA+"spd:\n  - {action: protect, sa: 0x2002}\n"), &full); err != nil {
		t.Fatal(err)
	}
	m := full.Content[0]
	_, err = ParseNodes("gw.yaml", m.Content[3], m.Content[5])
	if err == nil || !strings.Contains(err.Error(), "gw.yaml:12: spd[0]: sa: no SA with SPI 0x2002") {
		t.Errorf("got %v", err)
	}
}
