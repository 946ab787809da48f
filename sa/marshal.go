package sa

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/espgw/espgw/internal/secret"
	"go.yaml.in/yaml/v3"
)

// Marshal writes SAs and policies as a YAML SA file that ParseConfig reads
// back to the same values. It is the one place keys are written out: as 0x
// hex, quoted so that no YAML reader takes them for numbers. Each entry is
// encoded on its own, so the memory it takes beyond the output is one
// entry's, however many SAs there are.
func Marshal(c *Config) ([]byte, error) {
	var buf bytes.Buffer
	if len(c.SAs) == 0 {
		buf.WriteString("sa: []\n")
	} else {
		buf.WriteString("sa:\n")
	}
	for _, s := range c.SAs {
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("marshal SA %#x: %w", s.SPI, err)
		}
		if err := encodeItem(&buf, marshalSA(s)); err != nil {
			return nil, err
		}
	}
	if len(c.SPD) > 0 {
		buf.WriteString("spd:\n")
		for i := range c.SPD {
			if err := encodeItem(&buf, marshalPolicy(&c.SPD[i])); err != nil {
				return nil, err
			}
		}
	}
	return buf.Bytes(), nil
}

// encodeItem writes n as one item of a sequence that is the value of a
// top-level key: "  - " and its lines indented under it.
func encodeItem(buf *bytes.Buffer, n *yaml.Node) error {
	var item bytes.Buffer
	enc := yaml.NewEncoder(&item)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{n}}); err != nil {
		return fmt.Errorf("marshal SA file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("marshal SA file: %w", err)
	}
	for line := range bytes.Lines(item.Bytes()) {
		buf.WriteString("  ")
		buf.Write(line)
	}
	return nil
}

// WriteFile writes an SA file readable only by its owner (it holds keys),
// whatever was at path before: see secret.WriteFile.
func WriteFile(path string, c *Config) error {
	data, err := Marshal(c)
	if err != nil {
		return err
	}
	if err := secret.WriteFile(path, data); err != nil {
		return fmt.Errorf("write SA file: %w", err)
	}
	return nil
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode} }

func add(m *yaml.Node, key string, val *yaml.Node) {
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, val)
}

func addStr(m *yaml.Node, key, val string) {
	add(m, key, &yaml.Node{Kind: yaml.ScalarNode, Value: val})
}

func addQuoted(m *yaml.Node, key, val string) {
	add(m, key, &yaml.Node{Kind: yaml.ScalarNode, Value: val, Style: yaml.DoubleQuotedStyle})
}

func marshalSA(s *SA) *yaml.Node {
	m := mapping()
	addStr(m, "spi", fmt.Sprintf("%#x", s.SPI))
	addStr(m, "mode", s.Mode.String())
	addStr(m, "src", s.Src.String())
	addStr(m, "dst", s.Dst.String())
	addStr(m, "encap", s.Encap.String())
	if s.Encap == EncapUDP {
		addStr(m, "sport", strconv.Itoa(int(s.SrcPort)))
		addStr(m, "dport", strconv.Itoa(int(s.DstPort)))
	}
	addStr(m, "enc", s.Suite.Cipher.String())
	if len(s.EncKey) > 0 {
		addQuoted(m, "enc-key", hexKey(s.EncKey))
	}
	addStr(m, "auth", s.Suite.Auth.String())
	if len(s.AuthKey) > 0 {
		addQuoted(m, "auth-key", hexKey(s.AuthKey))
	}
	addStr(m, "esn", strconv.FormatBool(s.ESN))
	addStr(m, "replay-window", strconv.Itoa(s.ReplayWindow))
	if s.InitialSeq != 0 {
		addStr(m, "initial-seq", strconv.FormatUint(s.InitialSeq, 10))
	}
	if s.TFCPad != 0 {
		addStr(m, "tfc-pad", strconv.Itoa(s.TFCPad))
	}
	marshalHeader(m, s)
	if !s.Soft.IsZero() || !s.Hard.IsZero() {
		lt := mapping()
		for _, l := range []struct {
			name string
			l    Lifetime
		}{{"soft", s.Soft}, {"hard", s.Hard}} {
			if l.l.IsZero() {
				continue
			}
			lm := mapping()
			if l.l.Bytes != 0 {
				addStr(lm, "bytes", strconv.FormatUint(l.l.Bytes, 10))
			}
			if l.l.Packets != 0 {
				addStr(lm, "packets", strconv.FormatUint(l.l.Packets, 10))
			}
			if l.l.Time != 0 {
				addStr(lm, "time", l.l.Time.String())
			}
			add(lt, l.name, lm)
		}
		add(m, "lifetimes", lt)
	}
	if len(s.Selectors) > 0 {
		sels := &yaml.Node{Kind: yaml.SequenceNode}
		for _, sel := range s.Selectors {
			sm := mapping()
			marshalSelector(sm, sel)
			sels.Content = append(sels.Content, sm)
		}
		add(m, "selectors", sels)
	}
	return m
}

func marshalSelector(m *yaml.Node, sel Selector) {
	if sel.Src.IsValid() {
		addStr(m, "src", sel.Src.String())
	}
	if sel.Dst.IsValid() {
		addStr(m, "dst", sel.Dst.String())
	}
	if sel.Proto != 0 {
		addStr(m, "proto", ProtoName(sel.Proto))
	}
	if sel.SrcPorts != (PortRange{}) {
		addStr(m, "sport", sel.SrcPorts.String())
	}
	if sel.DstPorts != (PortRange{}) {
		addStr(m, "dport", sel.DstPorts.String())
	}
}

func marshalPolicy(p *Policy) *yaml.Node {
	m := mapping()
	if p.Priority != 0 {
		addStr(m, "priority", strconv.Itoa(p.Priority))
	}
	marshalSelector(m, p.Selector)
	addStr(m, "action", p.Action.String())
	if p.Action == Protect {
		spi := p.SPI
		if p.SA != nil {
			spi = p.SA.SPI
		}
		addStr(m, "sa", fmt.Sprintf("%#x", spi))
	}
	return m
}
