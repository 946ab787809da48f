package sa

import (
	"go.yaml.in/yaml/v3"
)

// ParseNodes reads SAs and policies from the sa: and spd: values of a larger
// YAML document (a gateway config embeds them); either may be nil. Errors
// carry the lines of the original file. With saList nil, the policies'
// SAs come from elsewhere: protect policies keep only their SPI, and
// NewSPD binds them to the SAs it is given.
func ParseNodes(name string, saList, spdList *yaml.Node) (*Config, error) {
	m := &yaml.Node{Kind: yaml.MappingNode}
	if saList != nil {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "sa", Line: saList.Line}, saList)
	}
	if spdList != nil {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "spd", Line: spdList.Line}, spdList)
	}
	p := &yamlParser{file: name, spdOnly: saList == nil}
	c := p.config(m)
	if err := p.errs.Err(); err != nil {
		return nil, err
	}
	return c, nil
}
